"""Faults and contract checks: kill -9 of every process level mid-batch, SIGSTOP, close()
racing runs and restarts, 64 threads. No result may be lost or misattributed, run() never
raises once entered, and no process of a sandbox outlives its close()."""

import ctypes
import os
import resource
import signal
import threading
import time

import psutil
import pytest

from agentic_jax.sandbox import ExecResult, Sandbox, SandboxConfig
from agentic_jax.sandbox.server import PREPARED_AHEAD
from tests.sandbox.conftest import probe

PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture(scope="module", autouse=True)
def subreaper():
    """Orphans of this process (a worker's server once its outer process died) are re-parented
    here instead of to init, so that `_descendants` sees every process a sandbox started."""
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    yield
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    for proc in psutil.Process().children():  # reap the adopted servers, nobody else will
        if proc.name().startswith("sandbox-") and proc.status() == psutil.STATUS_ZOMBIE:
            os.waitpid(proc.pid, 0)


def _descendants() -> set[int]:
    live = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                live.add(proc.pid)
        except psutil.NoSuchProcess:
            pass
    return live


def _levels(box: Sandbox, index: int = 0) -> dict[str, list[int]]:
    """PIDs of one worker by level: outer, server, template, child (waiting or running).

    A child just forked from the template still bears the template's name until it isolates
    itself, so "template" may list such a child too (see `_victim`)."""
    outer = psutil.Process(box.worker_pids()[index])
    found = {"outer": [outer.pid], "server": [], "template": [], "child": []}
    names = {"sandbox-server": "server", "sandbox-tmpl": "template", "sandbox-child": "child"}
    for proc in outer.children(recursive=True):
        try:
            level = names.get(proc.name())
        except psutil.NoSuchProcess:
            continue
        if level:
            found[level].append(proc.pid)
    return found


def _victim(box: Sandbox, level: str) -> int:
    """A process of worker 0 at ``level``. Children live for milliseconds: look until one is
    caught. The template is taken only when it is the one process of that name (the template
    always is; a child bears it only between its fork and its isolation), never a child
    caught in between."""
    deadline = time.monotonic() + 10
    while True:
        found = _levels(box)[level]
        if len(found) == 1 or (found and level != "template"):
            return found[0]
        assert time.monotonic() < deadline, (level, found)


def _kill_and_wait(pid: int) -> bool:
    """SIGKILL ``pid`` and wait until it has died: a zombie counts (the template's parent
    never reaps it), and so does a process its parent has reaped. False when it had ended
    before the signal (a child that finished its snippet meanwhile)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        proc.send_signal(signal.SIGKILL)  # psutil checks first that the PID is still that one
    except psutil.NoSuchProcess:
        return False
    deadline = time.monotonic() + 30
    while True:
        try:
            if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        assert time.monotonic() < deadline, pid
        time.sleep(0.005)


def _work(i: int) -> str:
    return f"import math\nx = sum(range({300_000 + i}))\nprint({i}, x % 7)"


def _expected(i: int) -> str:
    return f"{i} {sum(range(300_000 + i)) % 7}\n"


@pytest.mark.parametrize("level", ["outer", "server", "template", "child"])
def test_kill_of_each_process_level_mid_batch(level):
    before = _descendants()
    with Sandbox(SandboxConfig(num_workers=2, timeout_ms=10_000, cache_size=0)) as box:
        probe(box)
        futures = [box.submit(_work(i)) for i in range(24)]
        time.sleep(0.1)
        # Wait for the death itself: a killed process takes a while to go (longer on a busy
        # host), and until it has, the worker may still serve as if nothing had happened.
        while not _kill_and_wait(_victim(box, level)):
            pass
        results = [f.result(timeout=120) for f in futures]
        for i, result in enumerate(results):
            assert (result.ok and result.stdout == _expected(i)) or \
                result.error == "SystemError", (i, result)
        failed = sum(not r.ok for r in results)
        # A template lost between snippets costs nobody anything: the request is re-run on
        # the replacement; otherwise at most the one snippet in flight on that worker fails.
        assert failed <= (0 if level == "template" else 1), results
        # The kill may come after the worker's last snippet of the batch. Children prepared
        # before the template was lost still serve (they were forked from it while it was
        # clean): the worker finds it gone, and is replaced, by its (PREPARED_AHEAD + 1)th
        # request at the latest. Idle workers are handed out in turn, so these probes give
        # each worker that many.
        for _ in range(box.stats()["workers"] * (PREPARED_AHEAD + 1)):
            probe(box)
        assert box.stats()["restarts"] == (0 if level == "child" else 1)
    assert _descendants() <= before


def test_a_request_that_finds_the_server_dead_runs_on_the_replacement():
    """The serving process died between requests, taking its prepared children along, and
    the outer process (stopped here) has not exited yet: the next request's code reaches no
    child, so it is run on the replacement instead of failing."""
    before = _descendants()
    with Sandbox(SandboxConfig(num_workers=1, timeout_ms=5000, cache_size=0)) as box:
        probe(box)
        levels = _levels(box)
        os.kill(levels["outer"][0], signal.SIGSTOP)
        assert _kill_and_wait(levels["server"][0])
        result = box.run(_work(3))
        assert result.ok and result.stdout == _expected(3), result
        assert box.stats()["restarts"] == 1
        probe(box)
    assert _descendants() <= before


def _children_when(box: Sandbox, count: int) -> list[int]:
    """The worker's children once there are exactly ``count`` (they come and go)."""
    deadline = time.monotonic() + 10
    while len(children := _levels(box)["child"]) != count:
        assert time.monotonic() < deadline, children
        time.sleep(0.01)
    return children


