"""The engine's records: its configuration, a request, the events it returns, its statistics.
Plain Python and numpy (no JAX), so that the host-side scheduler imports without it."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Hashable, NamedTuple, Sequence

import numpy as np

if TYPE_CHECKING:
    import jax

# Called with the model tokens of the current turn (since admission or the last resume);
# returns None to keep decoding, or n to keep the first n tokens and pause the sequence there.
PauseHook = Callable[[Sequence[int]], "int | None"]


# The most alternatives a request may ask to see per sampled token (OpenAI's bound). The engine
# computes this many for every row when any row asks: one more compiled decode program, not one
# per width.
MAX_TOP_LOGPROBS = 20


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How tokens are drawn: temperature (0: greedy), nucleus top-p, top-k (0: all tokens);
    and top_logprobs, how many of the most likely tokens to report (with their log-probs under
    the untempered policy) at each sampled position (0: none; they change no token)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    top_logprobs: int = 0

    def __post_init__(self):
        if not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}], got "
                             f"{self.top_logprobs}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")

    @property
    def use_filter(self) -> bool:
        return self.temperature > 0 and (self.top_p < 1.0 or self.top_k > 0)


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """Args:
    num_slots: decode slots, the fixed row count of the compiled decode step.
    page_size: token positions per KV page.
    kv_pages: the page pool's size; or kv_cache_mb, a budget in MiB for K and V of all layers.
      With neither, the pool holds num_slots sequences of max_seq_len tokens.
    max_seq_len: the longest sequence (prompt + generated + appended) a request may reach.
    decode_steps: decode steps per device round trip (one `lax.while_loop`); the loop also
      returns early when a slot finishes while requests wait.
    prefill_chunk: context tokens one sequence prefills per engine step (chunked prefill).
    prefill_rows: sequences prefilled together in one prefill call.
    step_tokens: the token budget of one engine step, decode first (vLLM's chunked-prefill
      scheduling): each running row's next decode step (1 + speculative_tokens tokens) comes
      out of it, and prefill chunks fill what is left, cut to fit, so a long prompt arriving
      while others decode is written over several steps instead of holding every running row
      behind one long prefill. It must exceed num_slots x (1 + speculative_tokens), so
      prefill always has room; a step with none running prefills up to the whole budget.
    mixed_prefill: > 0 runs prefill chunks in the first step of a decode round trip, in the
      same forward as the running rows (vLLM's mixed batches: one pass over the weights for
      both), instead of in prefill calls of their own before it: up to prefill_rows contexts,
      first admitted first, each at most this many tokens, together within the step's budget.
      Such a round trip is that one step (vLLM schedules a forward at a time): a context the
      chunks complete decodes from the next. A step with no running row prefills as before.
      0 (the default): off. Not with speculative_tokens. Each decode program then has a mixed
      twin for each row count (1, 2, 4, ... capped at prefill_rows; `Engine.warmup` compiles
      them too, each tracing the forward twice); the chunk rows are padded to this width and
      attend over a full block table (max_seq_len), work a CPU pays for.
    attention_impl: decode attention, "xla" | "pallas" | "native" | "auto": "pallas" on
      GPU/TPU; on CPU "native" (a compiled kernel reading the pool in place,
      `kernels.cpu_native`) on one device where the host's C++ compiler builds it, else "xla"
      (gathers of each row's pages). Speculative steps read pages with XLA on CPU.
    dtype: what the engine computes and keeps its KV cache in: "auto" (the model's own),
      "float32" or "bfloat16" (a float32 policy sampled in bfloat16, vLLM's usual setting:
      about half the memory traffic of a decode step; the trainer recomputes log-probs in its
      own dtype, and the update's `logprob_mismatch` metric shows the difference).
    sampling: temperature / top-p / top-k of requests that set none (top-k: of all requests).
    layer_arrays: on CPU, hold each layer's weights as its own arrays and run the layers
      unrolled (`paged_model.engine_weights`): XLA:CPU copies a layer's slice of the stacked
      weights before each matmul (a float32 SmolLM2-135M decode step 76 -> 69 ms, same run,
      `tools/bench_generate.py --model=smollm2-135m --real_workloads=profile`). It costs a
      second copy of the blocks while the engine holds weights and about 5x the compiled code
      of each program (SmolLM2-135M: 55 MB a decode program against 11). "auto" (the
      default) decides from the model and the host (`layer_arrays.choose_layer_arrays`): on when
      the blocks are large enough for the copies to outweigh the longer compilations and
      their second copy fits easily in the memory available; the choice is logged. Ignored on
      GPU / TPU.
    prefix_caching: keep the full pages of prefilled prompts after their requests end and
      start any later prompt with the same first tokens from them (`prefix_cache.PrefixCache`,
      vLLM's automatic prefix caching): a shared system prompt is prefilled once per weight
      update. Cached pages stay in the pool (counted in use) until it runs short; new weights
      drop them. On by default: a prompt prefilled from cached pages samples the same
      distribution, its K/V differing from a fresh prefill's only in float rounding.
    speculative_tokens: k > 0 verifies up to k prompt-lookup drafts a row in each decode step
      (`speculative`: the latest earlier occurrence of the row's last ``speculative_ngram``
      tokens, else fewer, proposes the tokens that followed it) and emits 1..k+1 tokens; the
      tokens, log-probs and values are those of plain decoding (greedy output identical, the
      same distribution when sampling). Not under a code constraint. 0 (the default): off.
      A step costs about what k + 1 plain steps cost where a step is compute-bound: on CPU
      SmolLM2-135M's tool-using episodes ran 0.81x by wall time, 0.56x by CPU time, at k=4
      (12% of drafts accepted), so it is off by default; it is meant for GPU, where a step is
      memory-bound (docs/performance.md).
    speculative_ngram: the longest context suffix the drafts are looked up by.
    reuse_programs: run a round trip on a larger decode program already compiled (more rows,
      a longer page-pair list: the same tokens, bit for bit on XLA:CPU as tested) until the
      padding has cost what compiling the exact program would, then compile it
      (`program_reuse`, the ski-rental rule): a rollout's tail shapes no longer each stop it
      for a compilation (3-4 s a SmolLM2-135M program on 2 CPU cores with `layer_arrays`).
      Not for speculative steps (their padded rows moved a log-prob by an ulp). "auto" (the
      default): on CPU; True: on elsewhere too, where padded rows need not give the same bits
      (GPU matmuls choose kernels by shape); False: off. Off wherever jax does not say what
      its jitted functions hold (no compilation could be measured). `EngineStats.rented_calls`
      counts the round trips that ran on a larger program.
    """

    num_slots: int = 32
    page_size: int = 16
    kv_pages: int | None = None
    kv_cache_mb: float | None = None
    max_seq_len: int = 2048
    decode_steps: int = 32
    prefill_chunk: int = 256
    prefill_rows: int = 4
    step_tokens: int = 2048
    mixed_prefill: int = 0
    attention_impl: str = "auto"
    dtype: str = "auto"
    sampling: SamplingParams = SamplingParams()
    layer_arrays: bool | str = "auto"
    prefix_caching: bool = True
    speculative_tokens: int = 0
    speculative_ngram: int = 3
    reuse_programs: bool | str = "auto"

    def __post_init__(self):
        for name in ("num_slots", "page_size", "max_seq_len", "decode_steps", "prefill_chunk",
                     "prefill_rows", "step_tokens"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        decode_tokens = self.num_slots * (self.speculative_tokens + 1)
        if self.step_tokens <= decode_tokens:
            raise ValueError(f"step_tokens must exceed what the decode slots take of a step, "
                             f"num_slots x (1 + speculative_tokens) = {decode_tokens}, so that "
                             f"prefill always has room; got {self.step_tokens}")
        if self.mixed_prefill < 0:
            raise ValueError(f"mixed_prefill must be >= 0, got {self.mixed_prefill}")
        if self.mixed_prefill and self.speculative_tokens:
            raise ValueError("mixed_prefill: a prefill chunk does not ride with speculative "
                             "steps; set mixed_prefill or speculative_tokens, not both")
        if self.kv_pages is not None and self.kv_cache_mb is not None:
            raise ValueError("kv_pages: give kv_pages or kv_cache_mb, not both")
        if self.kv_pages is not None and self.kv_pages <= 0:
            raise ValueError(f"kv_pages must be positive, got {self.kv_pages}")
        if self.kv_cache_mb is not None and self.kv_cache_mb <= 0:
            raise ValueError(f"kv_cache_mb must be positive, got {self.kv_cache_mb}")
        if not isinstance(self.prefix_caching, bool):
            raise ValueError(f"prefix_caching must be True or False, got "
                             f"{self.prefix_caching!r}")
        if self.speculative_tokens < 0 or self.speculative_ngram <= 0:
            raise ValueError(f"speculative_tokens must be >= 0 and speculative_ngram positive, "
                             f"got {self.speculative_tokens}, {self.speculative_ngram}")
        if not (isinstance(self.layer_arrays, bool) or self.layer_arrays == "auto"):
            raise ValueError(f"layer_arrays must be True, False or 'auto', got "
                             f"{self.layer_arrays!r}")
        if not (isinstance(self.reuse_programs, bool) or self.reuse_programs == "auto"):
            raise ValueError(f"reuse_programs must be True, False or 'auto', got "
                             f"{self.reuse_programs!r}")
        if self.dtype not in ("auto", "float32", "bfloat16"):
            raise ValueError(f"dtype must be auto/float32/bfloat16, got {self.dtype!r}")
        if self.attention_impl not in ("xla", "pallas", "native", "auto"):
            raise ValueError(f"attention_impl must be xla/pallas/native/auto, got "
                             f"{self.attention_impl!r}")

    def check(self, request: Request) -> None:
        """ValueError if an engine of this configuration cannot take ``request``."""
        rid, prompt_len, new = request.request_id, len(request.prompt), request.max_new_tokens
        if not prompt_len:
            raise ValueError(f"request {rid!r}: the prompt is empty")
        if new <= 0:
            raise ValueError(f"request {rid!r}: max_new_tokens must be positive, got {new}")
        if prompt_len + new > self.max_seq_len:
            raise ValueError(f"request {rid!r}: prompt {prompt_len} + max_new_tokens {new} "
                             f"exceeds max_seq_len {self.max_seq_len}")
        if request.sampling is not None and request.sampling.top_k != self.sampling.top_k:
            raise ValueError(f"request {rid!r}: top_k {request.sampling.top_k} differs from "
                             f"the engine's {self.sampling.top_k}")


@dataclasses.dataclass(frozen=True)
class Request:
    """One sequence to sample: a prompt (one sample of a group; equal prompts share pages).

    Args:
      request_id: any hashable, unique among the engine's live requests.
      prompt: token ids, at least one.
      max_new_tokens: tokens allowed after the prompt, generated or appended on resume.
      key: PRNG key of this sequence; the token at position p is drawn with fold_in(key, p), so
        the tokens do not depend on scheduling.
      stop_tokens: ids that finish the sequence once emitted (the id is kept).
      pause: optional `PauseHook`, checked on the host after every decode round trip.
      pause_tokens: ids after which the slot stops for the rest of its round trip so that the
        pause hook sees them at once (e.g. a one-token closing code fence); the sequence goes on
        decoding when the hook returns None.
      sampling: this request's temperature / top-p (None: the engine's ``cfg.sampling``);
        rows with different settings decode in one batch. Its top_k must be the engine's.
      constraint: optional token constraint (`agentic_jax.rollout.constrain.CodeConstraint`):
        after each unmasked round trip ``constraint.start(turn)`` returns None, or (n, matcher)
        to keep the turn's first n tokens and sample on one token per round trip with
        ``matcher.fill(bitmask_row)`` / ``matcher.advance(token)`` until the turn ends.
    """

    request_id: Hashable
    prompt: tuple[int, ...]
    max_new_tokens: int
    key: jax.Array
    stop_tokens: tuple[int, ...] = ()
    pause: PauseHook | None = None
    pause_tokens: tuple[int, ...] = ()
    sampling: SamplingParams | None = None
    constraint: Any = None


class Event(NamedTuple):
    """A sequence left its slot.

    kind: "finished" (reason "stop" | "length") or "paused" (reason "pause"; pages kept for
      `Engine.resume`, or freed with `Engine.release`).
    tokens: the model tokens of the turn that just ended (since admission or the last resume).
    logprobs: float32 [n], log-probs of those tokens under the untempered policy.
    values: float32 [n], the value head at the position before each token (0 without a head).
    versions: int32 [n], the policy version (`Engine.update_params`) that sampled each token.
    top_logprobs: when the request's sampling asks for top_logprobs = k, per token the k most
      likely (token id, log-prob) pairs at its position, most likely first; else None.
    """

    request_id: Hashable
    kind: str
    reason: str
    tokens: list[int]
    logprobs: np.ndarray
    values: np.ndarray
    versions: np.ndarray | None = None
    top_logprobs: list[list[tuple[int, float]]] | None = None


@dataclasses.dataclass
class EngineStats:
    """Counters since the engine was built (or `Engine.reset_stats`). slot_utilisation =
    token_steps / slot_steps (decode steps x num_slots); row_steps counts the rows computed;
    drafted / accepted_tokens: speculative drafts verified and emitted. compiles /
    compile_s: device calls that compiled a program (or loaded it from the persistent compile
    cache) and their seconds, which prefill_s and decode_s include (a page copy's among the
    prefill's, or with mixed_prefill the decode's); rented_calls: decode round trips run on a
    larger compiled program while their own was not worth compiling yet
    (`EngineConfig.reuse_programs`); mixed_calls: round trips whose first step also wrote a
    prefill chunk (`EngineConfig.mixed_prefill`; its tokens are in prefill_tokens, its seconds
    in decode_s)."""

    pool_pages: int
    page_bytes: int
    slot_steps: int = 0
    row_steps: int = 0  # decode rows computed (running slots packed into batches, or a
    #                      larger compiled program's rows)
    token_steps: int = 0
    decode_calls: int = 0
    prefill_calls: int = 0
    prefill_tokens: int = 0
    pages_in_use: int = 0
    pages_peak: int = 0
    steps: int = 0
    pages_in_use_sum: int = 0  # over steps, for the mean
    preemptions: int = 0
    prefix_hits: int = 0
    cached_tokens: int = 0  # context positions read from the prefix cache, not prefilled
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    mixed_calls: int = 0  # decode round trips that also prefilled a chunk (`mixed_prefill`)
    prefill_s: float = 0.0
    decode_s: float = 0.0
    compiles: int = 0
    compile_s: float = 0.0
    rented_calls: int = 0  # round trips run on a larger compiled program (`reuse_programs`)

    # How `fold` combines each field (every field is in one; a test keeps it so).
    CONSTANTS = ("pool_pages", "page_bytes")
    LATEST = ("pages_in_use",)
    PEAKS = ("pages_peak",)
    COUNTS = ("slot_steps", "row_steps", "token_steps", "decode_calls", "prefill_calls",
              "prefill_tokens", "steps", "pages_in_use_sum", "preemptions", "prefix_hits",
              "cached_tokens", "drafted_tokens", "accepted_tokens", "prefill_s", "decode_s",
              "compiles", "compile_s", "rented_calls", "mixed_calls")

    def fold(self, later: EngineStats) -> None:
        """Folds in the counters of a later span of the same engine (its `reset_stats` between
        them): counts and seconds add up, the page peak is the larger, pages in use the later's."""
        for name in self.COUNTS:
            setattr(self, name, getattr(self, name) + getattr(later, name))
        for name in self.PEAKS:
            setattr(self, name, max(getattr(self, name), getattr(later, name)))
        for name in self.LATEST:
            setattr(self, name, getattr(later, name))

    @property
    def slot_utilisation(self) -> float:
        return self.token_steps / self.slot_steps if self.slot_steps else 0.0

    @property
    def acceptance_rate(self) -> float:
        """accepted_tokens / drafted_tokens (0 with no drafts)."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    def as_metrics(self) -> dict[str, float]:
        """The figures a training step logs (``engine_*``; wall-clock seconds and the count of
        compiling calls, which depends on what the process compiled before, as
        ``time_engine_*``, with the other timings, as is the count of round trips on a larger
        program, which follows those timings); the speculative ones once drafts ran."""
        spec = {} if not self.drafted_tokens else {
            "engine_spec_drafted": float(self.drafted_tokens),
            "engine_spec_accepted": float(self.accepted_tokens),
            "engine_spec_acceptance": self.acceptance_rate,
            "engine_tokens_per_step": self.token_steps / max(self.row_steps, 1)}
        mixed = {"engine_mixed_calls": float(self.mixed_calls)} if self.mixed_calls else {}
        return spec | mixed | {"engine_slot_utilisation": self.slot_utilisation,
                "engine_pages_in_use_mean": self.pages_in_use_sum / max(self.steps, 1),
                "engine_pages_peak": float(self.pages_peak),
                "engine_pages_pool": float(self.pool_pages),
                "engine_kv_peak_frac": self.pages_peak / self.pool_pages,
                "engine_preemptions": float(self.preemptions),
                "engine_prefix_hits": float(self.prefix_hits),
                "engine_cached_tokens": float(self.cached_tokens),
                "time_engine_compiles": float(self.compiles),
                "time_engine_prefill_s": self.prefill_s,
                "time_engine_decode_s": self.decode_s,
                "time_engine_compile_s": self.compile_s,
                "time_engine_rented_calls": float(self.rented_calls)}

    def as_dict(self) -> dict[str, float]:
        out = {k: float(v) for k, v in dataclasses.asdict(self).items()}
        out["slot_utilisation"] = self.slot_utilisation
        out["acceptance_rate"] = self.acceptance_rate
        out["kv_peak_bytes"] = float(self.pages_peak * self.page_bytes)
        out["kv_pool_bytes"] = float(self.pool_pages * self.page_bytes)
        return out
