"""Host records of the engine: one per live sequence, one per shared prompt prefix. Plain
Python and numpy: no JAX."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from agentic_jax.rollout.engine.types import Event, Request

WAITING, PREFILL, RUNNING, PAUSED = "waiting", "prefill", "running", "paused"


@dataclasses.dataclass(eq=False)
class Prefix:
    """The K/V of a prompt's first len(prompt) - 1 tokens, shared by the requests with that prompt.

    refs: unfinished requests that read (or will read) it; at zero its pages are released.
    pages: its pages once allocated (None before); written: positions prefilled so far.
    forks: sequences that started from it.
    cache_epoch: the `PrefixCache` epoch its K/V was written in (-1: none, not to be cached).
    """

    tokens: tuple[int, ...]
    refs: int = 0
    pages: list[int] | None = None
    written: int = 0
    forks: int = 0
    cache_epoch: int = -1

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
    top_logprobs: per model token of the current turn, the most likely (token id, log-prob)
      pairs at its position; None when the request asks for none.
    order: admission stamp; the newest sequence is preempted first.
    matcher: the turn's token constraint state while it samples under a mask (else None).
    cache_epoch: the `PrefixCache` epoch in which all its K/V so far was written by prefill
      (-1 once it decodes: only prefill-written pages are cached).
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
    top_logprobs: list[list[tuple[int, float]]] | None = None
    matcher: Any = None
    cache_epoch: int = -1

    @property
    def context_len(self) -> int:
        """Positions that must have K/V before the sequence can decode."""
        return len(self.tokens) - 1

    def pages_for(self, positions: int, page_size: int) -> int:
        """Pages still missing for K/V at positions [0, positions)."""
        return max(0, -(-positions // page_size) - len(self.pages))

    @property
    def turn(self) -> list[int]:
        """The current turn's model tokens (a copy)."""
        return self.tokens[self.turn_start:]

    def take(self, toks: Sequence[int], lps: Sequence[float], vals: Sequence[float],
             stopped: bool, version: int,
             tops: Sequence[list[tuple[int, float]]] | None = None) -> str | None:
        """Records a round trip's model tokens (``stopped``: the last is a stop token; ``tops``:
        their most likely alternatives, when the request asks for them); returns why the
        sequence leaves its slot: "pause" (its pause hook cut the turn there), "stop" or
        "length"; or None, it decodes on."""
        self.tokens.extend(int(t) for t in toks)
        self.logprobs.extend(float(x) for x in lps)
        self.values.extend(float(x) for x in vals)
        self.versions.extend([version] * len(toks))
        if self.top_logprobs is not None:
            self.top_logprobs.extend(tops)
        self.length += len(toks)
        self.budget -= len(toks)
        if self.request.constraint is not None and self.constrain(toks):
            stopped = False       # the cut dropped the stop token with what followed the opener
        hook = self.request.pause
        cut = None if hook is None else hook(self.turn)
        if cut is not None:
            turn = len(self.tokens) - self.turn_start
            self.truncate(turn - max(0, min(int(cut), turn)))
            return "pause"
        if stopped:
            return "stop"
        return "length" if self.budget <= 0 else None

    def truncate(self, drop: int) -> None:
        """Forgets the last ``drop`` model tokens (their K/V slots are overwritten later)."""
        if drop == 0:
            return
        del self.tokens[-drop:], self.logprobs[-drop:], self.values[-drop:], self.versions[-drop:]
        if self.top_logprobs is not None:
            del self.top_logprobs[-drop:]
        self.budget += drop
        self.length = min(self.length, len(self.tokens) - 1)

    def constrain(self, toks: Sequence[int]) -> bool:
        """Advances the matcher over the new tokens, or starts one when the request's constraint
        asks (cutting the turn there); True when tokens were cut."""
        if self.matcher is not None:
            for t in toks:
                self.matcher.advance(int(t))
            return False
        started = self.request.constraint.start(self.turn)
        if started is None:
            return False
        keep, self.matcher = started
        drop = len(self.tokens) - self.turn_start - keep
        self.truncate(drop)
        return drop > 0

    def new_turn(self, appended: Sequence[int]) -> None:
        """Appends tokens that are not the model's (a tool's output; those beyond the budget are
        dropped) and starts a new turn after them."""
        kept = [int(t) for t in appended][: self.budget]
        self.tokens.extend(kept)
        self.budget -= len(kept)
        self.turn_start = len(self.tokens)
        self.logprobs, self.values, self.versions, self.matcher = [], [], [], None
        if self.top_logprobs is not None:
            self.top_logprobs = []

    def event(self, kind: str, reason: str) -> Event:
        """The `Event` of the turn that ends now."""
        return Event(self.request.request_id, kind, reason, self.turn,
                     np.asarray(self.logprobs, np.float32), np.asarray(self.values, np.float32),
                     np.asarray(self.versions, np.int32),
                     None if self.top_logprobs is None else list(self.top_logprobs))
