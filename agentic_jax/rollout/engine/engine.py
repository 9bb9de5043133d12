"""The scheduler: a request queue, fixed decode slots, page allocation, prefix sharing,
preemption. The device work is in `paged_model`; this file only decides what runs."""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Hashable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from agentic_jax.errors import UserError
from agentic_jax.kernels.paged_attention import PagePairs
from agentic_jax.rollout.constrain import batch_bitmasks
from agentic_jax.rollout.engine import paged_model as pm
from agentic_jax.rollout.engine.pages import PagePool, page_bytes, pool_size
from agentic_jax.rollout.engine.sequences import PAUSED, PREFILL, RUNNING, WAITING, Prefix, Seq
from agentic_jax.rollout.engine.types import EngineConfig, EngineStats, Event, Request
from agentic_jax.rollout.sampler import SamplingParams


def _key_data(key: Any) -> np.ndarray:
    """A typed PRNG key or raw key data -> the key data as a uint32 numpy array."""
    key = jnp.asarray(key) if not isinstance(key, np.ndarray) else key
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    data = np.asarray(key)
    if data.dtype != np.uint32:
        raise ValueError(f"request key: expected a PRNG key or uint32 key data, got {data.dtype}")
    return data


# The smallest decode batch: fewer rows save little and would add compilations.
_MIN_ROWS = 8


def _bucket(n: int, cap: int) -> int:
    """The next power of two >= n (at least 1), capped at ``cap``."""
    return min(cap, 1 << max(0, n - 1).bit_length())


