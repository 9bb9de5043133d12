"""Which pages a sequence holds: allocation from the pool, shared prompt prefixes, forks.

Requests with the same prompt share one `Prefix`: the K/V of the prompt's first len - 1 tokens,
prefilled once and reference counted. A sample forks from it when it is complete: its full
pages are shared, the partial last page is copied (copy-on-write at fork, since the fork writes
there next). With a `PrefixCache`, a context also starts from the cached full pages of any
earlier context with the same first tokens. Also here: which contexts the next prefill call
writes, and whose pages go when the pool is short. Plain Python and numpy: no JAX; the
scheduler hands the copies and the chunks to the device.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from agentic_jax.rollout.engine.pages import PagePool
from agentic_jax.rollout.engine.prefix_cache import PrefixCache
from agentic_jax.rollout.engine.runner_api import PrefillChunk
from agentic_jax.rollout.engine.sequences import PAUSED, PREFILL, WAITING, Prefix, Seq


class PageManager:
    """The page pool and the prompt prefixes that share it.

    copies: (source, destination) pages that forks copy; the device copies them before its next
      call (`Scheduler` hands them to the runner and clears the list).
    cache: the `PrefixCache` (``prefix_caching``), or None.
    cached_tokens: context positions taken from the cache since the scheduler last read it.
    """

    def __init__(self, pool: PagePool, page_size: int, prefix_caching: bool = False):
        self.pool, self.page_size = pool, page_size
        self.prefixes: dict[tuple[int, ...], Prefix] = {}
        self.copies: list[tuple[int, int]] = []
        self.cache = PrefixCache(pool, page_size) if prefix_caching else None
        self.cached_tokens = 0

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
        if self.cache is not None and self.cache.evict(n) and self.pool.num_free >= n:
            return self.pool.alloc(n)
        in_slots = {id(s.prefix) for s in slots if s is not None and s.prefix is not None}
        for prefix in self.prefixes.values():
            if prefix.pages is not None and id(prefix) not in in_slots:
                self.pool.release(prefix.pages)
                prefix.pages, prefix.written = None, 0
        if self.cache is not None:
            self.cache.evict(n)   # pages only those prefixes read besides the cache
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
            cached = []
            if not seq.pages:          # a context written from scratch
                cached = self._cached(seq.tokens, seq.context_len)
                seq.cache_epoch = -1 if self.cache is None else self.cache.epoch
            pages = self.alloc(seq.pages_for(seq.context_len, ps) - len(cached), slots)
            if pages is None:
                self.pool.release(cached)
                return False
            seq.pages.extend(cached + pages)
            seq.length = max(seq.length, len(cached) * ps)
            self.cached_tokens += len(cached) * ps
            return True
        if prefix.pages is None:
            cached = self._cached(prefix.tokens, len(prefix.tokens))
            pages = self.alloc(-(-len(prefix.tokens) // ps) - len(cached), slots)
            if pages is None:
                self.pool.release(cached)
                return False
            prefix.pages, prefix.written = cached + pages, len(cached) * ps
            prefix.cache_epoch = -1 if self.cache is None else self.cache.epoch
            self.cached_tokens += len(cached) * ps
            return True
        return self.pool.num_free >= 1 or len(prefix.tokens) % ps == 0

    def _cached(self, tokens: Sequence[int], positions: int) -> list[int]:
        """The cache's pages for the first of ``positions`` positions of ``tokens`` (a
        reference each, the caller's), or [] without a cache."""
        return [] if self.cache is None else self.cache.match(tokens, positions)

    def first_page(self, seq: Seq) -> tuple[int, ...] | None:
        """With a cache, the tokens of the first page of a sequence's context (its prefix's,
        when shared); None without a cache or a full first page."""
        if self.cache is None:
            return None
        tokens = seq.prefix.tokens if seq.prefix is not None else seq.tokens[:seq.context_len]
        return tuple(tokens[:self.page_size]) if len(tokens) >= self.page_size else None

    def waits_for_first_page(self, seq: Seq, written_now: set[tuple[int, ...]]) -> bool:
        """Whether a queued sequence should wait for the cache: its context starts from
        scratch, and its first page, not yet cached, is among those being written now."""
        first = self.first_page(seq)
        return (first is not None and not seq.pages and first in written_now
                and not self.cache.has_first(first))

    def cache_written(self, target: Prefix | Seq) -> None:
        """Offers the full pages prefill has written of a context to the cache, if all its K/V
        was written by prefill under the cache's current weights."""
        if self.cache is None or target.cache_epoch != self.cache.epoch:
            return
        if isinstance(target, Prefix):
            self.cache.insert(target.tokens, target.pages, target.written)
        else:
            self.cache.insert(target.tokens, target.pages, target.length)

    @property
    def held(self) -> int:
        """Pages referenced by anything but the prefix cache (live sequences, shared prompt
        prefixes): 0 once every request has ended, whatever the cache keeps."""
        refs = self.pool.refs.copy()
        if self.cache is not None:
            refs[self.cache.pages] -= 1
        return int((refs > 0).sum())

    def clear_cache(self) -> None:
        """Forgets every cached page (new weights make their K/V stale)."""
        if self.cache is not None:
            self.cache.clear()

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


def prefill_chunks(slots: Sequence[Seq | None], chunk_size: int, max_rows: int,
                   budget: int | None = None) -> list[tuple[Prefix | Seq, PrefillChunk]]:
    """(what is written, its next chunk) for up to ``max_rows`` contexts of prefilling slots; a
    shared prefix is written once, whichever of its members are slotted. With ``budget``, the
    chunks hold at most that many tokens together (the last one cut to fit)."""
    jobs, seen = [], set()
    left = budget if budget is not None else max_rows * chunk_size
    for seq in slots:
        if left <= 0:
            break
        if seq is None or seq.state != PREFILL:
            continue
        size = min(chunk_size, left)
        prefix = seq.prefix
        if prefix is not None:
            if prefix.complete or id(prefix) in seen:
                continue
            seen.add(id(prefix))
            start = prefix.written
            chunk = list(prefix.tokens[start:start + size])
            jobs.append((prefix, PrefillChunk(chunk, start, prefix.pages)))
        else:
            start = seq.length
            chunk = seq.tokens[start:min(seq.context_len, start + size)]
            jobs.append((seq, PrefillChunk(chunk, start, seq.pages)))
        left -= len(chunk)
        if len(jobs) == max_rows:
            break
    return jobs
