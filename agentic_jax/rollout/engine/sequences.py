"""Host records of the engine: one per live sequence, one per shared prompt prefix."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from agentic_jax.rollout.engine.types import Request

WAITING, PREFILL, RUNNING, PAUSED = "waiting", "prefill", "running", "paused"


@dataclasses.dataclass(eq=False)
class Prefix:
    """The K/V of a prompt's first len(prompt) - 1 tokens, shared by the requests with that prompt.

    refs: unfinished requests that read (or will read) it; at zero its pages are released.
    pages: its pages once allocated (None before); written: positions prefilled so far.
    forks: sequences that started from it.
    """

    tokens: tuple[int, ...]
    refs: int = 0
    pages: list[int] | None = None
    written: int = 0
    forks: int = 0

    @property
    def complete(self) -> bool:
        return self.pages is not None and self.written >= len(self.tokens)


@dataclasses.dataclass(eq=False)
class Seq:
    """One request's sequence.

    tokens: prompt + every token after it (generated or appended); the last one has not been run
      through the model yet, so ``length`` (positions whose K/V is in the pool) is at most
      len(tokens) - 1, and equal to it while decoding.
    pages: the block table; a fork's first pages are its prefix's (shared, never written).
    turn_start: index in ``tokens`` where the current turn's model tokens begin.
    logprobs / values / versions: per model token of the current turn, its log-prob, the value
      before it and the policy version (`Engine.update_params`) that sampled it.
    order: admission stamp; the newest sequence is preempted first.
    matcher: the turn's token constraint state while it samples under a mask (else None).
    """

    request: Request
    tokens: list[int]
    budget: int
    prefix: Prefix | None
    key_data: np.ndarray
    pages: list[int] = dataclasses.field(default_factory=list)
    length: int = 0
    state: str = WAITING
    slot: int = -1
    order: int = 0
    turn_start: int = 0
    logprobs: list[float] = dataclasses.field(default_factory=list)
    values: list[float] = dataclasses.field(default_factory=list)
    versions: list[int] = dataclasses.field(default_factory=list)
    matcher: Any = None

    @property
    def context_len(self) -> int:
        """Positions that must have K/V before the sequence can decode."""
        return len(self.tokens) - 1

    def pages_for(self, positions: int, page_size: int) -> int:
        """Pages still missing for K/V at positions [0, positions)."""
        return max(0, -(-positions // page_size) - len(self.pages))
