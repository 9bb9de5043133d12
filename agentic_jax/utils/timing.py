"""Wall time per named phase (the rollout's decode / append / tool wait, a step's phases), and
the calls of compiled functions that compiled a program."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator


class PhaseTimer:
    """Accumulates seconds per phase: ``with timer("decode_s"): ...``; ``timer["decode_s"]``."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.start = time.perf_counter()

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def __getitem__(self, name: str) -> float:
        return self.seconds.get(name, 0.0)

    @property
    def total(self) -> float:
        """Seconds inside all phases."""
        return sum(self.seconds.values())

    @property
    def elapsed(self) -> float:
        """Seconds since the timer was made."""
        return time.perf_counter() - self.start


def programs_held(*fns: Any) -> int | None:
    """How many compiled programs the jitted functions hold (None where jax does not say)."""
    try:
        return sum(int(fn._cache_size()) for fn in fns)
    except Exception:  # a private jax method: its absence or change must not stop the caller
        return None


class CompileCount:
    """Counts the calls that compiled a program of ``programs`` (jitted functions; or loaded
    one from the persistent compile cache) and their seconds: the call's dispatch, where the
    compilation happens, timed. Where jax does not say how many programs a function holds,
    nothing is counted."""

    def __init__(self, *programs: Any):
        self.programs = programs
        self.compiles, self.seconds = 0, 0.0

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, counted when ``programs`` grew."""
        before, start = programs_held(*self.programs), time.perf_counter()
        out = fn(*args, **kwargs)
        after = programs_held(*self.programs)
        if before is not None and after is not None and after > before:
            self.compiles += after - before
            self.seconds += time.perf_counter() - start
        return out

    def take(self) -> tuple[int, float]:
        """(calls that compiled, their seconds) since the last take; counted again from 0."""
        out = self.compiles, self.seconds
        self.compiles, self.seconds = 0, 0.0
        return out
