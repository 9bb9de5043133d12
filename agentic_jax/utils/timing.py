"""Wall time per named phase (the rollout's decode / append / tool wait, a step's phases)."""

from __future__ import annotations

import contextlib
import time
from typing import Iterator


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
