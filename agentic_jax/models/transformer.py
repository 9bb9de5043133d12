"""The policy: a decoder-only transformer (Qwen2 / Qwen3 / Llama) with an optional value head.

Layers are stacked along a leading "layers" axis and run with `jax.lax.scan`, so compile time
does not grow with depth and the KV cache [L, B, S, Hkv, D] is threaded through as a scan carry
(updated in place when donated).
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
from flax import nnx

from agentic_jax.models.cache import KVCache, LayerCache
from agentic_jax.models.config import ModelConfig
from agentic_jax.models.layers import Block, RMSNorm, dense, logical_param
from agentic_jax.models.rope import rope_inverse_frequencies

_REMAT_POLICIES = {
    "full": None,  # save nothing, recompute the block in the backward pass
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


class ModelOutput(NamedTuple):
    """logits f32 [B, T, V]; values f32 [B, T] (value-head models only); the updated cache."""

    logits: jax.Array
    values: jax.Array | None
    cache: KVCache | None


def _stacked_blocks(cfg: ModelConfig, rngs: nnx.Rngs) -> Block:
    @nnx.split_rngs(splits=cfg.num_layers)
    @nnx.vmap(in_axes=0, out_axes=0, transform_metadata={nnx.PARTITION_NAME: "layers"})
    def create(layer_rngs: nnx.Rngs) -> Block:
        return Block(cfg, rngs=layer_rngs)

    return create(rngs)


class Transformer(nnx.Module):
    """Token ids -> next-token logits (and values). See `forward` for the cache contract."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        e, v, pd = cfg.hidden_size, cfg.vocab_size, cfg.weight_dtype
        normal = nnx.initializers.normal(0.02)
        self.embed = logical_param(rngs, normal, (v, e), ("vocab", "embed"), pd)
        self.blocks = _stacked_blocks(cfg, rngs)
        self.final_norm = RMSNorm(cfg, rngs=rngs)
        if not cfg.tie_word_embeddings:
            self.lm_head = logical_param(rngs, normal, (e, v), ("embed", "vocab"), pd)
        if cfg.value_head:
            zeros = nnx.initializers.zeros
            self.value_kernel = logical_param(rngs, zeros, (e, 1), ("embed", None), pd)
            self.value_bias = logical_param(rngs, zeros, (1,), (None,), pd)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """tokens int32 [B, T] -> logits f32 [B, T, V] (no cache, causal)."""
        return self.forward(tokens).logits

    def forward(
        self,
        tokens: jax.Array,
        *,
        positions: jax.Array | None = None,
        segment_ids: jax.Array | None = None,
        cache: KVCache | None = None,
        chunk_lens: jax.Array | None = None,
        adapters: bool = True,
    ) -> ModelOutput:
        """Runs the model on tokens int32 [B, T].

        Without a cache: positions default to arange(T), attention is causal in token order and
        limited to equal `segment_ids` [B, T] when given (packing).
        With a cache: row b's tokens[b, :chunk_lens[b]] take positions lengths[b] + arange, their
        keys/values land in the cache slots equal to their positions, each query attends to slots
        <= its position, and the returned cache has lengths + chunk_lens. Tokens past
        chunk_lens[b] are padding: their outputs are meaningless and never affect valid ones.
        `adapters=False` runs a LoRA model's base weights alone (its frozen reference).
        """
        chex.assert_rank(tokens, 2)
        batch, seq_len = tokens.shape
        if cache is None:
            if chunk_lens is not None:
                raise ValueError("forward: chunk_lens needs a cache")
            if positions is None:
                positions = jnp.broadcast_to(jnp.arange(seq_len, dtype=jnp.int32), tokens.shape)
        else:
            if segment_ids is not None:
                raise ValueError("forward: segment_ids are not supported with a cache")
            chex.assert_shape(cache.lengths, (batch,))
            if positions is None:
                positions = cache.lengths[:, None] + jnp.arange(seq_len, dtype=jnp.int32)
            if chunk_lens is None:
                chunk_lens = jnp.full((batch,), seq_len, jnp.int32)
            chex.assert_shape(chunk_lens, (batch,))
        chex.assert_shape(positions, (batch, seq_len))

        x = self.embed[...].astype(self.cfg.compute_dtype)[tokens]
        x, new_kv = self._run_blocks(x, positions, segment_ids, cache, adapters)
        hidden = self.final_norm(x)
        new_cache = None
        if cache is not None:
            new_cache = KVCache(k=new_kv[0], v=new_kv[1], lengths=cache.lengths + chunk_lens)
        return ModelOutput(self.head_logits(hidden), self.head_values(hidden), new_cache)

    def hidden_states(self, tokens: jax.Array, *, positions: jax.Array | None = None,
                      segment_ids: jax.Array | None = None, adapters: bool = True) -> jax.Array:
        """The final-norm output [B, T, E] of `forward` without a cache: what `head_logits` and
        `head_values` map to outputs, for callers that apply the LM head in pieces (the
        [B, T, V] logits of a 49k-token vocabulary do not fit at once in a training batch)."""
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32),
                                         tokens.shape)
        x = self.embed[...].astype(self.cfg.compute_dtype)[tokens]
        x, _ = self._run_blocks(x, positions, segment_ids, None, adapters)
        return self.final_norm(x)

    def _run_blocks(
        self,
        x: jax.Array,
        positions: jax.Array,
        segment_ids: jax.Array | None,
        cache: KVCache | None,
        adapters: bool,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
        """Scans the stacked blocks over x [B, T, E]; returns (x, (cache_k, cache_v) | None)."""
        graphdef, block_state = nnx.split(self.blocks)
        inv_freq = rope_inverse_frequencies(self.cfg)

        def body(carry, layer_inputs):
            x, kv = carry
            layer_state, layer = layer_inputs
            block = nnx.merge(graphdef, layer_state)
            store = None if kv is None else LayerCache(*kv, layer, self.cfg.attention_impl)
            x, store = block(x, positions, inv_freq, segment_ids=segment_ids, kv_store=store,
                             adapters=adapters)
            return (x, None if store is None else (store.k, store.v)), None

        if self.cfg.remat != "none":
            body = jax.checkpoint(body, policy=_REMAT_POLICIES[self.cfg.remat])
        kv = None if cache is None else (cache.k, cache.v)
        layers = jnp.arange(self.cfg.num_layers)
        (x, kv), _ = jax.lax.scan(
            body, (x, kv), (block_state, layers), unroll=min(self.cfg.scan_unroll, self.cfg.num_layers)
        )
        return x, kv

    def head_logits(self, hidden: jax.Array) -> jax.Array:
        """hidden [B, T, E] -> f32 [B, T, V], accumulated in float32."""
        dtype = self.cfg.compute_dtype
        if self.cfg.tie_word_embeddings:
            head = self.embed[...].astype(dtype).T
        else:
            head = self.lm_head[...].astype(dtype)
        return dense(hidden, head, preferred_element_type=jnp.float32)

    def head_values(self, hidden: jax.Array) -> jax.Array | None:
        """hidden [B, T, E] -> f32 [B, T] from the value head, or None without one."""
        if not self.cfg.value_head:
            return None
        kernel = self.value_kernel[...].astype(jnp.float32)
        values = dense(hidden.astype(jnp.float32), kernel) + self.value_bias[...].astype(jnp.float32)
        return values[..., 0]
