"""The bookkeeping of the engine's live sequences: which are queued, slotted or paused, and what a
sequence leaving its slot frees (finishing, pausing, preemption, release, abort), with the
events and statistics that record it. No JAX here.

`scheduler.Scheduler` builds on it and decides what runs: admission, prefill chunks, decode
round trips, and which sequence to preempt when pages run short.
"""

from __future__ import annotations

import collections
from typing import Hashable, Sequence

from agentic_jax.rollout.engine.page_manager import PageManager
from agentic_jax.rollout.engine.pages import PagePool
from agentic_jax.rollout.engine.sequences import PAUSED, RUNNING, WAITING, Seq
from agentic_jax.rollout.engine.types import EngineConfig, EngineStats, Event


class SlotTable:
    """Live sequences by request id, the queue of those waiting for a slot, and the decode slots,
    over one `PageManager`."""

    def __init__(self, cfg: EngineConfig, pool: PagePool, page_bytes: int = 0):
        self.cfg = cfg
        self.pages = PageManager(pool, cfg.page_size, cfg.prefix_caching)
        self.stats = EngineStats(pool_pages=pool.num_pages, page_bytes=page_bytes)
        self.seqs: dict[Hashable, Seq] = {}
        self.waiting: collections.deque[Seq] = collections.deque()
        self.slots: list[Seq | None] = [None] * cfg.num_slots
        self._events: list[Event] = []

    def resume(self, request_id: Hashable, tokens: Sequence[int]) -> None:
        """Appends ``tokens`` to a paused sequence and queues it first (see `Engine.resume`)."""
        seq = self._paused(request_id)
        seq.new_turn(tokens)
        if seq.budget <= 0:
            self._finish(seq, "length")
            return
        seq.state = WAITING
        self.waiting.appendleft(seq)

    def release(self, request_id: Hashable) -> None:
        """Ends a paused sequence for good, freeing its pages."""
        self._drop(self._paused(request_id))

    def abort(self, request_id: Hashable) -> bool:
        """Ends a sequence in any state, freeing its pages and dropping its pending event;
        False if it is not live."""
        seq = self.seqs.get(request_id)
        if seq is None:
            return False
        self._events = [e for e in self._events if e.request_id != request_id]
        self._drop(seq)
        return True

    def reset_stats(self) -> EngineStats:
        """Starts the counters again (the page peak from the pages in use now); returns the old."""
        old, in_use = self.stats, self.pages.pool.in_use
        self.stats = EngineStats(pool_pages=old.pool_pages, page_bytes=old.page_bytes,
                                 pages_in_use=in_use, pages_peak=in_use)
        self.pages.pool.peak = in_use
        return old

    @property
    def has_work(self) -> bool:
        """Whether `step` would advance anything (queued, prefilling or decoding sequences)."""
        return bool(self.waiting) or self._any_slotted() or bool(self._events)

    def _paused(self, request_id: Hashable) -> Seq:
        seq = self.seqs.get(request_id)
        if seq is None or seq.state != PAUSED:
            raise ValueError(f"request {request_id!r} is not paused")
        return seq

    def _any_slotted(self) -> bool:
        return any(s is not None for s in self.slots)

    def _running(self) -> list[Seq]:
        return [s for s in self.slots if s is not None and s.state == RUNNING]

    # ------------------------------------------------------------------ leaving a slot

    def _pause(self, seq: Seq) -> None:
        """The sequence leaves its slot and keeps its pages until `resume` or `release`."""
        self._events.append(seq.event("paused", "pause"))
        self.slots[seq.slot], seq.slot, seq.state = None, -1, PAUSED
        seq.matcher = None

    def _finish(self, seq: Seq, reason: str) -> None:
        self._events.append(seq.event("finished", reason))
        self._drop(seq)

    def _drop(self, seq: Seq) -> None:
        """Frees everything the sequence holds and forgets it."""
        if seq.slot >= 0:
            self.slots[seq.slot] = None
        if seq.state == WAITING:
            self.waiting.remove(seq)
        self.pages.free(seq)
        del self.seqs[seq.request.request_id]
        self.stats.pages_in_use = self.pages.pool.in_use

    def _preempt(self, seq: Seq) -> None:
        """Frees a sequence's pages; it is queued first and recomputes its context later. Its
        tokens are kept, and the next token's key depends only on its position, so the result
        is the one it would have had."""
        self.stats.preemptions += 1
        self.pages.free(seq)
        if seq.slot >= 0:
            self.slots[seq.slot], seq.slot = None, -1
        if seq.state not in (PAUSED, WAITING):
            seq.state = WAITING
            self.waiting.appendleft(seq)
