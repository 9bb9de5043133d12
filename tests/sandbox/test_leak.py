"""10,000 mixed runs, hostile ones included, leak no descriptors, processes or memory."""

import psutil
import pytest

from agentic_jax.sandbox import Sandbox, SandboxConfig

MIX = [
    "print({i})",
    "import sympy\nx = sympy.Symbol('x')\nprint(sympy.diff(x**{i}, x))",
    "import numpy\nprint(numpy.arange({i} % 50 + 1).sum())",
    "x = bytearray(2**31)  # {i}",
    "while True:  # {i}\n    pass",
    "raise ValueError({i})",
    "import numpy\nnumpy.ctypeslib.ctypes.string_at(0)  # {i}",
    "print('y' * 200000)  # {i}",
    "import numpy\nlibc = numpy.ctypeslib.ctypes.CDLL(None)\nlibc.fork()  # {i}",
    "eval('{i}')",
]


def _snapshot(box: Sandbox) -> tuple[int, int, int, list[int]]:
    me = psutil.Process()
    workers = [psutil.Process(pid) for pid in box.worker_pids()]
    return (me.num_fds(), me.memory_info().rss, len(me.children(recursive=True)),
            [w.num_fds() for w in workers])


@pytest.mark.slow
def test_ten_thousand_mixed_runs_leak_nothing():
    with Sandbox(SandboxConfig(num_workers=2, timeout_ms=50, cache_size=256)) as box:
        box.run_batch([m.format(i=-1) for m in MIX])
        fds, rss, _, worker_fds = _snapshot(box)
        worker_rss = [psutil.Process(p).memory_info().rss for p in box.worker_pids()]
        for start in range(0, 10_000, 500):
            codes = [MIX[i % len(MIX)].format(i=i) for i in range(start, start + 500)]
            results = box.run_batch(codes)
            assert results[0].ok and results[0].stdout == f"{start}\n"
        fds_after, rss_after, kids, worker_fds_after = _snapshot(box)
        assert fds_after <= fds + 8 * len(worker_fds) and worker_fds_after == worker_fds
        assert kids <= 6 * len(worker_fds)
        assert rss_after - rss < 32 * 2**20
        for pid, before in zip(box.worker_pids(), worker_rss):
            assert psutil.Process(pid).memory_info().rss - before < 16 * 2**20
        assert box.stats()["restarts"] == 0
