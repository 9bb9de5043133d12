"""Which pages a sequence holds: allocation from the pool, shared prompt prefixes, forks.

Requests with the same prompt share one `Prefix`: the K/V of the prompt's first len - 1 tokens,
prefilled once and reference counted. A sample forks from it when it is complete: its full
pages are shared, the partial last page is copied (copy-on-write at fork, since the fork writes
there next). Plain Python and numpy: no JAX; the copies are handed to the device by the caller.
"""

from __future__ import annotations

from typing import Sequence

from agentic_jax.rollout.engine.pages import PagePool
from agentic_jax.rollout.engine.sequences import Prefix, Seq


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
