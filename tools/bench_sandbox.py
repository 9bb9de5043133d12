"""Sandbox throughput and latency against a fresh `python -c` per snippet, in the same run.

    python tools/bench_sandbox.py [--snippets 400] [--baseline 40] [--workers N]

Workload: unique (never cached) trivial prints, numpy, and sympy solve/diff/integrate. Prints
throughput of both, the ratio, p50 latency of trivial snippets, and p50 sandbox overhead
(end-to-end latency minus the time the code itself ran in the child). Also prints the host
load average, since the figures depend on what else the CPUs are doing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from agentic_jax.sandbox import Sandbox, SandboxConfig

KINDS = {
    "trivial": "print({i} + 1)",
    "numpy": "import numpy as np\na = np.arange({i} % 97 + 3, dtype=float)\nprint(a.mean(), a @ a)",
    "sympy_solve": "import sympy as sp\nx = sp.Symbol('x')\nprint(sp.solve(x**2 - {i}*x - 1, x))",
    "sympy_diff": "import sympy as sp\nx = sp.Symbol('x')\nprint(sp.diff(sp.sin(x) * x**{i}, x))",
    "sympy_integrate": "import sympy as sp\nx = sp.Symbol('x')\nprint(sp.integrate({i}*x**3 - x, "
                       "(x, 0, 2)))",
}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snippets", type=int, default=400)
    parser.add_argument("--baseline", type=int, default=40)
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    base_rate = naive_baseline(workload(args.baseline, offset=10**6))
    with Sandbox(SandboxConfig(num_workers=args.workers)) as sb:
        print("layers:", ", ".join(k for k, v in sb.layers.items() if v))
        sb.run_batch([code for _, code in workload(20, offset=2 * 10**6)])  # warm the pool
        snippets = workload(args.snippets)
        start = time.perf_counter()
        results = sb.run_batch([code for _, code in snippets])
        rate = len(snippets) / (time.perf_counter() - start)
        # Latency figures from sequential calls, so queueing does not count as overhead.
        serial = [(kind, sb.run(code)) for kind, code in workload(200, offset=3 * 10**6)]
    failed = [r for r in results if not r.ok]
    trivial = [r.duration_ms for kind, r in serial if kind == "trivial"]
    overhead = [r.duration_ms - r.exec_ms for _, r in serial]
    print(f"naive python -c : {base_rate:8.1f} snippets/s ({args.baseline} snippets)")
    print(f"sandbox         : {rate:8.1f} snippets/s ({len(snippets)} snippets, "
          f"{len(failed)} failed, {sum(r.cached for r in results)} cache hits)")
    print(f"throughput ratio: {rate / base_rate:8.1f}x   (target >= 50x)")
    print(f"trivial p50     : {statistics.median(trivial):8.2f} ms (target <= 5 ms)")
    print(f"overhead p50    : {statistics.median(overhead):8.2f} ms (target <= 3 ms)")
    for kind in KINDS:
        own = [r.exec_ms for k, r in serial if k == kind]
        print(f"  {kind:16s} code p50 {statistics.median(own):7.2f} ms")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
