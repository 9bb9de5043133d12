"""Sandbox throughput, latency and sustained load, against baselines measured in the same run.

    python tools/bench_sandbox.py [--snippets 400] [--rounds 4] [--baseline 40] [--workers N]
    python tools/bench_sandbox.py --soak [--seconds 300] [--rollouts 256] [--kill-every 10]
    python tools/bench_sandbox.py --sessions

Default: unique (never cached) trivial prints, numpy, and sympy solve/diff/integrate against
two baselines measured in the same run:
  the limit: the same snippets exec'd one after another in this process (one warm interpreter
    with the whitelist imported and warmed as a worker does, fresh globals per snippet, stdout
    captured, no isolation), in rounds interleaved with the sandbox (ABBA...); prints the
    snippets/s, CPU-ms per snippet (the sandbox's in all its processes) and the share of the
    machine other processes took during each side, the ratio and the p50 of a trivial snippet
    on each side;
  a fresh `python -c` per snippet;
and p50 sandbox overhead (end-to-end latency minus the time the code itself ran).

--soak: `rollouts` threads, each an episode loop submitting mixed trivial / numpy / sympy /
hostile snippets with unique outputs, while a killer SIGKILLs a random process level (outer,
server, template, child) of a random worker every `kill_every` seconds. Reports executions/s,
p50/p99 latency, the benign-timeout rate, lost and misattributed results, and host/worker
memory and process counts over time (first vs last quarter).

--sessions: cost per call of stateful sessions (replay) against stateless calls.
The host load average is printed, since every figure depends on what else the CPUs do.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time

import psutil

from agentic_jax.sandbox import Sandbox, SandboxConfig
from agentic_jax.sandbox.zygote import warm_up

KINDS = {
    "trivial": "print({i} + 1)",
    "numpy": "import numpy as np\na = np.arange({i} % 97 + 3, dtype=float)\nprint(a.mean(), a @ a)",
    "sympy_solve": "import sympy as sp\nx = sp.Symbol('x')\nprint(sp.solve(x**2 - {i}*x - 1, x))",
    "sympy_diff": "import sympy as sp\nx = sp.Symbol('x')\nprint(sp.diff(sp.sin(x) * x**{i}, x))",
    "sympy_integrate": "import sympy as sp\nx = sp.Symbol('x')\nprint(sp.integrate({i}*x**3 - x, "
                       "(x, 0, 2)))",
}
# Soak mix: (kind, weight, code with a unique {i}, what must come back).
SOAK_MIX = [
    ("trivial", 40, "print('t{i}', {i} * 3)", lambda i: f"t{i} {i * 3}\n"),
    ("numpy", 25, "import numpy as np\nprint('n{i}', int(np.arange({i} % 50 + 2).sum()))",
     lambda i: f"n{i} {sum(range(i % 50 + 2))}\n"),
    ("sympy", 20,
     "import sympy as sp\nx = sp.Symbol('x')\nprint('s{i}', sp.diff(x**({i} % 9 + 3), x))",
     lambda i: f"s{i} {i % 9 + 3}*x**{i % 9 + 2}\n"),
    ("memory_bomb", 4, "x = bytearray(2**31)  # {i}", "MemoryError"),
    ("busy_loop", 3, "while True:  # {i}\n    pass", "TimeoutError"),
    ("crash", 3, "import numpy\nnumpy.ctypeslib.ctypes.string_at(0)  # {i}", "SystemError"),
    ("fork", 3, "import numpy\nprint(numpy.ctypeslib.ctypes.CDLL(None).fork())  # {i}", "-1\n"),
    ("flood", 2, "print('y' * 300000)  # {i}", None),
]
BENIGN = {"trivial", "numpy", "sympy"}


def workload(n: int, offset: int = 0) -> list[tuple[str, str]]:
    """n unique snippets cycling over KINDS: [(kind, code)]."""
    names = list(KINDS)
    return [(names[i % len(names)], KINDS[names[i % len(names)]].format(i=i + offset))
            for i in range(n)]


def naive_baseline(snippets: list[tuple[str, str]]) -> float:
    """Snippets per second with one fresh interpreter per snippet, CPU-count in parallel."""
    workers = os.cpu_count() or 1
    start = time.perf_counter()
    running: list[subprocess.Popen] = []
    for _, code in snippets:
        if len(running) >= workers:
            running.pop(0).wait()
        running.append(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL))
    for proc in running:
        proc.wait()
    return len(snippets) / (time.perf_counter() - start)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def limit_run(codes: list[str]) -> list[float]:
    """Exec each snippet in this process with fresh globals and its stdout captured, one
    after another; returns each one's latency in ms (the no-isolation limit)."""
    latencies = []
    for code in codes:
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, "<snippet>", "exec"), {"__name__": "__main__"})  # noqa: S102
        latencies.append((time.perf_counter() - start) * 1e3)
    return latencies


