"""The host side of the engine: what runs. Queued requests are admitted into free decode slots
while pages allow, prefilled in chunks and decoded in round trips; when pages run short the
newest sequence is preempted; after each round trip a sequence finishes, pauses or decodes on.

The live sequences' bookkeeping (queue, slots, what leaving a slot frees) is `SlotTable`'s; a
runner does the device work (`runner.ModelRunner`, or any object with the four methods of
`Runner`). No JAX here, so the scheduling is tested on its own with a runner that returns
scripted tokens.
"""

from __future__ import annotations

import dataclasses
import time

from agentic_jax.rollout.engine.page_manager import choose_victim, prefill_chunks
from agentic_jax.rollout.engine.pages import PagePool
from agentic_jax.rollout.engine.runner_api import DecodeResult, PrefillChunk, Runner
from agentic_jax.rollout.engine.sequences import PREFILL, RUNNING, Prefix, Seq
from agentic_jax.rollout.engine.slot_table import SlotTable
from agentic_jax.rollout.engine.types import EngineConfig, Event, Request, SamplingParams


class Scheduler(SlotTable):
    """Continuous batching over a paged KV cache, on the host (see the package docstring)."""

    def __init__(self, cfg: EngineConfig, pool: PagePool, runner: Runner, page_bytes: int = 0):
        super().__init__(cfg, pool, page_bytes)
        self.runner = runner
        # End a decode round trip when any slot stops, not only when requests wait (serving:
        # a finished request's reply leaves at once, at the cost of more round trips).
        self.return_on_finish = False
        self.version = 0
        self._stamp = 0
        self._stop_width = 1

    # ------------------------------------------------------------------ requests

    def submit(self, request: Request) -> None:
        """Queues a request; requests with equal prompts share the prompt's pages."""
        if request.request_id in self.seqs:
            raise ValueError(f"request {request.request_id!r} is already live")
        self.cfg.check(request)
        prompt = [int(t) for t in request.prompt]
        key_data = self.runner.key_data(request.key)
        self._stop_width = max(self._stop_width,
                               len(request.stop_tokens) + len(request.pause_tokens))
        tops = (request.sampling or self.cfg.sampling).top_logprobs
        seq = Seq(request=request, tokens=prompt, budget=request.max_new_tokens,
                  prefix=self.pages.share_prefix(prompt), turn_start=len(prompt),
                  key_data=key_data, top_logprobs=[] if tops else None)
        self.seqs[request.request_id] = seq
        self.waiting.append(seq)

    def set_sampling(self, sampling: SamplingParams) -> None:
        """The default sampling of requests submitted from now on; only with no live sequence."""
        if self.seqs:
            raise RuntimeError(f"rollout engine: cannot change sampling with {len(self.seqs)} "
                               f"live sequences")
        self.cfg = dataclasses.replace(self.cfg, sampling=sampling)

    def step(self) -> list[Event]:
        """Admits queued requests into free slots, prefills into what the running rows leave
        of the step's token budget (decode first), then one decode round trip (with
        ``mixed_prefill`` and rows running, the prefill chunks ride in its one step instead);
        returns the sequences that left a slot."""
        self._admit()
        full = self._prefill_budget()
        if self._mixes():
            # The chunk rides with the round trip's first step (`EngineConfig.mixed_prefill`).
            decoded = self._run_decode(chunk_budget=full)
            prefilled = decoded
        else:
            budget = self._prefill_within(full)
            if self.pages.cache is not None and self.waiting and None in self.slots:
                # Requests held back while another slot prefilled their first page now read
                # it from the cache.
                self._admit()
                budget = self._prefill_within(budget)
            prefilled = budget < full
            decoded = self._run_decode()
        if not (prefilled or decoded) and self._any_slotted():
            # Slotted sequences wait for pages that others hold (a fork's copy page).
            victim = choose_victim(self.seqs.values())
            if victim is not None:
                self._preempt(victim)
        events, self._events = self._events, []
        self.stats.pages_in_use = self.pages.pool.in_use
        self.stats.pages_peak = self.pages.pool.peak
        self.stats.steps += 1
        self.stats.cached_tokens += self.pages.cached_tokens
        self.pages.cached_tokens = 0
        self.stats.pages_in_use_sum += self.pages.pool.in_use
        return events

    def _mixes(self) -> bool:
        """Whether this step's prefill rides with its decode round trip: ``mixed_prefill`` on,
        rows running, none of them under a code constraint (one-step round trips)."""
        running = self._running()
        return bool(self.cfg.mixed_prefill and running
                    and all(s.matcher is None for s in running))

    def _prefill_budget(self) -> int:
        """Decode first: what the running rows' next decode step leaves of ``step_tokens``
        (at least one token: the config keeps the slots' share below the budget)."""
        return self.cfg.step_tokens - len(self._running()) * (self.cfg.speculative_tokens + 1)

    def _prefill_within(self, budget: int) -> int:
        """Prefill chunks until ``budget`` context tokens are written or none is left;
        returns the budget left."""
        while budget > 0:
            written = self._run_prefill(budget)
            if not written:
                break
            budget -= written
        return budget

    # ------------------------------------------------------------------ admission

    def _admit(self) -> None:
        """Moves queued sequences into free slots while pages allow, in queue order (skipping
        those whose shared prefix another sequence is still prefilling, and, with a prefix
        cache, those whose first page another context is writing: `step` admits them again
        after the prefill, from the cache)."""
        free = [i for i, s in enumerate(self.slots) if s is None]
        filling = {id(s.prefix) for s in self.slots if s is not None and s.prefix is not None}
        # With a prefix cache: the first pages that slotted contexts are writing now.
        first_pages = {self.pages.first_page(s) for s in self.slots
                       if s is not None and s.state == PREFILL}
        skipped: list[Seq] = []
        while free and self.waiting:
            seq = self.waiting.popleft()
            if seq.prefix is not None and id(seq.prefix) in filling:
                skipped.append(seq)
                continue
            if self.pages.waits_for_first_page(seq, first_pages):
                skipped.append(seq)      # another slot is writing its first page for the cache
                continue
            if not self.pages.reserve_context(seq, self.slots):
                self.waiting.appendleft(seq)
                break
            self._stamp += 1
            seq.order, seq.slot = self._stamp, free.pop(0)
            self.slots[seq.slot] = seq
            seq.state = PREFILL
            self._start_if_ready(seq)
            if seq.prefix is not None and seq.state == PREFILL:
                filling.add(id(seq.prefix))
            if seq.state == PREFILL:
                first_pages.add(self.pages.first_page(seq))
        self.waiting.extendleft(reversed(skipped))
        if not free or not self.waiting or self._any_slotted():
            return
        # Nothing decodes and the queue head does not fit: the pages are held by paused
        # sequences and by queued ones that kept theirs (resumed after a tool call).
        victim = choose_victim(self.seqs.values())
        if victim is None:
            raise RuntimeError("rollout engine: the page pool cannot admit any request")
        self._preempt(victim)

    def _start_if_ready(self, seq: Seq) -> None:
        """A slotted sequence whose context is written starts decoding (forking its prefix)."""
        prefix = seq.prefix
        if prefix is None:
            if seq.length >= seq.context_len:
                seq.state = RUNNING
        elif prefix.complete:
            hit = prefix.forks > 0
            if self.pages.fork(seq, self.slots):
                self.stats.prefix_hits += int(hit)
                seq.state = RUNNING

    # ------------------------------------------------------------------ device calls

    def _run_prefill(self, budget: int) -> int:
        """One chunk for up to prefill_rows contexts, ``budget`` tokens at most; returns the
        tokens written (0: none)."""
        t0 = time.perf_counter()
        jobs = self._prefill_jobs(self.cfg.prefill_chunk, self.cfg.prefill_rows, budget)
        if not jobs:
            self.stats.prefill_s += time.perf_counter() - t0
            self._count_compiles()
            return 0
        self.runner.prefill([chunk for _, chunk in jobs])
        written = self._wrote(jobs)
        self.stats.prefill_calls += 1
        self.stats.prefill_s += time.perf_counter() - t0
        self._count_compiles()
        return written

    def _prefill_jobs(self, chunk_size: int, rows: int, budget: int, *,
                      first_come: bool = False) -> list[tuple[Prefix | Seq, PrefillChunk]]:
        """The next prefill chunks (`prefill_chunks`: by slot, or with ``first_come`` by
        admission), once forks that found no page for their copy tried again and pending page
        copies ran."""
        for seq in self.slots:  # a fork that found no page for its copy tries again
            if seq is not None and seq.state == PREFILL and seq.prefix is not None:
                self._start_if_ready(seq)
        self._flush_copies()
        slots = self.slots
        if first_come:
            slots = sorted((s for s in slots if s is not None), key=lambda s: s.order)
        return prefill_chunks(slots, chunk_size, rows, budget)

    def _wrote(self, jobs: list[tuple[Prefix | Seq, PrefillChunk]]) -> int:
        """Books the chunks the runner wrote; the slots whose context is complete start
        decoding. Returns the tokens written."""
        for target, chunk in jobs:
            if isinstance(target, Prefix):
                target.written += len(chunk.tokens)
            else:
                target.length += len(chunk.tokens)
            self.pages.cache_written(target)
        for seq in self.slots:
            if seq is not None and seq.state == PREFILL:
                self._start_if_ready(seq)
        self._flush_copies()
        written = sum(len(chunk.tokens) for _, chunk in jobs)
        self.stats.prefill_tokens += written
        return written

    def _count_compiles(self) -> None:
        """Adds the runner's compiling calls since the last count (a runner that does not
        count them: none) to the stats."""
        take = getattr(self.runner, "take_compiles", None)
        if take is not None:
            count, seconds = take()
            self.stats.compiles += count
            self.stats.compile_s += seconds

    def _flush_copies(self) -> None:
        if self.pages.copies:
            self.runner.copy_pages(self.pages.copies)
            self.pages.copies = []

    def _ensure_decode_pages(self) -> list[Seq]:
        """Pages for every running slot's next round trip, preempting the newest sequences when
        the pool runs short; returns the slots that will decode."""
        # A speculative step emits up to speculative_tokens + 1 tokens a row.
        ps = self.cfg.page_size
        steps = self.cfg.decode_steps * (self.cfg.speculative_tokens + 1)
        for seq in sorted(self._running(), key=lambda s: s.order):
            while seq.state == RUNNING:
                pages = self.pages.alloc(seq.pages_for(seq.length + min(steps, seq.budget), ps),
                                         self.slots)
                if pages is not None:
                    seq.pages.extend(pages)
                    break
                victim = choose_victim(self.seqs.values(), spare=seq)
                if victim is None:
                    raise RuntimeError("rollout engine: shared prompt prefixes fill the page "
                                       "pool; raise rollout.kv_pages")
                self._preempt(victim)
        return self._running()

    def _run_decode(self, chunk_budget: int = 0) -> bool:
        """One decode round trip of the running slots, with ``chunk_budget`` > 0 the next
        prefill chunks in its first step (up to prefill_rows contexts, first come first, each
        at most mixed_prefill tokens, together at most ``chunk_budget``); False when none was
        running."""
        running = self._ensure_decode_pages()
        if not running:
            return False
        t0 = time.perf_counter()
        self._flush_copies()   # a fork admitted with no prefill after it copies its page first
        # Chosen after the pages: making room for the running rows may preempt a prefill.
        jobs = self._prefill_jobs(self.cfg.mixed_prefill, self.cfg.prefill_rows, chunk_budget,
                                  first_come=True) if chunk_budget > 0 else []
        kwargs = {"chunks": [chunk for _, chunk in jobs]} if jobs else {}
        out = self.runner.decode(running, stop_width=self._stop_width,
                                 return_early=bool(self.waiting) or self.return_on_finish,
                                 sampling=self.cfg.sampling, **kwargs)
        if jobs:
            self._wrote(jobs)
            self.stats.mixed_calls += 1
        self.stats.decode_calls += 1
        self.stats.slot_steps += out.steps * self.cfg.num_slots
        self.stats.row_steps += out.steps * out.rows
        self.stats.token_steps += int(out.count.sum())
        self.stats.rented_calls += int(out.rented)
        if out.drafted is not None:
            self.stats.drafted_tokens += int(out.drafted.sum())
            self.stats.accepted_tokens += int(out.accepted.sum())
        for i, seq in enumerate(running):
            seq.cache_epoch = -1      # decode-written K/V is not cached
            k = int(out.count[i])
            # A pause token also stops the slot on the device; only stop tokens finish it.
            finished = (bool(out.stopped[i]) and k > 0
                        and int(out.tokens[i, k - 1]) in seq.request.stop_tokens)
            reason = seq.take(out.tokens[i, :k], out.logprobs[i, :k], out.values[i, :k],
                              finished, self.version, self._tops(out, i, k, seq))
            if reason == "pause":
                self._pause(seq)
            elif reason is not None:
                self._finish(seq, reason)
        self.stats.decode_s += time.perf_counter() - t0
        self._count_compiles()
        return True

    def _tops(self, out: DecodeResult, row: int, count: int, seq: Seq
              ) -> list[list[tuple[int, float]]] | None:
        """Row ``row``'s first ``count`` steps' most likely (token id, log-prob) pairs, as many
        as ``seq``'s request asks for (None when it asks for none)."""
        if seq.top_logprobs is None:
            return None
        k = (seq.request.sampling or self.cfg.sampling).top_logprobs
        ids = out.top_ids[row, :count, :k].tolist()
        lps = out.top_logprobs[row, :count, :k].tolist()
        return [list(zip(step_ids, step_lps)) for step_ids, step_lps in zip(ids, lps)]