class Engine:
    """Continuous batching over a paged KV cache for one model (see the package docstring)."""

    def __init__(self, model: nnx.Module, cfg: EngineConfig | None = None):
        graphdef, params = nnx.split(model)
        self._build(graphdef, params, model.cfg, cfg or EngineConfig())

    @classmethod
    def from_split(cls, graphdef: nnx.GraphDef, params: nnx.State,
                   cfg: EngineConfig | None = None, mesh: Mesh | None = None) -> Engine:
        """An engine for a model given as (graph definition, state), e.g. a training run's.
        ``mesh``: the devices it will sample on, when they are not the default device's
        (its KV pool is created there)."""
        engine = cls.__new__(cls)
        engine._build(graphdef, params, nnx.merge(graphdef, params).cfg, cfg or EngineConfig(),
                      mesh)
        return engine

    def _build(self, graphdef, params, model_cfg, cfg: EngineConfig,
               mesh: Mesh | None = None) -> None:
        self.cfg, self.model_cfg = cfg, model_cfg
        self.graphdef, self.params = graphdef, params
        ps = cfg.page_size
        self.max_pages = -(-(cfg.max_seq_len + cfg.decode_steps) // ps) + 1
        pages = pool_size(model_cfg, page_size=ps, kv_pages=cfg.kv_pages,
                          kv_cache_mb=cfg.kv_cache_mb,
                          default_pages=cfg.num_slots * self.max_pages)
        if pages < self.max_pages:
            raise UserError(f"rollout engine: a pool of {pages} pages cannot hold one sequence "
                            f"of max_seq_len={cfg.max_seq_len} (needs {self.max_pages} pages of "
                            f"{ps} positions)")
        self.pool = PagePool(pages)
        self.decode_impl = pm.resolve_decode_impl(cfg.attention_impl)
        self.kv = pm.init_paged_kv(model_cfg, pages, ps, mesh)
        self.stats = EngineStats(pool_pages=pages, page_bytes=page_bytes(model_cfg, ps))
        self.seqs: dict[Hashable, Seq] = {}
        self.waiting: collections.deque[Seq] = collections.deque()
        self.slots: list[Seq | None] = [None] * cfg.num_slots
        self.prefixes: dict[tuple[int, ...], Prefix] = {}
        self._events: list[Event] = []
        self._copies: list[tuple[int, int]] = []
        self._stamp = 0
        self._stop_width = 1
        self.version = 0

    # ------------------------------------------------------------------ public API

    def reset_stats(self) -> EngineStats:
        """Starts the counters again (the page peak from the pages in use now); returns the old."""
        old = self.stats
        self.stats = EngineStats(pool_pages=old.pool_pages, page_bytes=old.page_bytes,
                                 pages_in_use=self.pool.in_use, pages_peak=self.pool.in_use)
        self.pool.peak = self.pool.in_use
        return old

    def set_sampling(self, sampling: SamplingParams) -> None:
        """Temperature / top-p / top-k of the requests submitted from now on that set none of
        their own; only while the engine holds no sequence (top-k is one for all)."""
        if self.seqs:
            raise RuntimeError(f"rollout engine: cannot change sampling with {len(self.seqs)} "
                               f"live sequences")
        self.cfg = dataclasses.replace(self.cfg, sampling=sampling)

    def update_params(self, model_or_state: Any, version: int | None = None) -> None:
        """Points the engine at new weights (same structure) without recompiling; tokens
        sampled from now on record ``version`` (None: the current one), the policy version
        of the weights. Call it between `step` calls (live sequences continue with them)."""
        is_module = isinstance(model_or_state, nnx.Module)
        self.params = nnx.state(model_or_state) if is_module else model_or_state
        if version is not None:
            self.version = int(version)

    def submit(self, request: Request) -> None:
        """Queues a request; requests with equal prompts share the prompt's pages."""
        if request.request_id in self.seqs:
            raise ValueError(f"request {request.request_id!r} is already live")
        prompt = [int(t) for t in request.prompt]
        if not prompt:
            raise ValueError(f"request {request.request_id!r}: the prompt is empty")
        if request.max_new_tokens <= 0:
            raise ValueError(f"request {request.request_id!r}: max_new_tokens must be positive, "
                             f"got {request.max_new_tokens}")
        if len(prompt) + request.max_new_tokens > self.cfg.max_seq_len:
            raise ValueError(f"request {request.request_id!r}: prompt {len(prompt)} + "
                             f"max_new_tokens {request.max_new_tokens} exceeds max_seq_len "
                             f"{self.cfg.max_seq_len}")
        if request.sampling is not None and request.sampling.top_k != self.cfg.sampling.top_k:
            raise ValueError(f"request {request.request_id!r}: top_k {request.sampling.top_k} "
                             f"differs from the engine's {self.cfg.sampling.top_k}")
        self._stop_width = max(self._stop_width,
                               len(request.stop_tokens) + len(request.pause_tokens))
        prefix = self.prefixes.setdefault(tuple(prompt[:-1]), Prefix(tokens=tuple(prompt[:-1])))
        prefix.refs += 1
        seq = Seq(request=request, tokens=prompt, budget=request.max_new_tokens, prefix=prefix,
                  turn_start=len(prompt), key_data=_key_data(request.key))
        self.seqs[request.request_id] = seq
        self.waiting.append(seq)

    def resume(self, request_id: Hashable, tokens: Sequence[int]) -> None:
        """Appends ``tokens`` (e.g. a tool's output, not model tokens) to a paused sequence and
        queues it to continue decoding after them. Tokens beyond its budget are dropped and the
        sequence then finishes with reason "length"."""
        seq = self._paused(request_id)
        kept = [int(t) for t in tokens][: seq.budget]
        seq.tokens.extend(kept)
        seq.budget -= len(kept)
        seq.turn_start = len(seq.tokens)
        seq.logprobs, seq.values, seq.versions, seq.matcher = [], [], [], None
        if seq.budget <= 0:
            self._finish(seq, "length")
            return
        seq.state = WAITING
        self.waiting.appendleft(seq)

    def release(self, request_id: Hashable) -> None:
        """Ends a paused sequence for good, freeing its pages."""
        self._drop(self._paused(request_id))

    def abort(self, request_id: Hashable) -> bool:
        """Ends a sequence in any state (queued, in a slot or paused), freeing its pages and
        dropping its pending event; False if it is not live."""
        seq = self.seqs.get(request_id)
        if seq is None:
            return False
        self._events = [e for e in self._events if e.request_id != request_id]
        self._drop(seq)
        return True

    @property
    def has_work(self) -> bool:
        """Whether `step` would advance anything (queued, prefilling or decoding sequences)."""
        return bool(self.waiting) or any(s is not None for s in self.slots) or bool(self._events)

    def step(self) -> list[Event]:
        """Admits queued requests into free slots, runs one prefill chunk and one decode round
        trip (up to ``decode_steps`` tokens per slot); returns the sequences that left a slot."""
        self._admit()
        prefilled, budget = False, self.cfg.prefill_tokens_per_step
        while budget > 0:
            written = self._run_prefill()
            if not written:
                break
            prefilled, budget = True, budget - written
        decoded = self._run_decode()
        if not (prefilled or decoded) and self._any_holder_active():
            # Slotted sequences wait for pages that others hold (a fork's copy page).
            victim = self._victim()
            if victim is not None:
                self._preempt(victim)
        events, self._events = self._events, []
        self.stats.pages_in_use = self.pool.in_use
        self.stats.pages_peak = self.pool.peak
        self.stats.steps += 1
        self.stats.pages_in_use_sum += self.pool.in_use
        return events

    def run(self) -> list[Event]:
        """Steps until nothing is queued or decoding (paused sequences stay paused)."""
        events: list[Event] = []
        while self.has_work:
            events.extend(self.step())
        return events

    # ------------------------------------------------------------------ admission

    def _paused(self, request_id: Hashable) -> Seq:
        seq = self.seqs.get(request_id)
        if seq is None or seq.state != PAUSED:
            raise ValueError(f"request {request_id!r} is not paused")
        return seq

    def _admit(self) -> None:
        """Moves queued sequences into free slots while pages allow, in queue order (skipping
        those whose shared prefix another sequence is still prefilling)."""
        free = [i for i, s in enumerate(self.slots) if s is None]
        filling = {id(s.prefix) for s in self.slots if s is not None and s.prefix is not None}
        skipped: list[Seq] = []
        while free and self.waiting:
            seq = self.waiting.popleft()
            if seq.prefix is not None and id(seq.prefix) in filling:
                skipped.append(seq)
                continue
            if not self._reserve_context(seq):
                self.waiting.appendleft(seq)
                break
            self._stamp += 1
            seq.order, seq.slot = self._stamp, free.pop(0)
            self.slots[seq.slot] = seq
            seq.state = PREFILL
            self._start_if_ready(seq)
            if seq.prefix is not None and seq.state == PREFILL:
                filling.add(id(seq.prefix))
        self.waiting.extendleft(reversed(skipped))
        if not free or not self.waiting or self._any_holder_active():
            return
        # Nothing decodes and the queue head does not fit: the pages are held by paused
        # sequences and by queued ones that kept theirs (resumed after a tool call).
        victim = self._victim()
        if victim is None:
            raise RuntimeError("rollout engine: the page pool cannot admit any request")
        self._preempt(victim)

    def _alloc(self, n: int) -> list[int] | None:
        """n pages, dropping idle prefixes (not being filled or forked in a slot; their queued
        members prefill them again) when the pool is short; None if still short."""
        pages = self.pool.alloc(n)
        if pages is not None:
            return pages
        in_slots = {id(s.prefix) for s in self.slots if s is not None and s.prefix is not None}
        for prefix in self.prefixes.values():
            if prefix.pages is not None and id(prefix) not in in_slots:
                self.pool.release(prefix.pages)
                prefix.pages, prefix.written = None, 0
        return self.pool.alloc(n)

    def _any_holder_active(self) -> bool:
        return any(s is not None for s in self.slots)

    def _reserve_context(self, seq: Seq) -> bool:
        """Pages for the sequence's context (its prefix's, when shared); False if the pool is short."""
        ps = self.cfg.page_size
        prefix = seq.prefix
        if prefix is not None and prefix.pages is None and prefix.refs < 2:
            self._detach(seq)        # a prompt sampled once gains nothing from sharing
            prefix = None
        if prefix is None:
            pages = self._alloc(seq.pages_for(seq.context_len, ps))
            if pages is None:
                return False
            seq.pages.extend(pages)
            return True
        if prefix.pages is None:
            pages = self._alloc(-(-len(prefix.tokens) // ps))
            if pages is None:
                return False
            prefix.pages = pages
            return True
        return self.pool.num_free >= 1 or len(prefix.tokens) % ps == 0

    def _start_if_ready(self, seq: Seq) -> None:
        """A slotted sequence whose context is written starts decoding (forking its prefix)."""
        if seq.prefix is not None:
            if seq.prefix.complete:
                self._fork(seq)
        elif seq.length >= seq.context_len:
            seq.state = RUNNING

    def _fork(self, seq: Seq) -> None:
        """Starts a sequence from its complete prefix: full pages shared, the partial last page
        copied (copy-on-write at fork, since the fork writes there next)."""
        prefix, ps = seq.prefix, self.cfg.page_size
        full = len(prefix.tokens) // ps
        seq.pages = list(prefix.pages[:full])
        self.pool.share(seq.pages)
        if len(prefix.tokens) % ps:
            page = self._alloc(1)
            if page is None:                 # reserved at admission; the pool changed since
                self.pool.release(seq.pages)
                seq.pages = []
                return
            self._copies.append((prefix.pages[full], page[0]))
            seq.pages.extend(page)
        seq.length = len(prefix.tokens)
        self.stats.prefix_hits += int(prefix.forks > 0)
        prefix.forks += 1
        seq.state = RUNNING
        # From here on the fork's pages are its own references; the prefix may go.
        self._detach(seq)

    def _detach(self, seq: Seq) -> None:
        """The sequence stops counting on its prefix; an unused prefix frees its pages."""
        prefix, seq.prefix = seq.prefix, None
        if prefix is None:
            return
        prefix.refs -= 1
        if prefix.refs == 0:
            self.pool.release(prefix.pages or [])
            del self.prefixes[prefix.tokens]

    # ------------------------------------------------------------------ prefill

    def _prefill_jobs(self) -> list[tuple[Any, list[int], int, list[int]]]:
        """(target, tokens, start, pages) for up to prefill_rows contexts still being written."""
        jobs, seen = [], set()
        for seq in self.slots:
            if seq is None or seq.state != PREFILL:
                continue
            prefix = seq.prefix
            if prefix is not None:
                if prefix.complete or id(prefix) in seen:
                    continue
                seen.add(id(prefix))
                start = prefix.written
                chunk = list(prefix.tokens[start:start + self.cfg.prefill_chunk])
                jobs.append((prefix, chunk, start, prefix.pages))
            else:
                start = seq.length
                chunk = seq.tokens[start:min(seq.context_len, start + self.cfg.prefill_chunk)]
                jobs.append((seq, chunk, start, seq.pages))
            if len(jobs) == self.cfg.prefill_rows:
                break
        return jobs

    def _run_prefill(self) -> int:
        """One chunk for up to prefill_rows contexts; returns the tokens written (0: none)."""
        for seq in self.slots:  # a fork that found no page for its copy tries again
            if seq is not None and seq.state == PREFILL and seq.prefix is not None:
                self._start_if_ready(seq)
        self._flush_copies()
        jobs = self._prefill_jobs()
        if not jobs:
            return 0
        t0 = time.perf_counter()
        # Fixed rows, power-of-two chunk and table widths: a handful of compilations, and a
        # chunk attends over the pages up to its own end, not over max_seq_len.
        rows = self.cfg.prefill_rows
        width = max(16, _bucket(max(len(j[1]) for j in jobs), 1 << 30))
        ps = self.cfg.page_size
        table_w = _bucket(max(-(-(j[2] + len(j[1])) // ps) for j in jobs), self.max_pages)
        tokens = np.zeros((rows, width), np.int32)
        start, lens = np.zeros(rows, np.int32), np.zeros(rows, np.int32)
        tables = np.zeros((rows, table_w), np.int32)
        for r, (_, chunk, s, pages) in enumerate(jobs):
            tokens[r, :len(chunk)], start[r], lens[r] = chunk, s, len(chunk)
            used = pages[:table_w]
            tables[r, :len(used)] = used
        self.kv = pm.prefill_jit(self.graphdef, self.params, self.kv, tokens, start, lens, tables)
        jax.block_until_ready(self.kv)
        for target, chunk, _, _ in jobs:
            if isinstance(target, Prefix):
                target.written += len(chunk)
            else:
                target.length += len(chunk)
        for seq in self.slots:
            if seq is not None and seq.state == PREFILL:
                self._start_if_ready(seq)
        self._flush_copies()
        self.stats.prefill_calls += 1
        self.stats.prefill_tokens += int(lens.sum())
        self.stats.prefill_s += time.perf_counter() - t0
        return int(lens.sum())

    def _flush_copies(self) -> None:
        if not self._copies:
            return
        n = _bucket(len(self._copies), 1 << 30)
        src = np.zeros(n, np.int32)
        dst = np.full(n, self.pool.num_pages, np.int32)
        src[:len(self._copies)], dst[:len(self._copies)] = zip(*self._copies)
        self.kv = pm.copy_pages_jit(self.kv, src, dst)
        self._copies = []

    # ------------------------------------------------------------------ decode

    def _ensure_decode_pages(self) -> list[Seq]:
        """Pages for every running slot's next round trip, preempting the newest sequences when
        the pool runs short; returns the slots that will decode."""
        ps, steps = self.cfg.page_size, self.cfg.decode_steps
        for seq in sorted(self._running(), key=lambda s: s.order):
            while seq.state == RUNNING:
                need = seq.pages_for(seq.length + min(steps, seq.budget), ps)
                pages = self._alloc(need)
                if pages is not None:
                    seq.pages.extend(pages)
                    break
                victim = self._victim(spare=seq)
                if victim is None:
                    raise RuntimeError("rollout engine: shared prompt prefixes fill the page "
                                       "pool; raise rollout.kv_pages")
                self._preempt(victim)
        return self._running()

    def _running(self) -> list[Seq]:
        return [s for s in self.slots if s is not None and s.state == RUNNING]

    def _run_decode(self) -> bool:
        """One decode round trip of the running slots; False when none was running."""
        running = self._ensure_decode_pages()
        if not running:
            return False
        t0 = time.perf_counter()
        cfg = self.cfg
        # The running slots are packed into the first rows of a power-of-two batch (at least
        # _MIN_ROWS): when the tail of a rollout leaves few slots running, a step costs what
        # they need, not what num_slots would. Rows carry no state between round trips.
        n = max(min(_MIN_ROWS, cfg.num_slots), _bucket(len(running), cfg.num_slots))
        tables = np.zeros((n, self.max_pages), np.int32)
        last, length, budget = (np.zeros(n, np.int32) for _ in range(3))
        live = np.zeros(n, bool)
        keys = np.zeros((n,) + running[0].key_data.shape, np.uint32)
        stops = np.full((n, self._stop_width), -1, np.int32)
        for i, seq in enumerate(running):
            tables[i, :len(seq.pages)] = seq.pages
            last[i], length[i], budget[i], live[i] = seq.tokens[-1], seq.length, seq.budget, True
            keys[i] = seq.key_data
            ids = seq.request.stop_tokens + seq.request.pause_tokens
            stops[i, :len(ids)] = ids
        slots = pm.SlotState(last, length, budget, live, keys, stops)
        return_after = 1 if self.waiting else n + 1
        allowed = batch_bitmasks([s.matcher for s in running], n, self.model_cfg.vocab_size)
        temperature, top_p, use_filter = self._row_sampling(running, n)
        out = pm.decode_jit(
            self.graphdef, self.params, self.kv, slots, tables, self._pairs(running, n),
            temperature, top_p, jnp.int32(return_after), allowed,
            num_steps=cfg.decode_steps if allowed is None else 1, top_k=cfg.sampling.top_k,
            use_filter=use_filter, attention_impl=self.decode_impl)
        self.kv = out.kv
        toks, lps, vals, count, stopped, steps = jax.device_get(
            (out.tokens, out.logprobs, out.values, out.count, out.stopped, out.steps))
        self.stats.decode_calls += 1
        self.stats.slot_steps += int(steps) * cfg.num_slots
        self.stats.row_steps += int(steps) * n
        self.stats.token_steps += int(count.sum())
        for i, seq in enumerate(running):
            k = int(count[i])
            # A pause token also stops the slot on the device; only stop tokens finish it.
            finished = (bool(stopped[i]) and k > 0
                        and int(toks[i, k - 1]) in seq.request.stop_tokens)
            self._take_tokens(seq, toks[i, :k], lps[i, :k], vals[i, :k], finished)
        self.stats.decode_s += time.perf_counter() - t0
        return True

    def _row_sampling(self, running: list[Seq], rows_in_batch: int
                      ) -> tuple[np.ndarray, np.ndarray, bool]:
        """Per-row temperature and top-p (float32 [rows]; a request's own settings, else the
        engine's) and whether any row truncates (the static ``use_filter``)."""
        default = self.cfg.sampling
        params = [s.request.sampling or default for s in running]
        temperature = np.full(rows_in_batch, default.temperature, np.float32)
        top_p = np.full(rows_in_batch, default.top_p, np.float32)
        temperature[:len(params)] = [p.temperature for p in params]
        top_p[:len(params)] = [p.top_p for p in params]
        return temperature, top_p, any(p.use_filter for p in params)

    def _constrain(self, seq: Seq, toks) -> bool:
        """Advances the sequence's matcher over its new tokens, or starts one when its
        constraint asks (cutting the turn there); True when tokens were cut."""
        if seq.matcher is not None:
            for t in toks:
                seq.matcher.advance(int(t))
            return False
        started = seq.request.constraint.start(seq.tokens[seq.turn_start:])
        if started is None:
            return False
        keep, seq.matcher = started
        drop = len(seq.tokens) - seq.turn_start - keep
        self._truncate(seq, drop)
        return drop > 0

    def _pairs(self, running: list[Seq], rows_in_batch: int) -> PagePairs:
        """(row, page, first position) for every page of the running sequences (row i is
        running[i]), padded to a power of two (>= 64) so that few shapes compile."""
        total = sum(len(s.pages) for s in running)
        m = max(64, _bucket(total, 1 << 30))
        rows = np.full(m, rows_in_batch, np.int32)
        pages, starts = np.zeros(m, np.int32), np.zeros(m, np.int32)
        at = 0
        for i, seq in enumerate(running):
            k = len(seq.pages)
            rows[at:at + k], pages[at:at + k] = i, seq.pages
            starts[at:at + k] = np.arange(k) * self.cfg.page_size
            at += k
        return PagePairs(rows, pages, starts)

    def _take_tokens(self, seq: Seq, toks, lps, vals, stopped: bool) -> None:
        """Records a slot's new tokens, then finishes, pauses or keeps it decoding."""
        seq.tokens.extend(int(t) for t in toks)
        seq.logprobs.extend(float(x) for x in lps)
        seq.values.extend(float(x) for x in vals)
        seq.versions.extend([self.version] * len(toks))
        seq.length += len(toks)
        seq.budget -= len(toks)
        if seq.request.constraint is not None and self._constrain(seq, toks):
            stopped = False       # the cut dropped the stop token with what followed the opener
        hook = seq.request.pause
        cut = None if hook is None else hook(seq.tokens[seq.turn_start:])
        if cut is not None:
            turn = len(seq.tokens) - seq.turn_start
            cut = max(0, min(int(cut), turn))
            self._truncate(seq, turn - cut)
            self._emit(seq, "paused", "pause")
            self.slots[seq.slot], seq.slot, seq.state = None, -1, PAUSED
            seq.matcher = None
        elif stopped:
            self._finish(seq, "stop")
        elif seq.budget <= 0:
            self._finish(seq, "length")

    def _truncate(self, seq: Seq, drop: int) -> None:
        """Forgets the last ``drop`` model tokens (their K/V slots are overwritten later)."""
        if drop == 0:
            return
        del seq.tokens[-drop:], seq.logprobs[-drop:], seq.values[-drop:], seq.versions[-drop:]
        seq.budget += drop
        seq.length = min(seq.length, len(seq.tokens) - 1)

    # ------------------------------------------------------------------ leaving

    def _emit(self, seq: Seq, kind: str, reason: str) -> None:
        self._events.append(Event(
            seq.request.request_id, kind, reason, seq.tokens[seq.turn_start:],
            np.asarray(seq.logprobs, np.float32), np.asarray(seq.values, np.float32),
            np.asarray(seq.versions, np.int32)))

    def _finish(self, seq: Seq, reason: str) -> None:
        self._emit(seq, "finished", reason)
        self._drop(seq)

    def _drop(self, seq: Seq) -> None:
        """Frees everything the sequence holds and forgets it."""
        if seq.slot >= 0:
            self.slots[seq.slot] = None
        if seq.state == WAITING:
            self.waiting.remove(seq)
        self.pool.release(seq.pages)
        self._detach(seq)
        del self.seqs[seq.request.request_id]
        self.stats.pages_in_use = self.pool.in_use

    def _victim(self, spare: Seq | None = None) -> Seq | None:
        """Whose pages to free when the pool is short: the newest idle holder (paused, or
        queued with the pages it kept), else the newest holder in a slot other than ``spare``,
        else ``spare``. Idle holders go first and the oldest slotted sequence last, so the
        oldest running sequence always gets its pages (the pool holds one whole sequence) and
        the engine cannot cycle between preempting a sequence and admitting it again."""
        holders = [s for s in self.seqs.values() if s.pages]
        idle = [s for s in holders if s.state in (PAUSED, WAITING)]
        others = [s for s in holders if s is not spare]
        candidates = idle or others or [s for s in holders if s is spare]
        return max(candidates, key=lambda s: s.order) if candidates else None

    def _preempt(self, seq: Seq) -> None:
        """Frees a sequence's pages; it is queued first and recomputes its context later. Its
        tokens are kept, and the next token's key depends only on its position, so the result
        is the one it would have had."""
        self.stats.preemptions += 1
        self.pool.release(seq.pages)
        seq.pages, seq.length = [], 0
        self._detach(seq)
        if seq.slot >= 0:
            self.slots[seq.slot], seq.slot = None, -1
        if seq.state not in (PAUSED, WAITING):
            seq.state = WAITING
            self.waiting.appendleft(seq)