def _busy_child(box: Sandbox, cpu_s: float = 0.05) -> int:
    """The child running a busy loop, once it has run ``cpu_s``: until then the children
    listed may still be an earlier snippet's, not yet reaped, and the prepared ones."""
    deadline = time.monotonic() + 10
    while True:
        for pid in _levels(box)["child"]:
            try:
                if sum(psutil.Process(pid).cpu_times()[:2]) >= cpu_s:
                    return pid
            except psutil.NoSuchProcess:
                continue
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.mark.parametrize("while_running", [False, True])
def test_killing_every_child_fails_only_the_running_snippet(while_running):
    """Children the server prepares ahead die before any code reaches them: the requests
    they were to serve run on the next ones, and the worker is not replaced. Only the
    snippet running when its own child is killed fails, once."""
    before = _descendants()
    with Sandbox(SandboxConfig(num_workers=1, timeout_ms=5000, cache_size=0)) as box:
        probe(box)
        running = box.submit("while True:\n    pass") if while_running else None
        if running is not None:
            _busy_child(box)
        for pid in _children_when(box, 3 if while_running else 2):
            os.kill(pid, signal.SIGKILL)
        if running is not None:
            killed = running.result(timeout=60)
            assert killed.error == "SystemError" and "SIGKILL" in killed.message, killed
        for i in range(4):
            result = box.run(_work(i))
            assert result.ok and result.stdout == _expected(i), result
        assert box.stats()["restarts"] == 0
    assert _descendants() <= before


@pytest.mark.parametrize("level", ["server", "template", "child"])
def test_sigstop_of_a_process_level_is_bounded(level):
    before = _descendants()
    cfg = SandboxConfig(num_workers=1, timeout_ms=500, grace_ms=500, cache_size=0)
    with Sandbox(cfg) as box:
        probe(box)
        time.sleep(0.5)
        # The finished child reaped, two prepared ones left, both isolated (a child bears the
        # template's name until then).
        deadline = time.monotonic() + 10
        while True:
            levels = _levels(box)
            if {k: len(v) for k, v in levels.items()} == {"outer": 1, "server": 1,
                                                          "template": 1, "child": 2}:
                break
            assert time.monotonic() < deadline, levels
            time.sleep(0.05)
        victims = levels[level]
        for pid in victims:
            os.kill(pid, signal.SIGSTOP)
        start = time.monotonic()
        first = box.run(_work(1))
        second = box.run(_work(2))
        elapsed = time.monotonic() - start
        if level == "child":  # the server kills it at the deadline, stopped or not
            assert first.error == "TimeoutError", first
        else:  # the prepared child still serves; a request the worker could not start is
            assert first.ok and second.ok, (first, second)  # re-run on the replacement
        assert elapsed < 30
        probe(box)
    assert _descendants() <= before


