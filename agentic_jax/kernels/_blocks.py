"""Block-level math shared by the GPU and TPU flash-attention kernels.

Everything here works on values already loaded from refs, so the same code runs inside a Triton
kernel, a Mosaic TPU kernel and Pallas interpret mode. Row statistics (running max `m`, running
sum `l`, log-sum-exp, delta) are kept as [bq, 1] columns so they broadcast against [bq, bk] tiles
without reshapes.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax

# Finite stand-in for -inf: exp(MASK_VALUE - MASK_VALUE) stays finite for a row with no visible
# key yet, and exp(MASK_VALUE - m) underflows to exactly 0 once a real score has been seen.
MASK_VALUE = -1e30
# Log-sum-exp stored for a row that sees no key: exp(s - EMPTY_ROW_LSE) == 0 for any real s.
EMPTY_ROW_LSE = 1e30


@dataclasses.dataclass(frozen=True)
class AttentionSpec:
    """Static description of one attention call on block-padded inputs.

    `q_len`/`kv_len` are the true lengths T and S before padding; `offset = S - T` shifts the
    causal diagonal so the last query sees the last key.
    """

    q_len: int
    kv_len: int
    block_q: int
    block_kv: int
    causal: bool
    sm_scale: float
    has_segments: bool
    group: int  # query heads per kv head (GQA ratio)
    interpret: object = False

    @property
    def offset(self) -> int:
        return self.kv_len - self.q_len


def with_segment_refs(kernel, spec: AttentionSpec, num_inputs: int):
    """Adapts `kernel(spec, *inputs, q_ids_ref, kv_ids_ref, *outputs_and_scratch)` to the flat
    refs Pallas passes, with None for the id refs when the call has no segments."""

    def bound(*refs):
        inputs = refs[:num_inputs]
        if spec.has_segments:
            ids, rest = refs[num_inputs : num_inputs + 2], refs[num_inputs + 2 :]
        else:
            ids, rest = (None, None), refs[num_inputs:]
        kernel(spec, *inputs, *ids, *rest)

    return bound


def out_struct(shape, dtype, *inputs) -> jax.ShapeDtypeStruct:
    """A pallas_call output type that varies over every mesh axis any input varies over, as
    shard_map's varying-axes check requires of kernels called inside it."""
    axis_types = [jax.typeof(x).manual_axis_type for x in inputs if x is not None]
    varying = frozenset().union(*(t.varying for t in axis_types))
    return jax.ShapeDtypeStruct(shape, dtype, manual_axis_type=type(axis_types[0])(varying=varying))


def matmul(a: jax.Array, b: jax.Array, *, trans_a: bool = False, trans_b: bool = False):
    """a @ b in float32 with optional transposes folded into the contraction ([M,K]x[K,N])."""
    contract_a = 0 if trans_a else 1
    contract_b = 1 if trans_b else 0
    return lax.dot_general(
        a, b, (((contract_a,), (contract_b,)), ((), ())), preferred_element_type=jnp.float32
    )


def block_mask(spec: AttentionSpec, q_start, kv_start, q_ids=None, kv_ids=None) -> jax.Array:
    """Visibility of a [bq, bk] tile: key in range, causal diagonal, same segment.

    q_ids [bq, 1] and kv_ids [1, bk] are the tile's segment ids when the call has segments.
    """
    shape = (spec.block_q, spec.block_kv)
    q_pos = q_start + lax.broadcasted_iota(jnp.int32, shape, 0)
    kv_pos = kv_start + lax.broadcasted_iota(jnp.int32, shape, 1)
    mask = kv_pos < spec.kv_len
    if spec.causal:
        mask = jnp.logical_and(mask, kv_pos <= q_pos + spec.offset)
    if q_ids is not None:
        mask = jnp.logical_and(mask, q_ids == kv_ids)
    return mask


def online_softmax_step(spec: AttentionSpec, q, k, v, m, l, acc, mask=None):
    """Fold one key tile into the running softmax of a query tile.

    q [bq, D], k/v [bk, D], m/l [bq, 1] f32, acc [bq, D] f32 -> updated (m, l, acc).
    """
    s = matmul(q, k, trans_b=True) * spec.sm_scale
    if mask is not None:
        s = jnp.where(mask, s, MASK_VALUE)
    m_next = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
    alpha = jnp.exp(m - m_next)
    p = jnp.exp(s - m_next)
    if mask is not None:
        # A row with no visible key so far has s == m_next == MASK_VALUE, hence p == 1.
        p = jnp.where(mask, p, 0.0)
    l_next = alpha * l + jnp.sum(p, axis=1, keepdims=True)
    acc_next = alpha * acc + matmul(p.astype(v.dtype), v)
    return m_next, l_next, acc_next


