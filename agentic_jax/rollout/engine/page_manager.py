"""Which pages a sequence holds: allocation from the pool, shared prompt prefixes, forks.

Requests with the same prompt share one `Prefix`: the K/V of the prompt's first len - 1 tokens,
prefilled once and reference counted. A sample forks from it when it is complete: its full
pages are shared, the partial last page is copied (copy-on-write at fork, since the fork writes
there next). Also here: which contexts the next prefill call writes, and whose pages go when
the pool is short. Plain Python and numpy: no JAX; the scheduler hands the copies and the
chunks to the device.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from agentic_jax.rollout.engine.pages import PagePool
from agentic_jax.rollout.engine.runner_api import PrefillChunk
from agentic_jax.rollout.engine.sequences import PAUSED, PREFILL, WAITING, Prefix, Seq


class PageManager:
    """The page pool and the prompt prefixes that share it.

    copies: (source, destination) pages that forks copy; the device copies them before its next
      call (`Scheduler` hands them to the runner and clears the list).
    """

    def __init__(self, pool: PagePool, page_size: int):
        self.pool, self.page_size = pool, page_size
        self.prefixes: dict[tuple[int, ...], Prefix] = {}
        self.copies: list[tuple[int, int]] = []

    def share_prefix(self, prompt: Sequence[int]) -> Prefix:
        """The prefix of ``prompt`` (all its tokens but the last), with one more reader."""
        tokens = tuple(prompt[:-1])
        prefix = self.prefixes.setdefault(tokens, Prefix(tokens=tokens))
        prefix.refs += 1
        return prefix

    def alloc(self, n: int, slots: Sequence[Seq | None]) -> list[int] | None:
        """n pages, dropping idle prefixes (not being filled or forked by a sequence in
        ``slots``; their queued members prefill them again) when the pool is short; None if
        still short."""
        pages = self.pool.alloc(n)
        if pages is not None:
            return pages
        in_slots = {id(s.prefix) for s in slots if s is not None and s.prefix is not None}
        for prefix in self.prefixes.values():
            if prefix.pages is not None and id(prefix) not in in_slots:
                self.pool.release(prefix.pages)
                prefix.pages, prefix.written = None, 0
        return self.pool.alloc(n)

    def reserve_context(self, seq: Seq, slots: Sequence[Seq | None]) -> bool:
        """Pages for the sequence's context (its prefix's, when shared); False if the pool is
        short."""
        ps = self.page_size
        prefix = seq.prefix
        if prefix is not None and prefix.pages is None and prefix.refs < 2:
            self.detach(seq)         # a prompt sampled once gains nothing from sharing
            prefix = None
        if prefix is None:
            pages = self.alloc(seq.pages_for(seq.context_len, ps), slots)
            if pages is None:
                return False
            seq.pages.extend(pages)
            return True
        if prefix.pages is None:
            pages = self.alloc(-(-len(prefix.tokens) // ps), slots)
            if pages is None:
                return False
            prefix.pages = pages
            return True
        return self.pool.num_free >= 1 or len(prefix.tokens) % ps == 0

    def fork(self, seq: Seq, slots: Sequence[Seq | None]) -> bool:
        """Gives a sequence its complete prefix's pages (full ones shared, the partial last one
        queued for copying) and detaches it; False (nothing taken) if no page is free for the
        copy."""
        prefix, ps = seq.prefix, self.page_size
        full = len(prefix.tokens) // ps
        seq.pages = list(prefix.pages[:full])
        self.pool.share(seq.pages)
        if len(prefix.tokens) % ps:
            page = self.alloc(1, slots)
            if page is None:                 # reserved at admission; the pool changed since
                self.pool.release(seq.pages)
                seq.pages = []
                return False
            self.copies.append((prefix.pages[full], page[0]))
            seq.pages.extend(page)
        seq.length = len(prefix.tokens)
        prefix.forks += 1
        # From here on the fork's pages are its own references; the prefix may go.
        self.detach(seq)
        return True

    def detach(self, seq: Seq) -> None:
        """The sequence stops counting on its prefix; an unused prefix frees its pages."""
        prefix, seq.prefix = seq.prefix, None
        if prefix is None:
            return
        prefix.refs -= 1
        if prefix.refs == 0:
            self.pool.release(prefix.pages or [])
            del self.prefixes[prefix.tokens]

    def free(self, seq: Seq) -> None:
        """Releases everything the sequence holds: its pages (its context is gone) and its
        prefix reference."""
        self.pool.release(seq.pages)
        seq.pages, seq.length = [], 0
        self.detach(seq)


def choose_victim(seqs: Iterable[Seq], spare: Seq | None = None) -> Seq | None:
    """Whose pages to free when the pool is short: the newest idle holder (paused, or queued
    with the pages it kept), else the newest holder in a slot other than ``spare``, else
    ``spare``. Idle holders go first and the oldest slotted sequence last, so the oldest
    running sequence always gets its pages (the pool holds one whole sequence) and the engine
    cannot cycle between preempting a sequence and admitting it again."""
    holders = [s for s in seqs if s.pages]
    idle = [s for s in holders if s.state in (PAUSED, WAITING)]
    others = [s for s in holders if s is not spare]
    candidates = idle or others or [s for s in holders if s is spare]
    return max(candidates, key=lambda s: s.order) if candidates else None


def prefill_chunks(slots: Sequence[Seq | None], chunk_size: int, max_rows: int
                   ) -> list[tuple[Prefix | Seq, PrefillChunk]]:
    """(what is written, its next chunk) for up to ``max_rows`` contexts of prefilling slots; a
    shared prefix is written once, whichever of its members are slotted."""
    jobs, seen = [], set()
    for seq in slots:
        if seq is None or seq.state != PREFILL:
            continue
        prefix = seq.prefix
        if prefix is not None:
            if prefix.complete or id(prefix) in seen:
                continue
            seen.add(id(prefix))
            start = prefix.written
            chunk = list(prefix.tokens[start:start + chunk_size])
            jobs.append((prefix, PrefillChunk(chunk, start, prefix.pages)))
        else:
            start = seq.length
            chunk = seq.tokens[start:min(seq.context_len, start + chunk_size)]
            jobs.append((seq, PrefillChunk(chunk, start, seq.pages)))
        if len(jobs) == max_rows:
            break
    return jobs
