"""The policy: a decoder-only transformer (Qwen2 / Qwen3 / Llama) with an optional value head.

Layers are stacked along a leading "layers" axis and run with `jax.lax.scan`, so compile time
does not grow with depth. The rollout engine runs the same `Block`s over its paged KV cache
(`rollout.engine.paged_kv.forward_paged`), a `KVStore` as the attention's key/value source.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
from flax import nnx

from agentic_jax.models.config import ModelConfig
from agentic_jax.models.layers import Block, RMSNorm, dense, logical_param
from agentic_jax.models.rope import rope_inverse_frequencies

_REMAT_POLICIES = {
    "full": None,  # save nothing, recompute the block in the backward pass
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


class ModelOutput(NamedTuple):
    """logits f32 [B, T, V]; values f32 [B, T] (value-head models only)."""

    logits: jax.Array
    values: jax.Array | None


def _stacked_blocks(cfg: ModelConfig, rngs: nnx.Rngs) -> Block:
    @nnx.split_rngs(splits=cfg.num_layers)
    @nnx.vmap(in_axes=0, out_axes=0, transform_metadata={nnx.PARTITION_NAME: "layers"})
    def create(layer_rngs: nnx.Rngs) -> Block:
        return Block(cfg, rngs=layer_rngs)

    return create(rngs)


class Transformer(nnx.Module):
    """Token ids -> next-token logits (and values)."""

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
        adapters: bool = True,
    ) -> ModelOutput:
        """Runs the model on tokens int32 [B, T]: positions default to arange(T), attention is
        causal in token order and limited to equal `segment_ids` [B, T] when given (packing).
        `adapters=False` runs a LoRA model's base weights alone (its frozen reference).
        """
        hidden = self.hidden_states(tokens, positions=positions, segment_ids=segment_ids,
                                    adapters=adapters)
        return ModelOutput(self.head_logits(hidden), self.head_values(hidden))

    def hidden_states(self, tokens: jax.Array, *, positions: jax.Array | None = None,
                      segment_ids: jax.Array | None = None, adapters: bool = True) -> jax.Array:
        """The final-norm output [B, T, E] of `forward`: what `head_logits` and `head_values`
        map to outputs, for callers that apply the LM head in pieces (the [B, T, V] logits of a
        49k-token vocabulary do not fit at once in a training batch)."""
        chex.assert_rank(tokens, 2)
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32),
                                         tokens.shape)
        chex.assert_shape(positions, tokens.shape)
        x = self.embed[...].astype(self.cfg.compute_dtype)[tokens]
        return self.final_norm(self._run_blocks(x, positions, segment_ids, adapters))

    def _run_blocks(self, x: jax.Array, positions: jax.Array, segment_ids: jax.Array | None,
                    adapters: bool) -> jax.Array:
        """Scans the stacked blocks over x [B, T, E]."""
        graphdef, block_state = nnx.split(self.blocks)
        inv_freq = rope_inverse_frequencies(self.cfg)

        def body(x, layer_state):
            block = nnx.merge(graphdef, layer_state)
            x, _ = block(x, positions, inv_freq, segment_ids=segment_ids, adapters=adapters)
            return x, None

        if self.cfg.remat != "none":
            body = jax.checkpoint(body, policy=_REMAT_POLICIES[self.cfg.remat])
        x, _ = jax.lax.scan(body, x, block_state,
                            unroll=min(self.cfg.scan_unroll, self.cfg.num_layers))
        return x

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
