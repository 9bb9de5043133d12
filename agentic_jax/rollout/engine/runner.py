"""The device side of the engine: the weights and the KV pool, and the calls the scheduler asks
for, built as fixed-shape numpy arrays for `paged_model`'s compiled programs."""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from agentic_jax.kernels.paged_attention import PagePairs
from agentic_jax.models import ModelConfig
from agentic_jax.rollout.constrain import batch_bitmasks
from agentic_jax.rollout.engine import paged_model as pm
from agentic_jax.rollout.engine.layer_arrays import choose_layer_arrays
from agentic_jax.rollout.engine.paged_kv import ChunkRows, PagedKV, init_paged_kv
from agentic_jax.rollout.engine.program_reuse import ProgramReuse
from agentic_jax.rollout.engine.runner_api import DecodeResult, PrefillChunk
from agentic_jax.rollout.engine.sequences import Seq
from agentic_jax.rollout.engine.speculative import context_window
from agentic_jax.rollout.engine.types import MAX_TOP_LOGPROBS, EngineConfig, SamplingParams
from agentic_jax.utils.memory import memory_maps, release_host_memory
from agentic_jax.utils.timing import CompileCount, programs_held

log = logging.getLogger(__name__)

# The fewest stop-id columns of a decode call.
STOP_COLUMNS = 4

# The smallest decode batch: fewer rows save little and would add compilations.
_MIN_ROWS = 8

# `ModelRunner.prefill_shape`: prefill chunks of at most SHORT_CHUNK tokens are padded to at
# least SHORT_ROWS rows and a table of SHORT_TABLE_POSITIONS positions (one program a width).
SHORT_CHUNK = 32
SHORT_ROWS = 4
SHORT_TABLE_POSITIONS = 512


def _bucket(n: int, cap: int) -> int:
    """The next power of two >= n (at least 1), capped at ``cap``."""
    return min(cap, 1 << max(0, n - 1).bit_length())


def _row_buckets(num_slots: int) -> list[int]:
    """The decode batch sizes: 8, 12, 16, 24, 32, 48, ... (`_width_bucket`'s steps from
    _MIN_ROWS) below ``num_slots``, then ``num_slots``."""
    sizes, size = [], min(_MIN_ROWS, num_slots)
    while size < num_slots:
        sizes.append(size)
        size = size * 3 // 2 if size & (size - 1) == 0 else size // 3 * 4
    return sizes + [num_slots]


def _width_bucket(n: int) -> int:
    """The next of 16, 24, 32, 48, 64, 96, ... (powers of two and 1.5x them) >= n: a padded
    chunk wastes at most a third of its work, for twice the compilations of powers of two."""
    width = 16
    while width < n:
        width = width * 3 // 2 if width & (width - 1) == 0 else width // 3 * 4
    return width


class _MapRoom:
    """Whether the process has memory mappings to spare for another compiled program: the
    warm-up stops (with one warning) once the next program could take it past
    `_MapWatch.LOW` of ``vm.max_map_count``, leaving the rest to compile when first needed
    (where the watch takes over), instead of LLVM failing to map a program and the process
    dying (`utils.memory.memory_maps`)."""

    def __init__(self):
        self.start = memory_maps()
        self.warned = False

    def left(self, programs: int) -> bool:
        now = memory_maps()
        if self.start is None or now is None:
            return True
        in_use, limit = now
        per_program = max(1.0, (in_use - self.start[0]) / max(1, programs))
        if in_use + per_program <= _MapWatch.LOW * limit:
            return True
        if not self.warned:
            log.warning("rollout engine: warm-up stopped after %d programs: the process holds %d "
                        "of the kernel's vm.max_map_count=%d memory mappings (about %.0f a "
                        "compiled program); the other programs compile when first needed. "
                        "Raise the limit (sysctl -w vm.max_map_count=262144) or serve a "
                        "shorter max_length.", programs, in_use, limit, per_program)
            self.warned = True
        return False


# The engine's compiled functions, shared by every engine in the process.
_PROGRAMS = (pm.decode_jit, pm.prefill_jit, pm.copy_pages_jit)


