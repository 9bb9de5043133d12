"""`Engine`: the rollout engine's public face. It sizes the page pool, then hands the scheduling
to a host-only `Scheduler` and the device work to a `ModelRunner`."""

from __future__ import annotations

import operator
import time
from typing import Any, Hashable, Sequence

from flax import nnx
from jax.sharding import Mesh

from agentic_jax.errors import UserError
from agentic_jax.rollout.engine.paged_model import with_dtype
from agentic_jax.rollout.engine.pages import PagePool, page_bytes, pool_size
from agentic_jax.rollout.engine.runner import ModelRunner
from agentic_jax.rollout.engine.scheduler import Scheduler
from agentic_jax.rollout.engine.types import (
    EngineConfig,
    EngineStats,
    Event,
    Request,
    SamplingParams,
)


def _of(path: str, doc: str) -> property:
    """A read-only attribute of the engine that lives on its scheduler or runner."""
    return property(operator.attrgetter(path), doc=doc)


class Engine:
    """Continuous batching over a paged KV cache for one model (see the package docstring)."""

    cfg = _of("scheduler.cfg", "The `EngineConfig` (its sampling: see `set_sampling`).")
    stats = _of("scheduler.stats", "`EngineStats` since the build or `reset_stats`.")
    version = _of("scheduler.version", "The policy version of the weights sampled with.")
    pool = _of("scheduler.pages.pool", "The `PagePool`.")
    pages_held = _of("scheduler.pages.held", "Pages held by live sequences and shared prompt "
                                             "prefixes (not counting the prefix cache's own).")
    seqs = _of("scheduler.seqs", "Live sequences by request id.")
    slots = _of("scheduler.slots", "The decode slots: a sequence or None each.")
    waiting = _of("scheduler.waiting", "Queued sequences, next first.")
    prefixes = _of("scheduler.pages.prefixes", "Shared prompt prefixes by their tokens.")
    graphdef = _of("runner.graphdef", "The model's graph definition.")
    params = _of("runner.params", "The weights sampled with (see `update_params`).")
    kv = _of("runner.kv", "The paged KV pool on the device (None while asleep).")

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
        graphdef, model_cfg = with_dtype(graphdef, params, model_cfg, cfg.dtype)
        ps = cfg.page_size
        max_pages = -(-(cfg.max_seq_len + cfg.decode_steps) // ps) + 1
        pages = pool_size(model_cfg, page_size=ps, kv_pages=cfg.kv_pages,
                          kv_cache_mb=cfg.kv_cache_mb, default_pages=cfg.num_slots * max_pages)
        if pages < max_pages:
            raise UserError(f"rollout engine: a pool of {pages} pages cannot hold one sequence "
                            f"of max_seq_len={cfg.max_seq_len} (needs {max_pages} pages of "
                            f"{ps} positions)")
        self.model_cfg = model_cfg
        self.runner = ModelRunner(graphdef, params, model_cfg, cfg, pages, max_pages, mesh)
        self.scheduler = Scheduler(cfg, PagePool(pages), self.runner, page_bytes(model_cfg, ps))

    def warmup(self, max_context: int | None = None) -> tuple[int, float]:
        """Compiles, before any request, the programs requests of up to ``max_context``
        positions (default ``max_seq_len``) will run (`ModelRunner.warmup`): a server's first
        requests then never wait for a compilation. Returns (programs run, seconds)."""
        if self.seqs:
            raise RuntimeError("rollout engine: warm up before submitting requests")
        start = time.perf_counter()
        n = self.runner.warmup(min(max_context or self.cfg.max_seq_len, self.cfg.max_seq_len),
                               self.cfg.sampling)
        return n, time.perf_counter() - start

    def reset_stats(self) -> EngineStats:
        """Starts the counters again (the page peak from the pages in use now); returns the old."""
        return self.scheduler.reset_stats()

    def set_sampling(self, sampling: SamplingParams) -> None:
        """Temperature / top-p / top-k of the requests submitted from now on that set none of
        their own; only while the engine holds no sequence (top-k is one for all)."""
        self.scheduler.set_sampling(sampling)

    def update_params(self, model_or_state: Any, version: int | None = None) -> None:
        """Points the engine at new weights (same structure) without recompiling; tokens
        sampled from now on record ``version`` (None: the current one), the policy version
        of the weights. Call it between `step` calls (live sequences continue with them)."""
        is_module = isinstance(model_or_state, nnx.Module)
        self.runner.params = nnx.state(model_or_state) if is_module else model_or_state
        self.scheduler.pages.clear_cache()   # cached K/V is the old weights'
        if version is not None:
            self.scheduler.version = int(version)

    def sleep(self) -> None:
        """Frees what the engine holds on the device between rollouts, for a trainer that
        shares the devices and updates in between (vLLM's sleep mode, verl's
        ``free_cache_engine``): the KV pool, and its reference to the weights, the only one
        to a LoRA policy's merged copy or a disaggregated sampler's. Only while it holds no
        sequence. `update_params` wakes it; the next call that needs the pool makes a fresh
        one (no K/V is read before it is written, so nothing is lost but the memory)."""
        held = len(self.seqs)  # queued, slotted and paused
        if not held:
            self.scheduler.pages.clear_cache()
        if held or self.pool.in_use:
            raise RuntimeError(f"rollout engine: cannot sleep while it holds {held} "
                               f"sequence(s) and {self.pool.in_use} page(s)")
        self.runner.sleep()

    @property
    def asleep(self) -> bool:
        """Whether `sleep` let go of the weights and `update_params` has not woken it."""
        return self.runner.params is None

    def submit(self, request: Request) -> None:
        """Queues a request; requests with equal prompts share the prompt's pages."""
        self.scheduler.submit(request)

    def resume(self, request_id: Hashable, tokens: Sequence[int]) -> None:
        """Appends ``tokens`` (e.g. a tool's output, not model tokens) to a paused sequence and
        queues it to continue decoding after them. Tokens beyond its budget are dropped and the
        sequence then finishes with reason "length"."""
        self.scheduler.resume(request_id, tokens)

    def release(self, request_id: Hashable) -> None:
        """Ends a paused sequence for good, freeing its pages."""
        self.scheduler.release(request_id)

    def abort(self, request_id: Hashable) -> bool:
        """Ends a sequence in any state (queued, in a slot or paused), freeing its pages and
        dropping its pending event; False if it is not live."""
        return self.scheduler.abort(request_id)

    @property
    def return_on_finish(self) -> bool:
        """Whether a decode round trip ends as soon as one sequence finishes or pauses (lower
        latency for short requests beside long ones, as a server wants; more host round trips).
        Off: it ends early only when requests wait for a slot."""
        return self.scheduler.return_on_finish

    @return_on_finish.setter
    def return_on_finish(self, value: bool) -> None:
        self.scheduler.return_on_finish = bool(value)

    @property
    def has_work(self) -> bool:
        """Whether `step` would advance anything (queued, prefilling or decoding sequences)."""
        return self.scheduler.has_work

    def step(self) -> list[Event]:
        """Admits queued requests into free slots, runs prefill chunks (what the running
        rows leave of ``step_tokens``) and one decode round trip (up to ``decode_steps``
        tokens per slot; with ``mixed_prefill`` the chunks ride in a round trip of one step);
        returns the sequences that left a slot."""
        return self.scheduler.step()

    def run(self) -> list[Event]:
        """Steps until nothing is queued or decoding (paused sequences stay paused)."""
        events: list[Event] = []
        while self.has_work:
            events.extend(self.step())
        return events