def _machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine since boot."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


class _Side:
    """Wall seconds, own CPU seconds and other processes' CPU seconds of one side's rounds."""

    def __init__(self, name: str) -> None:
        self.name, self.wall, self.cpu, self.others, self.count = name, 0.0, 0.0, 0.0, 0

    def timed(self, fn, cpu_s, count: int):
        busy, cpu, wall = _machine_busy_s(), cpu_s(), time.perf_counter()
        result = fn()
        wall, cpu = time.perf_counter() - wall, cpu_s() - cpu
        self.wall, self.cpu, self.count = self.wall + wall, self.cpu + cpu, self.count + count
        self.others += max(0.0, _machine_busy_s() - busy - cpu)
        return result

    def line(self) -> str:
        share = self.others / (self.wall * (os.cpu_count() or 1))
        return (f"{self.name}: {self.count / self.wall:8.1f} snippets/s, "
                f"{self.cpu / self.count * 1e3:6.2f} CPU-ms/snippet; "
                f"others used {share:.0%} of the machine")


def throughput(args: argparse.Namespace) -> dict:
    base_rate = naive_baseline(workload(args.baseline, offset=10**6)) if args.baseline else 0.0
    with Sandbox(SandboxConfig(num_workers=args.workers)) as sb:
        print("layers:", ", ".join(k for k, v in sb.layers.items() if v))
        warm = [code for _, code in workload(20, offset=2 * 10**6)]
        sb.run_batch(warm)  # warm the pool
        warm_up(list(sb.cfg.whitelist))  # this process becomes the limit's warm interpreter
        limit_run(warm)
        snippets = workload(args.snippets)
        sandbox, limit = _Side("sandbox   "), _Side("limit     ")
        own_cpu = (lambda: sum(psutil.Process().cpu_times()[:2]))
        results, limit_ms = [], []
        for r in range(args.rounds):
            chunk = snippets[r::args.rounds]
            codes = [code for _, code in chunk]
            for side in ((sandbox, limit) if r % 2 == 0 else (limit, sandbox)):
                if side is sandbox:
                    results += sandbox.timed(lambda: sb.run_batch(codes),
                                             lambda: _sandbox_cpu_s(sb), len(codes))
                else:
                    limit_ms += zip((k for k, _ in chunk),
                                    limit.timed(lambda: limit_run(codes), own_cpu, len(codes)))
        rate = sandbox.count / sandbox.wall
        # Latency figures from sequential calls, so queueing does not count as overhead.
        serial = [(kind, sb.run(code)) for kind, code in workload(200, offset=3 * 10**6)]
        # The same with a pause between calls, as between a model's turns: the next child is
        # then ready, so only the path host -> child -> host is measured.
        paused = []
        for _, code in workload(100, offset=4 * 10**6)[::5]:
            paused.append(sb.run(code))
            time.sleep(0.02)
        cpu_before = _sandbox_cpu_s(sb)
        trivial_runs = [sb.run(f"print({i} - 1)") for i in range(200)]
        cpu_ms = (_sandbox_cpu_s(sb) - cpu_before) * 1e3 / len(trivial_runs)
    failed = [r for r in results if not r.ok]
    trivial = [r.duration_ms for kind, r in serial if kind == "trivial"]
    overhead = [r.duration_ms - r.exec_ms for _, r in serial]
    print(f"{sandbox.line()} (all sandbox processes and this one)")
    print(f"{limit.line()} (one warm interpreter, no isolation, {args.rounds} rounds ABBA)")
    limit_rate = limit.count / limit.wall
    print(f"sandbox/limit   : {rate / limit_rate:8.2f}x by wall time (target >= 0.5x), "
          f"{limit.cpu / sandbox.cpu:.2f}x by CPU time")
    limit_trivial = statistics.median(ms for kind, ms in limit_ms if kind == "trivial")
    print(f"trivial p50     : {statistics.median(trivial):8.2f} ms sandbox (target <= 2 ms), "
          f"{limit_trivial:.3f} ms limit")
    print(f"sandbox         : {rate:8.1f} snippets/s ({len(snippets)} snippets, "
          f"{len(failed)} failed, {sum(r.cached for r in results)} cache hits)")
    if base_rate:
        print(f"naive python -c : {base_rate:8.1f} snippets/s ({args.baseline} snippets)")
        print(f"throughput ratio: {rate / base_rate:8.1f}x   (target >= 50x)")
    # What zero overhead would reach: every CPU busy with the snippets' own run time only.
    code_s = statistics.mean(r.exec_ms for r in results) / 1e3
    ceiling = min(os.cpu_count() or 1, sb.cfg.num_workers or os.cpu_count() or 1) / code_s
    print(f"code-time bound : {ceiling:8.1f} snippets/s (mean code {code_s * 1e3:.1f} ms in "
          f"the sandbox; it reaches {rate / ceiling:.0%} of it)")
    print(f"overhead p50    : {statistics.median(overhead):8.2f} ms back to back (target <= 3 ms)")
    paused_overhead = statistics.median(r.duration_ms - r.exec_ms for r in paused)
    print(f"overhead p50    : {paused_overhead:8.2f} ms with 20 ms between calls")
    own = statistics.median(r.exec_ms for r in trivial_runs)
    print(f"CPU per trivial : {cpu_ms:8.2f} ms in all processes (code itself {own:.2f} ms)")
    for kind in KINDS:
        own = [r.exec_ms for k, r in serial if k == kind]
        print(f"  {kind:16s} code p50 {statistics.median(own):7.2f} ms")
    return {"ratio": rate / base_rate if base_rate else 0.0, "limit_ratio": rate / limit_rate,
            "trivial_p50_ms": statistics.median(trivial),
            "overhead_p50_ms": statistics.median(overhead)}


