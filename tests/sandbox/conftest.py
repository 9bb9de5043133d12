"""Shared helpers of the sandbox tests: unique liveness probes (never served by the cache)."""

import itertools
import os

_probe_ids = itertools.count(int.from_bytes(os.urandom(3), "little") * 1000)

WIDE = ("sympy", "numpy", "math", "os", "sys", "subprocess", "ctypes", "socket", "signal",
        "threading", "resource", "importlib", "shutil", "pathlib", "builtins", "gc", "mmap")


def probe(box, timeout_ms=None) -> None:
    """Assert the sandbox still executes fresh code: a snippet no earlier call has run."""
    n = next(_probe_ids)
    result = box.run(f"print({n} * 7 + 1)", timeout_ms=timeout_ms)
    assert result.ok and not result.cached and result.stdout == f"{n * 7 + 1}\n", result
