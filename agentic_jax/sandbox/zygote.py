"""A warm worker ("zygote"): imports the whitelist once, isolates itself, forks per snippet.

Started by the host as `python -I -c BOOT ROOT CONFIG_JSON`. Talks JSON lines on its original
stdin/stdout. Layout when namespaces are available:
    outer process (host's child)  -- waits only
      └ inner process, PID 1 of a new PID namespace: serves requests
          └ one short-lived child per snippet (new session, limits, nobody, seccomp)
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import shutil
import signal
import tempfile
import time

from agentic_jax.sandbox import isolation, syscalls
from agentic_jax.sandbox.child import ChildPlan, run_child
from agentic_jax.sandbox.output import OutputCapture
from agentic_jax.sandbox.protocol import ChannelClosed, JsonLineReader, send_json

_RESULT_CAP = 1 << 16


def _warm_sympy(sympy) -> None:
    x = sympy.Symbol("x")
    sympy.solve(x**2 - 4, x)
    sympy.integrate(x * sympy.sin(x), x)
    sympy.diff(sympy.exp(x**2), x)
    sympy.simplify((x**2 - 1) / (x - 1))
    sympy.factor(x**3 - x)
    sympy.limit(sympy.sin(x) / x, x, 0)
    sympy.Matrix([[1, 2], [3, 4]]).det()
    str(sympy.Rational(1, 3) + sympy.sqrt(2))
    sympy.latex(x**2)
    sympy.nsimplify(0.5)
    sympy.isprime(97)


def _warm_numpy(numpy) -> None:
    a = numpy.arange(12.0).reshape(3, 4)
    numpy.linalg.solve(numpy.eye(3) * 2.0, numpy.ones(3))
    str(a @ a.T)
    numpy.fft.fft(a[0])
    numpy.random.default_rng(0).random(3)
    numpy.polyfit(numpy.arange(4.0), numpy.arange(4.0), 1)


_WARMERS = {"sympy": _warm_sympy, "numpy": _warm_numpy}


def warm_up(whitelist: list[str]) -> list[str]:
    """Import and exercise the whitelisted modules; returns those that failed to import."""
    missing = []
    for name in whitelist:
        try:
            module = importlib.import_module(name)
        except Exception:  # a bad whitelist entry must not stop the worker
            missing.append(name)
            continue
        warmer = _WARMERS.get(name)
        if warmer is not None:
            warmer(module)
    return missing


def main(config_json: str) -> None:
    """Worker entry point; never returns."""
    cfg = json.loads(config_json)
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)  # stray prints from libraries must not corrupt the protocol
    missing = warm_up(cfg["whitelist"])
    bpf = syscalls.compile_seccomp_filter()
    is_root = os.geteuid() == 0
    layers = isolation.enter_namespaces(is_root)
    if layers["pid_namespace"]:
        _become_pid_one(proto_in, proto_out)
    scratch, host_visible = _prepare_scratch(cfg, layers, is_root)
    layers.update(privilege_drop=is_root, seccomp=bpf is not None, resource_limits=True)
    gc.collect()
    gc.freeze()  # keeps the collector from touching (and copying) inherited pages in children
    plan = ChildPlan(
        workdir=os.path.join(scratch, "job"),
        memory_bytes=isolation.current_address_space() + cfg["memory_mb"] * (1 << 20),
        file_bytes=cfg["disk_mb"] * (1 << 20), open_files=cfg["max_open_files"],
        uid=cfg["uid"] if is_root else None, gid=cfg["gid"] if is_root else None,
        seccomp=syscalls.SeccompProgram(bpf) if bpf else None,
        whitelist=frozenset(cfg["whitelist"]))
    try:
        send_json(proto_out, {"ready": True, "layers": layers, "missing": missing,
                              "scratch": scratch if host_visible else None})
        _serve(plan, cfg, proto_in, proto_out)
    finally:
        if host_visible:
            shutil.rmtree(scratch, ignore_errors=True)
    os._exit(0)


def _become_pid_one(proto_in: int, proto_out: int) -> None:
    """Fork the serving process into the new PID namespace; the outer one only waits.

    Should the outer process die before the death signal is armed, the host still reaches the
    inner one: it stays in the same process group, which the host kills as a whole.
    """
    pid = os.fork()
    if pid:
        os.close(proto_in)
        os.close(proto_out)
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    syscalls.prctl(syscalls.PR_SET_PDEATHSIG, signal.SIGKILL)


def _prepare_scratch(cfg: dict, layers: dict, is_root: bool) -> tuple[str, bool]:
    """Scratch root for per-snippet directories; (path, whether the host can see it)."""
    layers["private_filesystem"] = False
    if layers["mount_namespace"]:
        try:
            scratch = isolation.build_filesystem_view(cfg["disk_mb"])
            layers["private_filesystem"] = True
            return scratch, False
        except OSError:
            pass
    scratch = tempfile.mkdtemp(prefix="agentic_jax_sandbox_")
    return scratch, True


def _serve(plan: ChildPlan, cfg: dict, proto_in: int, proto_out: int) -> None:
    """Request loop. The next child is forked right after each reply, while the host is busy
    with the result, so neither fork nor exit teardown sits on the latency path."""
    reader = JsonLineReader(proto_in)
    while True:
        child = PreforkedChild(plan)
        try:
            request = reader.read()
        except ChannelClosed:
            child.finish()
            return
        report = child.run(str(request.get("code", "")), int(request["timeout_ms"]),
                           cfg["max_output_bytes"], proto_in)
        try:
            send_json(proto_out, report)
        except ChannelClosed:
            return
        finally:
            child.finish()


class PreforkedChild:
    """A child forked and locked down ahead of time, waiting for its one snippet."""

    def __init__(self, plan: ChildPlan) -> None:
        self.workdir = plan.workdir
        os.mkdir(self.workdir, 0o700)
        if plan.uid is not None:
            os.chown(self.workdir, plan.uid, plan.gid)
        pipes = [os.pipe() for _ in range(4)]  # code (to child), stdout, stderr, result
        self.pid = os.fork()
        if self.pid == 0:
            os.close(pipes[0][1])
            for read_end, _ in pipes[1:]:
                os.close(read_end)
            run_child(plan, pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1])
        os.close(pipes[0][0])
        for _, write_end in pipes[1:]:
            os.close(write_end)
        self.code_fd = pipes[0][1]
        self.fds = [read_end for read_end, _ in pipes[1:]]

    def run(self, code: str, timeout_ms: int, max_output_bytes: int, proto_in: int) -> dict:
        """Hand over the snippet and supervise it under the wall-clock deadline."""
        start = time.perf_counter()
        captures = [OutputCapture(max_output_bytes), OutputCapture(max_output_bytes),
                    OutputCapture(_RESULT_CAP)]
        try:
            send_json(self.code_fd, {"code": code, "timeout_ms": timeout_ms})
        except ChannelClosed:
            pass  # the child died during setup; its result pipe says why
        os.close(self.code_fd)
        self.code_fd = -1
        timed_out = _supervise(self.pid, self.fds, captures, start + timeout_ms / 1e3, proto_in)
        _kill(self.pid)  # done or not, nothing of it may outlive this snippet
        _, status, _ = os.wait4(self.pid, 0)
        self.pid = 0
        parsed = _parse_result(captures[2])
        own_ms = parsed.get("exec_ms") if parsed else None
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        if sig == signal.SIGKILL and parsed is not None:
            sig = None  # our own kill of a child that had already reported
        return {"stdout": captures[0].text(), "stderr": captures[1].text(), "result": parsed,
                "timed_out": timed_out, "signal": sig,
                "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                "exec_ms": own_ms if own_ms is not None else (time.perf_counter() - start) * 1e3}

    def finish(self) -> None:
        """Kill and reap the child if still there; remove its working directory."""
        if self.pid:
            _kill(self.pid)
            os.wait4(self.pid, 0)
            self.pid = 0
        for fd in [self.code_fd, *self.fds]:
            if fd >= 0:
                os.close(fd)
        self.code_fd = -1
        self.fds = []
        shutil.rmtree(self.workdir, ignore_errors=True)


def _supervise(pid: int, fds: list[int], sinks: list[OutputCapture], deadline: float,
               proto_in: int) -> bool:
    """Drain the child's pipes until they all close; kill it at the deadline.

    Returns whether the deadline (or a vanished host) forced the kill.
    """
    poller = select.poll()
    sink_of = dict(zip(fds, sinks))
    for fd in fds:
        poller.register(fd, select.POLLIN)
    poller.register(proto_in, 0)  # only hang-up: the host went away
    open_fds = set(fds)
    while open_fds:
        remaining_ms = (deadline - time.perf_counter()) * 1e3
        if remaining_ms <= 0:
            _kill(pid)
            return True
        for fd, events in poller.poll(max(1, int(remaining_ms))):
            if fd == proto_in:
                _kill(pid)
                return True
            chunk = os.read(fd, 1 << 16) if events & (select.POLLIN | select.POLLHUP) else b""
            if chunk:
                sink_of[fd].feed(chunk)
            else:
                poller.unregister(fd)
                open_fds.discard(fd)
    return False


def _kill(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except ProcessLookupError:
            pass


def _parse_result(capture: OutputCapture) -> dict | None:
    """The child's report reduced to known, finite fields (the child may have forged it)."""
    if capture.total > _RESULT_CAP:
        return None
    try:
        raw = json.loads(capture.text(), parse_constant=lambda name: None)
    except ValueError:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("error"), (str, type(None))):
        return None
    exec_ms = raw.get("exec_ms")
    finite = isinstance(exec_ms, (int, float)) and 0 <= exec_ms < 1e9
    return {"error": raw["error"], "detail": str(raw.get("detail", ""))[:2000],
            "exec_ms": float(exec_ms) if finite else None}