def test_close_racing_64_threads_never_raises_anything_else():
    before = _descendants()
    box = Sandbox(SandboxConfig(num_workers=2, timeout_ms=5000, cache_size=0))
    seen: set[int] = set()
    outcomes: list[object] = []
    stop = threading.Event()

    def monitor():
        while not stop.is_set():
            seen.update(_descendants() - before)
            time.sleep(0.01)

    def caller(t: int):
        for k in range(1000):
            try:
                code = _work(t * 1000 + k)
                result = box.run(code)
            except RuntimeError as err:
                outcomes.append(str(err))
                return
            except BaseException as err:  # noqa: BLE001 - anything else breaks the contract
                outcomes.append(err)
                return
            assert isinstance(result, ExecResult)
            outcomes.append(result.ok and result.stdout == _expected(t * 1000 + k)
                            or result.error == "SystemError")

    threads = [threading.Thread(target=caller, args=(t,)) for t in range(64)]
    watcher = threading.Thread(target=monitor)
    watcher.start()
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    box.close()
    gone_at_close = not (set(seen) & _descendants())
    for thread in threads:
        thread.join(timeout=60)
    stop.set()
    watcher.join()
    assert gone_at_close and len(seen) >= 6
    assert all(o is True or o == "Sandbox is closed" for o in outcomes), \
        [o for o in outcomes if o is not True and o != "Sandbox is closed"][:5]
    assert outcomes.count("Sandbox is closed") == 64
    with pytest.raises(RuntimeError, match="Sandbox is closed"):
        box.run("print(1)")


@pytest.mark.parametrize("delay_s", [0.0, 0.05, 0.3, 1.0])
def test_close_during_a_worker_restart_leaves_no_process(delay_s):
    before = _descendants()
    box = Sandbox(SandboxConfig(num_workers=1, timeout_ms=2000, cache_size=0))
    probe(box)
    os.killpg(box.worker_pids()[0], signal.SIGKILL)
    results = []
    runner = threading.Thread(target=lambda: results.append(box.run(_work(7))))
    runner.start()  # finds the worker dead and restarts it
    time.sleep(delay_s)
    box.close()
    assert _descendants() <= before
    runner.join(timeout=60)
    assert len(results) == 1 and isinstance(results[0], ExecResult)
    assert results[0].ok or results[0].error == "SystemError", results[0]
    time.sleep(0.2)
    assert _descendants() <= before


def test_64_threads_get_their_own_results():
    with Sandbox(SandboxConfig(num_workers=2, timeout_ms=10_000, cache_size=0)) as box:
        results: dict[int, ExecResult] = {}

        def caller(t: int):
            for k in range(2):
                i = 10_000 + t * 2 + k
                results[i] = box.run(_work(i))

        threads = [threading.Thread(target=caller, args=(t,)) for t in range(64)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert len(results) == 128
        assert all(r.ok and r.stdout == _expected(i) for i, r in results.items())


def test_a_host_holding_descriptors_past_1023_is_served():
    """A long-running host (a server with many connections) hands out descriptor numbers past
    select(2)'s 1023, and the worker inherits its channel's number: each side waits with
    poll(2), so every concurrent caller still gets its own result."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"this process may hold only {hard} descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with Sandbox(SandboxConfig(num_workers=2, timeout_ms=10_000, cache_size=0)) as box:
            futures = {i: box.submit(_work(i)) for i in range(8)}
            results = {i: f.result(timeout=120) for i, f in futures.items()}
            assert all(r.ok and r.stdout == _expected(i) for i, r in results.items()), results
            assert box.stats()["restarts"] == 0
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