def _sandbox_cpu_s(box: Sandbox) -> float:
    """CPU seconds used so far by this process and every sandbox process (children are
    reaped by their server, so they count in its children times)."""
    total = sum(psutil.Process().cpu_times()[:2])
    for pid in box.worker_pids():
        try:
            outer = psutil.Process(pid)
            for proc in [outer, *outer.children(recursive=True)]:
                times = proc.cpu_times()
                total += times.user + times.system + times.children_user + times.children_system
        except psutil.NoSuchProcess:
            continue
    return total


class _Soak:
    """State shared by the rollout threads, the killer and the sampler of one soak."""

    def __init__(self, box: Sandbox, seconds: float, kill_every: float, seed: int) -> None:
        self.box, self.seconds, self.kill_every = box, seconds, kill_every
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.counter = 0
        self.submitted = self.returned = self.misattributed = self.kills = 0
        self.benign = self.benign_timeouts = self.benign_system = 0
        self.latencies: list[float] = []
        self.samples: list[tuple[float, float, int]] = []  # (host MB, server+template MB, procs)
        self.odd: list[str] = []

    def next_snippet(self) -> tuple[int, tuple]:
        with self.lock:
            self.counter += 1
            weights = [entry[1] for entry in SOAK_MIX]
            return self.counter, self.rng.choices(SOAK_MIX, weights)[0]

    def rollout(self) -> None:
        while not self.stop.is_set():
            i, (kind, _, code, expect) = self.next_snippet()
            with self.lock:
                self.submitted += 1
            result = self.box.run(code.format(i=i))
            with self.lock:
                self.returned += 1
                self.latencies.append(result.duration_ms)
                self._account(kind, expect, i, result)

    def _account(self, kind: str, expect, i: int, result) -> None:
        if kind in BENIGN:
            self.benign += 1
            if result.ok:
                wrong = result.stdout != expect(i)
            else:
                self.benign_timeouts += result.error == "TimeoutError"
                self.benign_system += result.error == "SystemError"
                wrong = result.error not in ("TimeoutError", "SystemError")
        elif expect is None:
            wrong = result.ok and len(result.stdout) > self.box.cfg.max_output_bytes + 200
        elif expect.endswith("\n"):
            wrong = result.ok and result.stdout != expect
        else:  # a hostile snippet must fail, with its own error or because of a kill
            wrong = result.ok or result.error not in (expect, "SystemError", "TimeoutError")
        if wrong:
            self.misattributed += 1
            self.odd.append(f"{kind} {i}: {result}")

    def killer(self) -> None:
        levels = ("outer", "server", "template", "child")
        while not self.stop.wait(self.kill_every):
            victims = _worker_levels(self.box)
            level = self.rng.choice(levels)
            choices = [pid for worker in victims for pid in worker.get(level, [])]
            if choices:
                try:
                    os.kill(self.rng.choice(choices), signal.SIGKILL)
                    self.kills += 1
                except ProcessLookupError:
                    pass

    def sampler(self) -> None:
        me = psutil.Process()
        while not self.stop.wait(1.0):
            levels = _worker_levels(self.box)
            mb = 0.0
            for worker in levels:
                for pid in worker.get("server", []) + worker.get("template", []):
                    try:
                        mb += psutil.Process(pid).memory_info().rss / 2**20
                    except psutil.NoSuchProcess:
                        pass
            procs = sum(len(pids) for worker in levels for pids in worker.values())
            self.samples.append((me.memory_info().rss / 2**20, mb, procs))