def finalize_softmax(m, l, acc):
    """(m, l, acc) -> (out [bq, D] f32, lse [bq, 1]); a row that saw no key gets 0 and
    EMPTY_ROW_LSE."""
    empty = l == 0.0
    out = acc / jnp.where(empty, 1.0, l)
    lse = jnp.where(empty, EMPTY_ROW_LSE, m + jnp.log(jnp.where(empty, 1.0, l)))
    return out, lse


def init_softmax_state(block_q: int, head_dim: int):
    """Initial (m, l, acc) for a query tile."""
    m = jnp.full((block_q, 1), MASK_VALUE, jnp.float32)
    l = jnp.zeros((block_q, 1), jnp.float32)
    acc = jnp.zeros((block_q, head_dim), jnp.float32)
    return m, l, acc


def softmax_grads(spec: AttentionSpec, q, k, v, do, lse, delta, mask=None):
    """Probabilities and score gradients of a tile for the backward pass.

    q/do [bq, D], k/v [bk, D], lse/delta [bq, 1] -> (p, ds) [bq, bk] f32, where
    p = softmax(s) and ds = p * (dp - delta) is dL/ds before the sm_scale factor.
    """
    s = matmul(q, k, trans_b=True) * spec.sm_scale
    p = jnp.exp(s - lse)
    if mask is not None:
        p = jnp.where(mask, p, 0.0)
    dp = matmul(do, v, trans_b=True)
    return p, p * (dp - delta)


def kv_block_range(spec: AttentionSpec, q_block):
    """Key tiles a query tile must visit: (n_unmasked, n_end).

    Tiles [0, n_unmasked) are fully visible to every row (no mask needed); tiles
    [n_unmasked, n_end) need the mask; tiles from n_end on are fully masked and skipped.
    """
    bq, bk = spec.block_q, spec.block_kv
    num_kv = pl_cdiv(spec.kv_len, bk)
    full_kv = spec.kv_len // bk  # tiles without padded keys
    if spec.causal:
        last_row_sees = (q_block + 1) * bq + spec.offset  # exclusive key bound of the last row
        n_end = jnp.clip(_ceil_div_nonneg(jnp.maximum(last_row_sees, 0), bk), 0, num_kv)
        first_row_sees = q_block * bq + spec.offset + 1
        n_unmasked = jnp.clip(_div_nonneg(jnp.maximum(first_row_sees, 0), bk), 0, full_kv)
    else:
        n_end = jnp.int32(num_kv)
        n_unmasked = jnp.int32(full_kv)
    if spec.has_segments:
        n_unmasked = jnp.int32(0)
    return jnp.minimum(n_unmasked, n_end), n_end


def q_block_range(spec: AttentionSpec, kv_block, num_q_blocks: int):
    """Query tiles that see a key tile: (start, unmasked_start); all run to num_q_blocks.

    Tiles [start, unmasked_start) need the mask, tiles from unmasked_start on see every key of
    the tile.
    """
    bq, bk = spec.block_q, spec.block_kv
    if spec.causal:
        # Row r sees key c iff r >= c - offset.
        first_key = jnp.maximum(kv_block * bk - spec.offset, 0)
        start = jnp.clip(_div_nonneg(first_key, bq), 0, num_q_blocks)
        last_key = (kv_block + 1) * bk - 1
        unmasked = jnp.clip(
            _ceil_div_nonneg(jnp.maximum(last_key - spec.offset, 0), bq), start, num_q_blocks
        )
    else:
        start = jnp.int32(0)
        unmasked = jnp.int32(0)
    has_padded_keys = (kv_block + 1) * bk > spec.kv_len
    if spec.has_segments:
        unmasked = jnp.int32(num_q_blocks)
    else:
        unmasked = jnp.where(has_padded_keys, num_q_blocks, unmasked)
    return start, unmasked


def kv_head(q_head, group: int):
    """Index of the kv head a query head reads (GQA), usable inside index maps."""
    return _div_nonneg(q_head, group)


def _div_nonneg(a, b: int):
    # lax.div truncates, which equals floor division for a >= 0 and lowers on every backend.
    return lax.div(a, jnp.int32(b))


def _ceil_div_nonneg(a, b: int):
    return _div_nonneg(a + b - 1, b)


def pl_cdiv(a: int, b: int) -> int:
    return -(-a // b)
