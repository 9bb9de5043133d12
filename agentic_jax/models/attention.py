"""Attention dispatch: one entry point, several implementations (xla, pallas, cudnn, auto).

Masking is described either by positions (a query at position p sees keys at positions <= p,
used with a KV cache), or, without positions, by index causality with the ends of the query and
key sequences aligned (query i sees keys <= i + S - T). Segment ids restrict a query to keys of
its own segment (sequence packing). An explicit boolean `mask` [B, T, S] is ANDed on top.
"""

from __future__ import annotations

import math
from typing import Protocol

import chex
import jax
import jax.numpy as jnp

SegmentIds = jax.Array | tuple[jax.Array, jax.Array] | None

# Queries a block of index-causal attention computes together (`blocked_causal_attention`):
# in one sweep (2 steps each), a SmolLM2 update of 24 x 384 tokens took 26.1-26.6 s in blocks
# of 64, 26.9-27.1 in 32, 27.6-27.9 in 128 and 27.3-27.9 in 192. Long rows take fewer, longer
# blocks (at most CAUSAL_MAX_BLOCKS), so the compiled program does not grow with the width.
CAUSAL_BLOCK = 64
CAUSAL_MAX_BLOCKS = 8
# A large finite negative keeps fully masked rows (padding) finite instead of NaN.
_MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


class KVStore(Protocol):
    """Where a layer's attention keeps and reads keys and values, when not from the current
    chunk alone: a KV cache. The block computes q, k, v the same way whatever the store (as the
    model files of MaxText and vLLM do); only the source of the keys and values differs.
    """

    def attend(self, q: jax.Array, k: jax.Array, v: jax.Array,
               positions: jax.Array) -> tuple[jax.Array, KVStore]:
        """Writes k, v [B, T, Hkv, D] at positions int32 [B, T], then attends q [B, T, Hq, D]
        to every key stored at a position <= the query's -> (out [B, T, Hq, D], the store with
        the new keys and values)."""


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    impl: str = "xla",
    causal: bool = True,
    q_positions: jax.Array | None = None,
    kv_positions: jax.Array | None = None,
    segment_ids: SegmentIds = None,
    mask: jax.Array | None = None,
    sm_scale: float | None = None,
) -> jax.Array:
    """Multi-head attention with grouped-query heads.

    Args:
      q: [B, T, Hq, D] queries.
      k, v: [B, S, Hkv, D] keys / values, Hq % Hkv == 0.
      impl: "xla" | "pallas" | "cudnn" | "auto". "pallas" serves only index-causal attention
        (no positions, no explicit mask) and falls back to "xla" otherwise; "auto" picks pallas on
        GPU/TPU when it applies and xla elsewhere.
      causal: apply causal masking (by positions when given, else by aligned index).
      q_positions: int32 [B, T]; kv_positions: int32 [B, S] or [S]. Both or neither.
      segment_ids: int32 [B, T] (self-attention) or a pair (q_ids [B, T], kv_ids [B, S]).
      mask: optional bool [B, T, S], True where a query may attend.
      sm_scale: softmax scale, default 1/sqrt(D).
    Returns:
      [B, T, Hq, D] in q's dtype.
    """
    chex.assert_rank([q, k, v], 4)
    chex.assert_equal_shape([k, v])
    if q.shape[-1] != k.shape[-1] or q.shape[2] % k.shape[2]:
        raise ValueError(
            f"attention: q {q.shape} and k {k.shape} need equal head_dim and Hq % Hkv == 0"
        )
    if (q_positions is None) != (kv_positions is None):
        raise ValueError("attention: pass both q_positions and kv_positions, or neither")
    sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    index_causal_only = q_positions is None and mask is None
    impl = _resolve_impl(impl, index_causal_only)
    if impl == "pallas":
        from agentic_jax.kernels import flash_attention  # the kernel is optional at import time

        return flash_attention(q, k, v, causal=causal, segment_ids=segment_ids, sm_scale=sm_scale)
    full_mask = build_mask(q.shape[0], q.shape[1], k.shape[1], causal=causal,
                           q_positions=q_positions, kv_positions=kv_positions,
                           segment_ids=segment_ids, mask=mask)
    if impl == "cudnn":
        return _cudnn_attention(q, k, v, full_mask, sm_scale)
    if causal and index_causal_only:
        return blocked_causal_attention(q, k, v, full_mask, sm_scale)
    return xla_attention(q, k, v, full_mask, sm_scale)


def _resolve_impl(impl: str, index_causal_only: bool) -> str:
    if impl not in ("xla", "pallas", "cudnn", "auto"):
        raise ValueError(f"attention impl must be one of xla/pallas/cudnn/auto, got {impl!r}")
    if impl == "auto":
        on_accelerator = jax.default_backend() in ("gpu", "cuda", "rocm", "tpu")
        return "pallas" if on_accelerator and index_causal_only else "xla"
    if impl == "pallas" and not index_causal_only:
        return "xla"
    return impl