def _worker_levels(box: Sandbox) -> list[dict[str, list[int]]]:
    names = {"sandbox-server": "server", "sandbox-tmpl": "template", "sandbox-child": "child"}
    found = []
    for pid in box.worker_pids():
        levels: dict[str, list[int]] = {"outer": [pid]}
        try:
            for proc in psutil.Process(pid).children(recursive=True):
                level = names.get(proc.name())
                if level:
                    levels.setdefault(level, []).append(proc.pid)
        except psutil.NoSuchProcess:
            continue
        found.append(levels)
    return found


def soak(seconds: float, rollouts: int, workers: int | None, kill_every: float,
         timeout_ms: int = 1000, seed: int = 0) -> dict:
    """Run the sustained-load soak; returns its figures (see module docstring)."""
    cfg = SandboxConfig(num_workers=workers, timeout_ms=timeout_ms, cache_size=0)
    with Sandbox(cfg) as box:
        state = _Soak(box, seconds, kill_every, seed)
        threads = [threading.Thread(target=state.rollout) for _ in range(rollouts)]
        helpers = [threading.Thread(target=state.killer), threading.Thread(target=state.sampler)]
        start = time.perf_counter()
        for thread in threads + helpers:
            thread.start()
        state.stop.wait(seconds)
        state.stop.set()
        for thread in threads + helpers:
            thread.join()
        elapsed = time.perf_counter() - start
        restarts = box.stats()["restarts"]
    quarter = max(1, len(state.samples) // 4)
    first, last = state.samples[:quarter], state.samples[-quarter:]
    mean = (lambda rows, k: statistics.fmean(r[k] for r in rows) if rows else 0.0)
    return {"executions": state.returned, "executions_per_s": state.returned / elapsed,
            "p50_ms": pct(state.latencies, 0.5), "p99_ms": pct(state.latencies, 0.99),
            "benign": state.benign,
            "benign_timeout_rate": state.benign_timeouts / max(1, state.benign),
            "benign_system_errors": state.benign_system,
            "lost": state.submitted - state.returned, "misattributed": state.misattributed,
            "odd": state.odd[:5], "kills": state.kills, "restarts": restarts,
            "host_mb_first": mean(first, 0), "host_mb_last": mean(last, 0),
            "worker_mb_first": mean(first, 1), "worker_mb_last": mean(last, 1),
            "procs_max": max((s[2] for s in state.samples), default=0),
            "procs_last": last[-1][2] if last else 0, "seconds": elapsed}


def sessions(args: argparse.Namespace) -> None:
    blocks = ["import sympy as sp\nx = sp.Symbol('x')\ne = sp.expand((x + {i})**4)",
              "r = sp.factor(e)", "d = sp.diff(e, x)", "print(r, d.subs(x, 1))"]
    for stateful in (False, True):
        with Sandbox(SandboxConfig(num_workers=1, stateful=stateful, cache_size=0)) as box:
            per_call: list[list[float]] = [[] for _ in blocks]
            for episode in range(args.episodes):
                session = box.session()
                for k, block in enumerate(blocks):
                    result = session.run(block.format(i=episode) if k == 0 else block)
                    per_call[k].append(result.duration_ms)
            medians = [statistics.median(c) for c in per_call]
            print(f"stateful={stateful!s:5}: p50 ms per call by block position "
                  + " ".join(f"{m:7.2f}" for m in medians))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snippets", type=int, default=400)
    parser.add_argument("--baseline", type=int, default=40,
                        help="snippets for the fresh `python -c` baseline (0: skip it)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--soak", action="store_true")
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--rollouts", type=int, default=256)
    parser.add_argument("--kill-every", type=float, default=10.0)
    parser.add_argument("--timeout-ms", type=int, default=1000)
    parser.add_argument("--sessions", action="store_true")
    parser.add_argument("--episodes", type=int, default=30)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if args.soak:
        figures = soak(args.seconds, args.rollouts, args.workers, args.kill_every,
                       args.timeout_ms)
        for key, value in figures.items():
            print(f"{key:22s} {value:.2f}" if isinstance(value, float) else f"{key:22s} {value}")
    elif args.sessions:
        sessions(args)
    else:
        throughput(args)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
