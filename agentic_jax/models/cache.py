"""KV cache for ragged batched decoding: slot index == token position."""

from __future__ import annotations

import dataclasses

import chex
import jax
import jax.numpy as jnp
from flax import struct

from agentic_jax.models.attention import attention
from agentic_jax.models.config import DTYPES, ModelConfig


@struct.dataclass
class KVCache:
    """Keys and values of every layer, written at the slot equal to each token's position.

    k, v: [L, B, S, Hkv, D]; lengths: int32 [B], the number of valid slots per row (slots
    >= lengths[b] may hold stale padding that is overwritten before any valid query sees it).
    A plain pytree, so it can be donated to jit.
    """

    k: jax.Array
    v: jax.Array
    lengths: jax.Array

    @property
    def max_len(self) -> int:
        return self.k.shape[2]


def init_cache(
    cfg: ModelConfig, batch_size: int, max_len: int, dtype: str | jnp.dtype | None = None
) -> KVCache:
    """Empty cache with room for `max_len` positions per row; dtype defaults to cfg.dtype."""
    if batch_size <= 0 or max_len <= 0:
        raise ValueError(
            f"init_cache: batch_size and max_len must be positive, got {batch_size}, {max_len}"
        )
    dtype = cfg.compute_dtype if dtype is None else DTYPES.get(dtype, dtype)
    shape = (cfg.num_layers, batch_size, max_len, cfg.num_kv_heads, cfg.head_dim)
    return KVCache(
        k=jnp.zeros(shape, dtype),
        v=jnp.zeros(shape, dtype),
        lengths=jnp.zeros((batch_size,), jnp.int32),
    )


def write_layer(
    cache_k: jax.Array,
    cache_v: jax.Array,
    layer: jax.Array | int,
    k: jax.Array,
    v: jax.Array,
    positions: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Scatters one layer's new k/v [B, T, Hkv, D] into slots `positions` [B, T].

    Writes to slots outside [0, S) are dropped; a clamping update would overwrite valid slots.
    """
    chex.assert_equal_shape([k, v])
    chex.assert_shape(positions, k.shape[:2])
    rows = jnp.arange(k.shape[0])[:, None]
    cache_k = cache_k.at[layer, rows, positions].set(k.astype(cache_k.dtype), mode="drop")
    cache_v = cache_v.at[layer, rows, positions].set(v.astype(cache_v.dtype), mode="drop")
    return cache_k, cache_v


@dataclasses.dataclass(frozen=True)
class LayerCache:
    """One layer of a `KVCache` as the attention's `KVStore`: keys and values go to slots ==
    positions and queries attend over the whole cache row by position."""

    k: jax.Array
    v: jax.Array
    layer: jax.Array
    impl: str

    def attend(self, q: jax.Array, k: jax.Array, v: jax.Array,
               positions: jax.Array) -> tuple[jax.Array, LayerCache]:
        cache_k, cache_v = write_layer(self.k, self.v, self.layer, k, v, positions)
        layer_k = jax.lax.dynamic_index_in_dim(cache_k, self.layer, keepdims=False)
        layer_v = jax.lax.dynamic_index_in_dim(cache_v, self.layer, keepdims=False)
        out = attention(q, layer_k.astype(q.dtype), layer_v.astype(q.dtype), impl=self.impl,
                        q_positions=positions, kv_positions=jnp.arange(cache_k.shape[2]))
        return out, dataclasses.replace(self, k=cache_k, v=cache_v)
