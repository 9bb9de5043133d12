"""A jit-compiled KV-cache sampler for ragged batches.

The batch has a fixed number of rows B and a KV cache of ``max_len`` slots per row, slot index ==
position. Three compiled programs move it forward:

* `prefill` / `append`: write a right-padded chunk of tokens [B, C] for rows with
  ``chunk_lens[b] > 0`` (prompts, or tool outputs for some rows) and refresh those rows'
  next-token logits;
* `decode`: up to ``num_steps`` sampling steps inside one `lax.while_loop` (no per-token Python),
  for the rows marked active, each stopping at a stop token or its token budget.

Rolling a row back (e.g. to cut a stop string that ended mid-chunk) is setting its cache length:
slots past the length are never attended and are overwritten by the next write. The cache is
donated to every program, so decoding allocates no new cache memory.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agentic_jax.models import init_cache
from agentic_jax.rollout.engine.types import SamplingParams
from agentic_jax.rollout.sampling import sample_tokens
from agentic_jax.utils.files import round_up


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class DecodeState:
    """Device-side sampler state for B rows.

    Attributes:
      cache: the model's KVCache (k/v [L, B, S, Hkv, D], lengths int32 [B]).
      next_logits: float32 [B, V], logits for each row's next token.
      next_values: float32 [B], the critic's value at each row's last position (0 without a head).
    """

    cache: Any
    next_logits: jax.Array
    next_values: jax.Array


class DecodeOut(NamedTuple):
    """What one `Sampler.decode` call produced.

    state: the advanced `DecodeState`. tokens int32 [B, num_steps], logprobs f32 (temperature 1)
    and values f32 [B, num_steps]: row b's first ``num_generated[b]`` entries are real.
    num_generated int32 [B]. stopped bool [B]: the row emitted a stop id.
    """

    state: DecodeState
    tokens: jax.Array
    logprobs: jax.Array
    values: jax.Array
    num_generated: jax.Array
    stopped: jax.Array


def _gather_last(x: jax.Array, chunk_lens: jax.Array) -> jax.Array:
    """x [B, C, ...] -> x[b, chunk_lens[b] - 1] (index clamped at 0 for empty chunks)."""
    idx = jnp.maximum(chunk_lens - 1, 0)
    return jnp.take_along_axis(x, idx.reshape((-1,) + (1,) * (x.ndim - 1)), axis=1)[:, 0]


def _write_chunk(model, state: DecodeState, tokens: jax.Array,
                 chunk_lens: jax.Array) -> DecodeState:
    """Writes tokens [B, C] (row b's first chunk_lens[b]) and refreshes the rows that wrote."""
    out = model.forward(tokens, cache=state.cache, chunk_lens=chunk_lens)
    wrote = chunk_lens > 0
    next_logits = jnp.where(wrote[:, None], _gather_last(out.logits, chunk_lens),
                            state.next_logits)
    next_values = state.next_values
    if out.values is not None:
        next_values = jnp.where(wrote, _gather_last(out.values, chunk_lens), state.next_values)
    return DecodeState(cache=out.cache, next_logits=next_logits, next_values=next_values)


def _append(
    graphdef, params, state: DecodeState, tokens: jax.Array, chunk_lens: jax.Array
) -> DecodeState:
    return _write_chunk(nnx.merge(graphdef, params), state, tokens, chunk_lens)


def _decode(
    graphdef,
    params,
    state: DecodeState,
    row_keys: jax.Array,
    active: jax.Array,
    budget: jax.Array,
    stop_ids: jax.Array,
    temperature: jax.Array,
    top_p: jax.Array,
    *,
    num_steps: int,
    top_k: int,
    use_filter: bool,
):
    """Samples up to ``num_steps`` tokens per active row.

    Args:
      row_keys: [B] PRNG keys; the token at position p of row b is drawn with
        fold_in(row_keys[b], p), so sampling does not depend on how decoding was chunked or which
        rows were active together (tool calls finishing earlier or later change nothing).
      active: bool [B], rows allowed to generate.
      budget: int32 [B], the most tokens each row may generate in this call.
      stop_ids: int32 [K] token ids that end a row (after being emitted); pad with -1.

    Returns:
      `DecodeOut`.
    """
    model = nnx.merge(graphdef, params)
    batch = active.shape[0]
    out_tokens = jnp.zeros((batch, num_steps), jnp.int32)
    out_logprobs = jnp.zeros((batch, num_steps), jnp.float32)
    out_values = jnp.zeros((batch, num_steps), jnp.float32)
    count = jnp.zeros((batch,), jnp.int32)
    live = active & (budget > 0)
    stopped = jnp.zeros((batch,), bool)

    def cond(carry):
        step, _, _, _, _, _, live, _ = carry
        return (step < num_steps) & jnp.any(live)

    def body(carry):
        step, st, toks, lps, vals, count, live, stopped = carry
        keys = jax.vmap(jax.random.fold_in)(row_keys, st.cache.lengths)
        tok, lp = sample_tokens(
            st.next_logits,
            keys,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            use_filter=use_filter,
        )
        toks = toks.at[:, step].set(jnp.where(live, tok, 0))
        lps = lps.at[:, step].set(jnp.where(live, lp, 0.0))
        vals = vals.at[:, step].set(jnp.where(live, st.next_values, 0.0))
        st = _write_chunk(model, st, tok[:, None], live.astype(jnp.int32))
        count = count + live.astype(jnp.int32)
        hit_stop = jnp.any(tok[:, None] == stop_ids[None, :], axis=-1) & live
        stopped = stopped | hit_stop
        live = live & ~hit_stop & (count < budget)
        return step + 1, st, toks, lps, vals, count, live, stopped

    carry = (jnp.int32(0), state, out_tokens, out_logprobs, out_values, count, live, stopped)
    _, state, toks, lps, vals, count, _, stopped = jax.lax.while_loop(cond, body, carry)
    return DecodeOut(state, toks, lps, vals, count, stopped)


# The graph definition is a static argument, so samplers of equal models share compilations.
_append_jit = jax.jit(_append, static_argnums=(0,), donate_argnums=(2,))
_decode_jit = jax.jit(_decode, static_argnums=(0,), donate_argnums=(2,),
                      static_argnames=("num_steps", "top_k", "use_filter"))


class Sampler:
    """Compiled prefill / append / decode for one model and a fixed cache length.

    Args:
      model: an `agentic_jax.models.Transformer`; its parameters are read at construction (call
        `update_params` after training changes them).
      max_len: cache slots per row (prompt + everything generated or appended).
    """

    def __init__(self, model: nnx.Module, *, max_len: int):
        graphdef, params = nnx.split(model)
        self._setup(graphdef, params, max_len)

    @classmethod
    def from_split(cls, graphdef: nnx.GraphDef, params: Any, *, max_len: int) -> Sampler:
        """A sampler for a model given as ``nnx.split(model)``."""
        sampler = cls.__new__(cls)
        sampler._setup(graphdef, params, max_len)
        return sampler

    def _setup(self, graphdef: nnx.GraphDef, params: Any, max_len: int) -> None:
        if max_len <= 0:
            raise ValueError(f"max_len must be positive, got {max_len}")
        self.graphdef, self.params = graphdef, params
        self.config = nnx.merge(graphdef, params).cfg
        self.max_len = max_len

    def update_params(self, model_or_state: Any) -> None:
        """Points the sampler at new weights (same structure) without recompiling."""
        if isinstance(model_or_state, nnx.Module):
            self.params = nnx.state(model_or_state)
        else:
            self.params = model_or_state

    def init_state(self, batch_size: int) -> DecodeState:
        cache = init_cache(self.config, batch_size, self.max_len)
        vocab = self.config.vocab_size
        return DecodeState(
            cache=cache,
            next_logits=jnp.zeros((batch_size, vocab), jnp.float32),
            next_values=jnp.zeros((batch_size,), jnp.float32),
        )

    def append(
        self, state: DecodeState, chunks: Sequence[Sequence[int]], *, bucket: int = 16
    ) -> DecodeState:
        """Writes ``chunks[b]`` (possibly empty) after each row's current tokens.

        The chunk width is rounded up to a multiple of ``bucket`` so that few shapes compile.
        """
        lens = np.asarray([len(c) for c in chunks], np.int32)
        width = max(bucket, round_up(int(lens.max(initial=0)), bucket))
        tokens = np.zeros((len(chunks), width), np.int32)
        for b, c in enumerate(chunks):
            tokens[b, : len(c)] = c
        return _append_jit(self.graphdef, self.params, state, jnp.asarray(tokens),
                           jnp.asarray(lens))

    def prefill(self, prompts: Sequence[Sequence[int]], *, bucket: int = 16) -> DecodeState:
        """A fresh state holding the (ragged) prompts. Every prompt needs at least one token."""
        for b, p in enumerate(prompts):
            if len(p) == 0:
                raise ValueError(f"prompt {b} is empty; every prompt needs at least one token")
            if len(p) >= self.max_len:
                raise ValueError(f"prompt {b} has {len(p)} tokens; max_len is {self.max_len}")
        return self.append(self.init_state(len(prompts)), prompts, bucket=bucket)

    def decode(
        self,
        state: DecodeState,
        row_keys: jax.Array,
        *,
        active: np.ndarray,
        budget: np.ndarray,
        stop_ids: Sequence[int],
        params: SamplingParams,
        num_steps: int,
    ):
        """Runs up to ``num_steps`` decode steps on device (see `_decode`) -> `DecodeOut`.

        ``row_keys``: [B] PRNG keys (e.g. ``jax.random.split(key, B)``), fixed for an episode.
        """
        stop = np.full((max(1, len(stop_ids)),), -1, np.int32)
        stop[: len(stop_ids)] = list(stop_ids)
        return _decode_jit(
            self.graphdef,
            self.params,
            state,
            row_keys,
            jnp.asarray(active, bool),
            jnp.asarray(budget, jnp.int32),
            jnp.asarray(stop),
            jnp.asarray(params.temperature, jnp.float32),
            jnp.asarray(params.top_p, jnp.float32),
            num_steps=num_steps,
            top_k=params.top_k,
            use_filter=params.use_filter,
        )

    @staticmethod
    def set_lengths(state: DecodeState, lengths: np.ndarray) -> DecodeState:
        """Rolls rows back (or forward over already-written slots) to the given cache lengths."""
        cache = state.cache.replace(lengths=jnp.asarray(lengths, jnp.int32))
        return DecodeState(
            cache=cache, next_logits=state.next_logits, next_values=state.next_values
        )
