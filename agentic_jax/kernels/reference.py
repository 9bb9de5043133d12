"""Plain-XLA attention with the exact semantics of `flash_attention`, for tests and fallbacks."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def reference_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    causal: bool = True,
    segment_ids: jax.Array | tuple[jax.Array, jax.Array] | None = None,
    sm_scale: float | None = None,
) -> jax.Array:
    """Materialised softmax attention in float32.

    q [B, T, Hq, D], k/v [B, S, Hkv, D] -> [B, T, Hq, D] in q's dtype. Causal aligns the ends
    (query i sees keys j <= i + S - T); a row with no visible key returns zeros.
    """
    batch, q_len, num_heads, head_dim = q.shape
    kv_len, num_kv_heads = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else sm_scale
    group = num_heads // num_kv_heads
    k = jnp.repeat(k, group, axis=2).astype(jnp.float32)
    v = jnp.repeat(v, group, axis=2).astype(jnp.float32)
    scores = jnp.einsum(
        "bthd,bshd->bhts", q.astype(jnp.float32), k, precision=jax.lax.Precision.HIGHEST
    )
    scores = scores * scale
    mask = jnp.ones((batch, 1, q_len, kv_len), bool)
    if causal:
        rows = jnp.arange(q_len)[:, None] + (kv_len - q_len)
        mask = mask & (jnp.arange(kv_len)[None, :] <= rows)
    if segment_ids is not None:
        pair = isinstance(segment_ids, (tuple, list))
        q_ids, kv_ids = segment_ids if pair else (segment_ids, segment_ids)
        mask = mask & (q_ids[:, None, :, None] == kv_ids[:, None, None, :])
    scores = jnp.where(mask, scores, -jnp.inf)
    row_max = jnp.max(scores, axis=-1, keepdims=True)
    weights = jnp.exp(scores - jnp.where(jnp.isfinite(row_max), row_max, 0.0))
    total = jnp.sum(weights, axis=-1, keepdims=True)
    weights = weights / jnp.where(total == 0.0, 1.0, total)
    out = jnp.einsum("bhts,bshd->bthd", weights, v, precision=jax.lax.Precision.HIGHEST)
    return out.astype(q.dtype)