def build_mask(
    batch: int,
    q_len: int,
    kv_len: int,
    *,
    causal: bool,
    q_positions: jax.Array | None = None,
    kv_positions: jax.Array | None = None,
    segment_ids: SegmentIds = None,
    mask: jax.Array | None = None,
) -> jax.Array:
    """Boolean attention mask [B, T, S], True where a query may attend to a key."""
    allowed = jnp.ones((batch, q_len, kv_len), dtype=bool)
    if causal:
        if q_positions is None:
            q_positions = jnp.arange(q_len)[None, :] + (kv_len - q_len)
            kv_positions = jnp.arange(kv_len)
        kv_positions = jnp.broadcast_to(kv_positions, (batch, kv_len))
        allowed &= kv_positions[:, None, :] <= q_positions[:, :, None]
    if segment_ids is not None:
        q_ids, kv_ids = segment_ids if isinstance(segment_ids, tuple) else (segment_ids,) * 2
        chex.assert_shape(q_ids, (batch, q_len))
        chex.assert_shape(kv_ids, (batch, kv_len))
        allowed &= q_ids[:, :, None] == kv_ids[:, None, :]
    if mask is not None:
        chex.assert_shape(mask, (batch, q_len, kv_len))
        allowed &= mask
    return allowed


def xla_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, sm_scale: float
) -> jax.Array:
    """Reference attention: float32 einsum + softmax; GQA by grouping query heads (no repeat).

    q [B, T, Hq, D], k/v [B, S, Hkv, D], mask bool [B, T, S] -> [B, T, Hq, D].

    The products run head-major, a kv head's G query heads and T queries as the G x T rows of
    one matrix: [B, Hkv, G T, D] against [B, Hkv, S, D]. XLA:CPU's batched matmuls take
    these operands without transposing them per batch element; with the queries in token-major
    order the backward pass's score gradient ran at 56 GFLOP/s against ~300 for the same
    product laid out head-major (XLA's trace of a SmolLM2 update of 24 x 384 tokens, the step
    `tools/bench_update_paths.py --paths=default` times; docs/performance.md).
    """
    batch, q_len, num_heads, head_dim = q.shape
    kv_len, num_kv_heads = k.shape[1], k.shape[2]
    group = num_heads // num_kv_heads
    q_rows = jnp.transpose(q.reshape(batch, q_len, num_kv_heads, group, head_dim),
                           (0, 2, 3, 1, 4)).reshape(batch, num_kv_heads, group * q_len, head_dim)
    k_heads, v_heads = jnp.transpose(k, (0, 2, 1, 3)), jnp.transpose(v, (0, 2, 1, 3))
    scores = jnp.einsum("bkmd,bksd->bkms", q_rows, k_heads, preferred_element_type=jnp.float32)
    scores = scores.reshape(batch, num_kv_heads, group, q_len, kv_len)
    scores = jnp.where(mask[:, None, None], scores * sm_scale, _MASK_VALUE)
    probs = jax.nn.softmax(scores, axis=-1).reshape(batch, num_kv_heads, group * q_len, kv_len)
    # Probabilities meet v in v's dtype with float32 accumulation (as the fused kernels do).
    out = jnp.einsum("bkms,bksd->bkmd", probs.astype(v.dtype), v_heads,
                     preferred_element_type=jnp.float32)
    out = jnp.transpose(out.reshape(batch, num_kv_heads, group, q_len, head_dim),
                        (0, 3, 1, 2, 4))
    return out.reshape(batch, q_len, num_heads, head_dim).astype(q.dtype)


def blocked_causal_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, sm_scale: float,
    block: int = CAUSAL_BLOCK,
) -> jax.Array:
    """`xla_attention` for index-causal masks (query i sees no key past i + S - T), a block
    of queries at a time against the keys up to the block's last: the scores that causality
    masks above the diagonal's blocks are never computed (42% of them at 384 tokens in blocks
    of 64; with the blocks capped at CAUSAL_MAX_BLOCKS, 44% at 4,096). Each query's softmax
    runs over all the keys it may see, so the result is `xla_attention`'s up to float
    rounding, except for a query that may see no key at all (a padding row under a pair of
    segment ids), whose meaningless output may differ. ``mask`` [B, T, S] must allow no key
    past the causal limit (`build_mask` with ``causal`` and no positions ensures it). With
    more queries than keys (T > S) it is `xla_attention`."""
    q_len, kv_len = q.shape[1], k.shape[1]
    block = max(block, -(-q_len // CAUSAL_MAX_BLOCKS))
    if q_len <= block or q_len > kv_len:
        return xla_attention(q, k, v, mask, sm_scale)
    outs = []
    for lo in range(0, q_len, block):
        hi = min(lo + block, q_len)
        keys = hi + kv_len - q_len      # the last key a query of the block may see, + 1
        outs.append(xla_attention(q[:, lo:hi], k[:, :keys], v[:, :keys], mask[:, lo:hi, :keys],
                                  sm_scale))
    return jnp.concatenate(outs, axis=1)


def _cudnn_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, sm_scale: float
) -> jax.Array:
    if jax.default_backend() not in ("gpu", "cuda"):
        raise ValueError(
            f"attention impl 'cudnn' needs a CUDA GPU backend, got {jax.default_backend()!r}; "
            "use 'xla' or 'auto'"
        )
    return jax.nn.dot_product_attention(
        q, k, v, mask=mask[:, None], scale=sm_scale, implementation="cudnn"
    )