def _compiled_programs() -> int | None:
    """How many programs the engine's compiled functions hold (None where jax does not say)."""
    return programs_held(*_PROGRAMS)


class _MapWatch:
    """Keeps on-demand compilations short of the kernel's memory-map limit.

    After an engine call that compiled a program (the compiled functions' caches grew; where
    jax does not count them, every ``EVERY_S`` seconds), the process's mappings are read; past
    ``HIGH`` of ``vm.max_map_count`` the engine programs of every engine in the process are
    dropped (their mappings go with them: dropping a warmed-up tiny engine's 17 programs gave
    back 2,553 of the 2,565 they took) and compile again when next needed, from the
    persistent compile cache where it is on. A CPU server that meets many shapes on demand
    would otherwise reach the limit and die at LLVM's next mapping (`_MapRoom` keeps the
    warm-up short of it). When a drop leaves the process above ``LOW`` (the mappings are
    someone else's), dropping again would only recompile every call: the watch says so once
    and waits until the process is below ``LOW`` again. One watch per process."""

    HIGH, LOW = 0.85, 0.75
    EVERY_S = 10.0

    def __init__(self):
        self.programs = _compiled_programs()
        self.checked = time.monotonic()
        self.drops = 0
        self.armed = True

    def after_call(self, kv: Any) -> None:
        """Called after an engine call; ``kv``: the pool it wrote (finished before a drop)."""
        programs = _compiled_programs()
        if programs is None:
            if time.monotonic() - self.checked < self.EVERY_S:
                return
        elif programs <= (self.programs or 0):
            self.programs = programs
            return
        self.programs, self.checked = programs, time.monotonic()
        now = memory_maps()
        if now is None:
            return
        in_use, limit = now
        if not self.armed:
            self.armed = in_use < self.LOW * limit
            return
        if in_use <= self.HIGH * limit:
            return
        jax.block_until_ready(kv)
        for program in _PROGRAMS:
            program.clear_cache()
        gc.collect()
        self.programs, self.drops = _compiled_programs(), self.drops + 1
        after = memory_maps()
        left = after[0] if after else in_use
        self.armed = left < self.LOW * limit
        log.warning("rollout engine: the process held %d of the kernel's vm.max_map_count=%d "
                    "memory mappings; dropped the compiled engine programs (%s, every engine's "
                    "in the process; %d mappings left), which compile again when next needed.%s"
                    " Raise the limit (sysctl -w vm.max_map_count=262144) or serve a shorter "
                    "max_length.", in_use, limit, "?" if programs is None else programs, left,
                    "" if self.armed else " That did not bring the process below "
                    f"{self.LOW:.0%} of the limit, so no more are dropped until it is.")


MAP_WATCH = _MapWatch()


class ModelRunner:
    """One model's weights (graph definition + state) and its paged KV pool; implements the
    scheduler's `Runner`.

    Args:
      cfg: the engine's configuration; its shapes (slots, page size, decode steps, prefill
        rows) are read here, its sampling comes with each `decode` call.
      num_pages: the pool's pages; max_pages: the block table width of one sequence.
      mesh: the devices to sample on, when they are not the default device's.
    """

    def __init__(self, graphdef: nnx.GraphDef, params: nnx.State, model_cfg: ModelConfig,
                 cfg: EngineConfig, num_pages: int, max_pages: int, mesh: Mesh | None = None):
        # graphdef / model_cfg: the model as the engine computes it (`paged_model.with_dtype`).
        self.graphdef, self.model_cfg = graphdef, model_cfg
        self.layer_arrays, why = choose_layer_arrays(cfg.layer_arrays, model_cfg)
        log.info("rollout engine: layer_arrays %s (%s)", "on" if self.layer_arrays else "off",
                 why)
        self.params = params
        self.num_slots, self.page_size = cfg.num_slots, cfg.page_size
        self.decode_steps, self.prefill_rows = cfg.decode_steps, cfg.prefill_rows
        self.prefill_chunk, self.mixed_prefill = cfg.prefill_chunk, cfg.mixed_prefill
        self.speculative_tokens, self.ngram = cfg.speculative_tokens, cfg.speculative_ngram
        self.num_pages, self.max_pages = num_pages, max_pages
        self.decode_impl, why = pm.resolve_decode_impl(
            cfg.attention_impl, 1 if mesh is None else mesh.size)
        log.info("rollout engine: decode attention %s (%s)", self.decode_impl, why)
        self.row_buckets = _row_buckets(cfg.num_slots)
        self.mesh = mesh
        # Rent-or-buy over the compiled decode programs (`program_reuse`), on CPU: elsewhere
        # a program's padded rows need not give the same bits.
        self.reuse = None
        if cfg.reuse_programs is True or (cfg.reuse_programs == "auto"
                                          and jax.default_backend() == "cpu"):
            if _compiled_programs() is None:   # no compilation is ever seen: it never rents
                log.info("rollout engine: reuse_programs off: this jax does not say what its "
                         "jitted functions hold")
            else:
                self.reuse = ProgramReuse(row_flops=_row_flops(model_cfg),
                                          pair_flops=_pair_flops(model_cfg, cfg.page_size))
        self._drops_seen = MAP_WATCH.drops
        self.kv: PagedKV | None = init_paged_kv(model_cfg, num_pages, cfg.page_size, mesh)
        # The engine calls its programs through it (`_call`), counted in `take_compiles`.
        self._compile_count = CompileCount(*_PROGRAMS)
        self._call = self._compile_count.call

    def take_compiles(self) -> tuple[int, float]:
        """The calls that compiled a program (or loaded one from the persistent compile
        cache) since the last take, and their seconds; counted again from zero."""
        return self._compile_count.take()

    @property
    def params(self) -> nnx.State | None:
        """The weights as given (`Engine.update_params`); the programs read `engine_weights`
        of them, converted once here."""
        return self._params

    @params.setter
    def params(self, params: nnx.State | None) -> None:
        self._params = params
        self._weights = None if params is None else pm.engine_weights(
            params, self.model_cfg, layer_arrays=self.layer_arrays)

    def sleep(self) -> None:
        """Lets go of the pool and the weights (`Engine.sleep`), and hands the host memory they
        held back to the system (`release_host_memory`)."""
        self.kv = self.params = None
        release_host_memory()

    def _wake(self) -> None:
        """A fresh zero pool after `sleep` (every page's K/V is written before it is read)."""
        if self.params is None:
            raise RuntimeError("rollout engine: asleep without weights; update_params wakes it")
        if self.kv is None:
            self.kv = init_paged_kv(self.model_cfg, self.num_pages, self.page_size, self.mesh)

    def key_data(self, key: Any) -> np.ndarray:
        """A typed PRNG key or raw key data -> the key data as a uint32 numpy array."""
        key = jnp.asarray(key) if not isinstance(key, np.ndarray) else key
        if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
            key = jax.random.key_data(key)
        data = np.asarray(key)
        if data.dtype != np.uint32:
            raise ValueError(f"request key: expected a PRNG key or uint32 key data, got "
                             f"{data.dtype}")
        return data

    def copy_pages(self, copies: list[tuple[int, int]]) -> None:
        self._wake()
        n = _bucket(len(copies), 1 << 30)
        src = np.zeros(n, np.int32)
        dst = np.full(n, self.num_pages, np.int32)     # out of range: the padding copies nothing
        src[:len(copies)], dst[:len(copies)] = zip(*copies)
        self.kv = self._call(pm.copy_pages_jit, self.kv, src, dst)
        MAP_WATCH.after_call(self.kv)

    def prefill_shape(self, rows: int, longest: int, pages: int) -> tuple[int, int, int]:
        """The (rows, width, table width) of the program that prefills ``rows`` chunks of at
        most ``longest`` tokens ending within ``pages`` pages.

        Power-of-two rows (a lone refilled slot does not pay for prefill_rows of them),
        bucketed chunk widths (`_width_bucket`) and power-of-two table widths: a chunk attends
        over the pages up to its own end, not over max_seq_len. A short chunk (at most
        `SHORT_CHUNK` tokens: the rest of a prompt after its cached pages, a tool's output)
        takes at least `SHORT_ROWS` rows and `SHORT_TABLE_POSITIONS` of table, so the short
        chunks of a width share one program (where prefill_rows <= `SHORT_ROWS` and they end
        within the short table; past it, power-of-two tables as for long chunks) instead of
        one for each row count and table width (GRPO's samples of a prompt each prefill the
        prompt's last page after the first sample's cached pages: 5 of the 10 prefill
        programs SmolLM2 compiled in its first 4 GSM8K steps at 8x4, 2.5-3 s each); the
        padding costs little beside the weights' pass.
        """
        width = _width_bucket(longest)
        rows, table_w = _bucket(rows, self.prefill_rows), _bucket(pages, self.max_pages)
        if width <= SHORT_CHUNK:
            rows = max(rows, min(SHORT_ROWS, self.prefill_rows))
            table_w = max(table_w, min(self.max_pages, SHORT_TABLE_POSITIONS // self.page_size))
        return rows, width, table_w

    def prefill(self, chunks: list[PrefillChunk]) -> None:
        self._wake()
        ps = self.page_size
        rows, width, table_w = self.prefill_shape(
            len(chunks), max(len(c.tokens) for c in chunks),
            max(-(-(c.start + len(c.tokens)) // ps) for c in chunks))
        tokens, start, lens, tables = _chunk_arrays(chunks, rows, width, table_w)
        self.kv = self._call(pm.prefill_jit, self.graphdef, self._weights, self.kv, tokens,
                             start, lens, tables)
        jax.block_until_ready(self.kv)
        MAP_WATCH.after_call(self.kv)

    def decode(self, running: list[Seq], *, stop_width: int, return_early: bool,
               sampling: SamplingParams, chunks: list[PrefillChunk] | None = None
               ) -> DecodeResult:
        """One decode round trip (`runner_api.Runner.decode`); ``chunks``: up to
        ``prefill_rows`` prefill chunks of at most ``mixed_prefill`` tokens each, written in
        the first step's forward; such a round trip is that one step."""
        # The running slots are packed into the first rows of a batch of `row_buckets` rows
        # (or of a larger compiled program's, `program_reuse`): when the tail of a rollout
        # leaves few slots running, a step costs what they need, not what num_slots would.
        # Rows carry no state between round trips.
        self._wake()
        sizes = self.row_buckets
        at = next(i for i, size in enumerate(sizes) if size >= len(running))
        # The round trip ends once any slot stops (``return_early``: a queued request takes
        # it), else once the running slots fit the next smaller batch, which decodes them
        # from then on (float32 SmolLM2-135M steps of 8 / 16 / 24 / 32 rows: 27 / 39 / 51 /
        # 70 ms, `tools/bench_generate.py --model=smollm2-135m --real_workloads=profile`).
        if return_early:
            return_after = 1
        elif at > 0:
            return_after = len(running) - sizes[at - 1]
        else:
            return_after = sizes[at] + 1
        matchers = [s.matcher for s in running]
        constrained = any(m is not None for m in matchers)
        params = [s.request.sampling or sampling for s in running]
        statics = self._decode_statics(constrained, any(p.use_filter for p in params),
                                       any(p.top_logprobs for p in params), sampling)
        spec = statics["speculative_tokens"]
        # Stop-id columns in steps of powers of two from 4: a request with one more stop id
        # does not compile another program.
        stop_cols = _bucket(max(stop_width, STOP_COLUMNS), 1 << 30)
        program = _program_key(statics, constrained, stop_cols, running[0].key_data.shape)
        chunk_rows = None
        if chunks:
            if spec or constrained:
                raise ValueError("rollout engine: a prefill chunk rides only with plain "
                                 "decode steps (no drafts, no code constraint)")
            chunk_rows = self._chunk_rows(chunks)
            program += (("mixed", *chunk_rows.tokens.shape),)
            # One step, as vLLM schedules a forward at a time: a context the chunks complete
            # decodes from the next round trip, and the next chunks ride with it.
            return_after = 0
        wanted = (sizes[at], self._pairs_width(running) if self._reads_pairs() else 1)
        self._forget_dropped_programs()
        # A speculative step's padded rows moved a log-prob by an ulp: it runs its own shape.
        reuse = None if spec else self.reuse
        n, width = reuse.choose(program, *wanted) if reuse is not None else wanted
        tables = np.zeros((n, self.max_pages), np.int32)
        last, length, budget = (np.zeros(n, np.int32) for _ in range(3))
        live = np.zeros(n, bool)
        keys = np.zeros((n,) + running[0].key_data.shape, np.uint32)
        stops = np.full((n, stop_cols), -1, np.int32)
        for i, seq in enumerate(running):
            tables[i, :len(seq.pages)] = seq.pages
            last[i], length[i], budget[i], live[i] = seq.tokens[-1], seq.length, seq.budget, True
            keys[i] = seq.key_data
            ids = seq.request.stop_tokens + seq.request.pause_tokens
            stops[i, :len(ids)] = ids
        slots = pm.SlotState(last, length, budget, live, keys, stops)
        allowed = batch_bitmasks(matchers, n, self.model_cfg.vocab_size)
        temperature, top_p = _row_sampling(params, n, sampling)
        window = context_window([s.tokens for s in running], n) if spec else None
        compiled_before = self._compile_count.seconds
        start = time.perf_counter()
        out = self._call(
            pm.decode_jit, self.graphdef, self._weights, self.kv, slots, tables,
            self._pairs(running, n, width), temperature, top_p, jnp.int32(return_after),
            allowed, window, chunk_rows, **statics)
        self.kv = out.kv
        got = jax.device_get((out.tokens, out.logprobs, out.values, out.count, out.stopped,
                              out.steps, out.top_logprobs, out.top_ids, out.drafted,
                              out.accepted))
        if reuse is not None:
            reuse.ran(program, wanted, (n, width), steps=int(got[5]),
                      seconds=time.perf_counter() - start,
                      compile_s=self._compile_count.seconds - compiled_before)
        MAP_WATCH.after_call(self.kv)
        return DecodeResult(*got[:5], int(got[5]), n, *got[6:], rented=(n, width) != wanted)

    def _chunk_rows(self, chunks: list[PrefillChunk], rows: int | None = None) -> ChunkRows:
        """Prefill chunks as the decode program's mixed step takes them: ``rows`` rows (default:
        the chunks' count rounded up to a power of two, capped at ``prefill_rows``) of
        ``mixed_prefill`` tokens (padded, invalid) and full block tables, so each decode shape
        has one mixed twin a row count."""
        width = self.mixed_prefill
        rows = rows or _bucket(len(chunks), self.prefill_rows)
        if len(chunks) > rows or any(len(c.tokens) > width for c in chunks):
            raise ValueError(f"rollout engine: {len(chunks)} mixed prefill chunks of "
                             f"{[len(c.tokens) for c in chunks]} tokens exceed {rows} rows of "
                             f"mixed_prefill={width}")
        tokens, start, lens, tables = _chunk_arrays(chunks, rows, width, self.max_pages)
        positions = start[:, None] + np.arange(width, dtype=np.int32)
        return ChunkRows(tokens, positions, np.arange(width) < lens[:, None], tables)

    def _decode_statics(self, constrained: bool, use_filter: bool, wants_tops: bool,
                        sampling: SamplingParams) -> dict[str, Any]:
        """`paged_model.decode_jit`'s static arguments for a round trip: with a code constraint
        one step and no drafts; with any row asking for top log-probs, `MAX_TOP_LOGPROBS`."""
        return dict(num_steps=1 if constrained else self.decode_steps, top_k=sampling.top_k,
                    use_filter=use_filter, attention_impl=self.decode_impl,
                    top_logprobs=MAX_TOP_LOGPROBS if wants_tops else 0,
                    speculative_tokens=0 if constrained else self.speculative_tokens,
                    ngram=self.ngram)

    def _forget_dropped_programs(self) -> None:
        """After the map watch dropped the compiled programs, `reuse` forgets them."""
        if MAP_WATCH.drops != self._drops_seen:
            if self.reuse is not None:
                self.reuse.forget()
            self._drops_seen = MAP_WATCH.drops

    def warmup(self, max_context: int, sampling: SamplingParams) -> int:
        """Compiles the decode program of every batch size and attention width, and the
        prefill program of every chunk shape, that contexts of up to ``max_context`` positions
        can reach (with ``mixed_prefill``, each decode program's mixed twins too), so a
        server's requests never wait on a compilation (the first 32-client minutes of serving
        the tiny model otherwise compiled 11 decode and 8 prefill programs, 1-2 s each, while
        requests waited). The programs of the default sampling, without
        top log-probs or a code constraint; other variants compile when first asked for.
        Every row is idle and every token invalid: nothing is written to the pool. Returns
        the number of programs run."""
        self._wake()
        ps = self.page_size
        spec = self.speculative_tokens
        room = _MapRoom()
        pages = min(self.max_pages,
                    -(-(max_context + self.decode_steps * (spec + 1)) // ps) + 1)
        n_programs = 0
        mixed_rows = sorted({_bucket(k, self.prefill_rows) for k in
                             range(1, self.prefill_rows + 1)}) if self.mixed_prefill else []
        # The programs `decode` runs for requests of the default sampling.
        statics = self._decode_statics(False, sampling.use_filter, False, sampling)
        key_shape = self.key_data(jax.random.key(0)).shape   # a request's key, as submitted
        program = _program_key(statics, False, STOP_COLUMNS, key_shape)
        self._forget_dropped_programs()
        for n in self.row_buckets:
            slots = pm.SlotState(*(np.zeros(n, np.int32) for _ in range(3)),
                                 np.zeros(n, bool), np.zeros((n, *key_shape), np.uint32),
                                 np.full((n, STOP_COLUMNS), -1, np.int32))
            widths = (sorted({max(64, _width_bucket(k)) for k in range(1, n * pages + 1)})
                      if self._reads_pairs() else [1])
            for m in widths:
                if not room.left(n_programs):
                    return n_programs
                pairs = PagePairs(np.full(m, n, np.int32), np.zeros(m, np.int32),
                                  np.zeros(m, np.int32))
                # The plain program, then its mixed twins (chunks invalid).
                for i, rows in enumerate([0] + mixed_rows):   # mixed: never with spec
                    if i and not room.left(n_programs):
                        return n_programs
                    chunk_rows = self._chunk_rows([], rows) if rows else None
                    self.kv = pm.decode_jit(
                        self.graphdef, self._weights, self.kv, slots,
                        np.zeros((n, self.max_pages), np.int32), pairs,
                        np.full(n, sampling.temperature, np.float32),
                        np.full(n, sampling.top_p, np.float32), jnp.int32(n + 1), None,
                        context_window([], n) if spec else None, chunk_rows, **statics).kv
                    n_programs += 1
                    if self.reuse is not None:
                        self.reuse.add_compiled(program + (
                            (("mixed", *chunk_rows.tokens.shape),) if rows else ()), (n, m))
        # A chunk of L tokens from position `start` (0, or a page boundary: after a prefix
        # found in the cache, or after an earlier chunk), in a call of any row count, as
        # `prefill_shape` pads it.
        chunk = min(max_context, self.prefill_chunk)
        row_counts = {_bucket(k, self.prefill_rows) for k in range(1, self.prefill_rows + 1)}
        shapes = sorted({self.prefill_shape(rows, k, -(-(start + k) // ps))
                         for rows in row_counts
                         for start in range(0, max_context, ps)
                         for k in range(1, min(chunk, max_context - start) + 1)})
        for rows, width, table_w in shapes:
            if not room.left(n_programs):
                jax.block_until_ready(self.kv)
                return n_programs
            self.kv = pm.prefill_jit(
                self.graphdef, self._weights, self.kv, np.zeros((rows, width), np.int32),
                np.zeros(rows, np.int32), np.zeros(rows, np.int32),
                np.zeros((rows, table_w), np.int32))
            n_programs += 1
        jax.block_until_ready(self.kv)
        return n_programs

    def _reads_pairs(self) -> bool:
        """Whether decode attention reads the page-pair list (XLA on CPU, and speculative
        steps); else it reads the block tables and the list is one unused pair, so that
        programs differ by row count alone."""
        return self.decode_impl == "xla" or bool(self.speculative_tokens)

    @staticmethod
    def _pairs_width(running: list[Seq]) -> int:
        """The page-pair list's width for ``running``: its pages padded to the next of 64, 96,
        128, 192, ... (`_width_bucket`): attention pays for every listed pair, so a power of
        two (335 pairs -> 512) would cost up to twice the work, for half the compilations."""
        return max(64, _width_bucket(sum(len(s.pages) for s in running)))

    def _pairs(self, running: list[Seq], rows_in_batch: int, width: int) -> PagePairs:
        """(row, page, first position) for every page of the running sequences (row i is
        running[i]), padded to ``width`` pairs with pairs of row ``rows_in_batch`` (none);
        only the padding where attention does not read them (`_reads_pairs`)."""
        rows = np.full(width, rows_in_batch, np.int32)
        pages, starts = np.zeros(width, np.int32), np.zeros(width, np.int32)
        if not self._reads_pairs():
            return PagePairs(rows, pages, starts)
        at = 0
        for i, seq in enumerate(running):
            k = len(seq.pages)
            rows[at:at + k], pages[at:at + k] = i, seq.pages
            starts[at:at + k] = np.arange(k) * self.page_size
            at += k
        return PagePairs(rows, pages, starts)


def _chunk_arrays(chunks: list[PrefillChunk], rows: int, width: int, table_w: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Chunks as fixed-shape rows: tokens int32 [rows, width] (padded with 0), start and lens
    int32 [rows] (0 for padding rows), block tables int32 [rows, table_w]."""
    tokens = np.zeros((rows, width), np.int32)
    start, lens = np.zeros(rows, np.int32), np.zeros(rows, np.int32)
    tables = np.zeros((rows, table_w), np.int32)
    for r, chunk in enumerate(chunks):
        tokens[r, :len(chunk.tokens)], start[r], lens[r] = (chunk.tokens, chunk.start,
                                                            len(chunk.tokens))
        used = chunk.pages[:table_w]
        tables[r, :len(used)] = used
    return tokens, start, lens, tables


def _program_key(statics: dict[str, Any], constrained: bool, stop_columns: int,
                 key_shape: tuple[int, ...]) -> tuple:
    """What makes a decode program besides its rows and page pairs (`program_reuse`'s key):
    its static arguments, whether bitmasks are passed, the stop columns, the key's shape."""
    return (*sorted(statics.items()), constrained, stop_columns, tuple(key_shape))


def _row_flops(cfg: ModelConfig) -> float:
    """A decode row's matmul FLOPs: every weight but an untied embedding table (a lookup)."""
    head = cfg.hidden_size * cfg.vocab_size
    return 2.0 * (cfg.num_params() - (0 if cfg.tie_word_embeddings else head))


def _pair_flops(cfg: ModelConfig, page_size: int) -> float:
    """A page pair's attention FLOPs over all layers: scores and values, every query head."""
    return 4.0 * cfg.num_layers * cfg.num_heads * cfg.head_dim * page_size


def _row_sampling(params: list[SamplingParams], rows_in_batch: int, default: SamplingParams
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per-row temperature and top-p (float32 [rows]): the running rows' ``params``, the
    padding rows' ``default``."""
    temperature = np.full(rows_in_batch, default.temperature, np.float32)
    top_p = np.full(rows_in_batch, default.top_p, np.float32)
    temperature[:len(params)] = [p.temperature for p in params]
    top_p[:len(params)] = [p.top_p for p in params]
    return temperature, top_p
