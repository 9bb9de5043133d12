"""Attention over a paged KV cache: queries of B sequences against pages named by block tables.

Layout (head-major, the layout both maintained Pallas paged kernels read):
  k_pages, v_pages [Hkv, P, page_size, D]  one layer's page pool;
  block_tables int32 [B, W]                position p of row b lives in page
                                           block_tables[b, p // page_size], offset p % page_size.

`paged_attention_xla` is the general path (any number of queries per row, masked by positions):
it gathers each row's W pages into a [Hkv, B, W * page_size, D] view and runs a float32 einsum
softmax. It is the CPU path and the fallback everywhere.

`paged_decode_attention` serves the decode step (one query per row, keys at positions
< lengths[b]). With impl="pallas" it calls the maintained kernels shipped with JAX:
``jax.experimental.pallas.ops.gpu.paged_attention`` (Triton) on GPU and in interpret mode on CPU,
``jax.experimental.pallas.ops.tpu.paged_attention`` (Mosaic, async page DMA) on TPU. They are
kept rather than rewritten because they already do what a decode step needs (block-table page
loads, split-K over the sequence, GQA grouping, int8 page scales) and are maintained with the
compilers they target; their one requirement, head-major pages, is the layout chosen above.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

# Finite, so that a row with no visible key yields zeros instead of NaN.
_MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)
_GPU_BLOCK_H = 16          # the GPU kernel's query-head block (a multiple of 16)
_PAGES_PER_BLOCK = 8   # pages loaded per inner step of either kernel
_GPU_MAX_SPLITS = 16       # split-K partitions over a row's pages
_ACCELERATORS = ("gpu", "cuda", "rocm", "tpu")


def as_bits(x: jax.Array) -> jax.Array:
    """bfloat16 -> its uint16 bit pattern on CPU; anything else unchanged. XLA:CPU has no
    bfloat16 scatter, gather or dynamic slice: around each one it converts the whole operand to
    float32 and back (the KV pool of every layer at each layer's write, the stacked weights at
    each call), which made a bfloat16 decode step ten times slower than a float32 one. On bit
    patterns they are plain copies; on GPU / TPU nothing changes."""
    if x.dtype == jnp.bfloat16 and jax.default_backend() == "cpu":
        return jax.lax.bitcast_convert_type(x, jnp.uint16)
    return x


def from_bits(x: jax.Array) -> jax.Array:
    """The inverse of `as_bits`: uint16 holds bfloat16 bit patterns (no weight is uint16)."""
    return jax.lax.bitcast_convert_type(x, jnp.bfloat16) if x.dtype == jnp.uint16 else x


def gather_pages(pages: jax.Array, block_tables: jax.Array) -> jax.Array:
    """pages [Hkv, P, ps, D], block_tables [B, W] -> [Hkv, B, W * ps, D] (slot == position)."""
    hkv, _, page_size, dim = pages.shape
    batch, width = block_tables.shape
    return pages[:, block_tables].reshape(hkv, batch, width * page_size, dim)


def paged_attention_xla(
    q: jax.Array,
    k_pages: jax.Array,
    v_pages: jax.Array,
    block_tables: jax.Array,
    q_positions: jax.Array,
    *,
    sm_scale: float | None = None,
) -> jax.Array:
    """Causal attention of q [B, T, Hq, D] at q_positions int32 [B, T] over each row's pages.

    A query at position p sees the keys at positions <= p; slots past p are never read, so pages
    may hold stale or unwritten entries there. Returns [B, T, Hq, D] in q's dtype.
    """
    chex.assert_rank([q, k_pages, v_pages, block_tables, q_positions], [4, 4, 4, 2, 2])
    batch, q_len, num_heads, dim = q.shape
    num_kv_heads = k_pages.shape[0]
    if num_heads % num_kv_heads or k_pages.shape[-1] != dim:
        raise ValueError(f"paged attention: q {q.shape} does not match pages {k_pages.shape}")
    sm_scale = 1.0 / math.sqrt(dim) if sm_scale is None else sm_scale
    keys = from_bits(gather_pages(k_pages, block_tables)).astype(q.dtype)
    values = from_bits(gather_pages(v_pages, block_tables)).astype(q.dtype)
    q_grouped = q.reshape(batch, q_len, num_kv_heads, num_heads // num_kv_heads, dim)
    scores = jnp.einsum("btkgd,kbsd->bkgts", q_grouped, keys, preferred_element_type=jnp.float32)
    kv_positions = jnp.arange(keys.shape[2])
    visible = kv_positions[None, None, :] <= q_positions[:, :, None]          # [B, T, S]
    scores = jnp.where(visible[:, None, None], scores * sm_scale, _MASK_VALUE)
    probs = jax.nn.softmax(scores, axis=-1).astype(values.dtype)
    out = jnp.einsum("bkgts,kbsd->btkgd", probs, values, preferred_element_type=jnp.float32)
    return out.reshape(batch, q_len, num_heads, dim).astype(q.dtype)


class PagePairs(NamedTuple):
    """A flat list of (row, page) pairs [M]: every page of every live row once, padded with
    rows == B. starts: position of each page's first slot (its index in the row's table x ps)."""

    rows: jax.Array
    pages: jax.Array
    starts: jax.Array


def _pair_pages(k_pages: jax.Array, v_pages: jax.Array, pairs: PagePairs,
                layer: jax.Array | None, dtype) -> tuple[jax.Array, jax.Array]:
    """Each listed pair's page of keys and values, [M, Hkv, ps, D] in ``dtype``, from one
    layer's pages or (with ``layer``) read in place from every layer's."""
    if layer is None:
        keys = jnp.moveaxis(k_pages[:, pairs.pages], 0, 1)
        values = jnp.moveaxis(v_pages[:, pairs.pages], 0, 1)
    else:
        keys, values = k_pages[layer, :, pairs.pages], v_pages[layer, :, pairs.pages]
    return from_bits(keys).astype(dtype), from_bits(values).astype(dtype)


def ragged_decode_attention_xla(
    q: jax.Array,
    k_pages: jax.Array,
    v_pages: jax.Array,
    pairs: PagePairs,
    q_positions: jax.Array,
    *,
    sm_scale: float | None = None,
    layer: jax.Array | None = None,
) -> jax.Array:
    """Decode attention whose cost follows the rows' real lengths: q [B, Hq, D] at q_positions
    [B] over the pages listed in ``pairs`` -> [B, Hq, D].

    k_pages / v_pages: one layer's pages [Hkv, P, ps, D]; or, with ``layer`` (a scalar index),
    every layer's [L, Hkv, P, ps, D], read in place: the listed pages are gathered straight
    from the pool, with no copy of the layer's whole slice.

    Scores are computed per (row, page) pair, [M, Hkv, G, ps], and combined per row with a
    segment max / sum (the flash-attention rescaling, across pages instead of blocks). Unlike
    the block-table gather, a short row does not pay for the longest row's table width.
    """
    batch, num_heads, dim = q.shape
    num_kv_heads, _, page_size, _ = k_pages.shape[-4:]
    group = num_heads // num_kv_heads
    sm_scale = 1.0 / math.sqrt(dim) if sm_scale is None else sm_scale
    valid_pair, rows = pairs.rows < batch, jnp.minimum(pairs.rows, batch - 1)
    # Each pair's query row, taken by a one-hot product rather than a gather: XLA fuses q's
    # producers (the projection's cast, RoPE) into a gather and runs them once per pair, not
    # per row (a sixth of a SmolLM2 decode step at six pages a row). The product is exact.
    pick = jax.nn.one_hot(rows, batch, dtype=q.dtype)                          # [M, B]
    q_pairs = jnp.einsum("mb,bkgd->mkgd", pick, q.reshape(batch, num_kv_heads, group, dim),
                         preferred_element_type=jnp.float32).astype(q.dtype)  # [M, Hkv, G, D]
    keys, values = _pair_pages(k_pages, v_pages, pairs, layer, q.dtype)     # [M, Hkv, ps, D]
    scores = jnp.einsum("mkgd,mksd->mkgs", q_pairs, keys,
                        preferred_element_type=jnp.float32) * sm_scale
    kv_pos = pairs.starts[:, None] + jnp.arange(page_size)                     # [M, ps]
    visible = (kv_pos <= q_positions[rows][:, None]) & valid_pair[:, None]
    scores = jnp.where(visible[:, None, None, :], scores, _MASK_VALUE)
    segment = jnp.where(valid_pair, pairs.rows, batch)                         # batch: dropped
    row_max = jax.ops.segment_max(scores.max(-1), segment, num_segments=batch)  # [B, Hkv, G]
    probs = jnp.exp(scores - row_max[rows][..., None])
    probs = jnp.where(visible[:, None, None, :], probs, 0.0)
    denom = jax.ops.segment_sum(probs.sum(-1), segment, num_segments=batch)
    out_pairs = jnp.einsum("mkgs,mksd->mkgd", probs.astype(values.dtype), values,
                           preferred_element_type=jnp.float32)
    out = jax.ops.segment_sum(out_pairs, segment, num_segments=batch)
    out = out / jnp.maximum(denom, jnp.finfo(jnp.float32).tiny)[..., None]
    return out.reshape(batch, num_heads, dim).astype(q.dtype)


def ragged_multi_query_attention_xla(
    q: jax.Array,
    k_pages: jax.Array,
    v_pages: jax.Array,
    pairs: PagePairs,
    q_positions: jax.Array,
    *,
    sm_scale: float | None = None,
    layer: jax.Array | None = None,
) -> jax.Array:
    """`ragged_decode_attention_xla` for several queries a row: q [B, T, Hq, D] at q_positions
    [B, T] over the pages listed in ``pairs`` -> [B, T, Hq, D]; each query sees the keys at
    positions <= its own (a row's speculative tokens, verified in one step)."""
    batch, q_len, num_heads, dim = q.shape
    num_kv_heads, _, page_size, _ = k_pages.shape[-4:]
    group = num_heads // num_kv_heads
    sm_scale = 1.0 / math.sqrt(dim) if sm_scale is None else sm_scale
    valid_pair, rows = pairs.rows < batch, jnp.minimum(pairs.rows, batch - 1)
    pick = jax.nn.one_hot(rows, batch, dtype=q.dtype)                          # [M, B]
    q_rows = q.reshape(batch, q_len, num_kv_heads, group, dim)
    q_pairs = jnp.einsum("mb,btkgd->mktgd", pick, q_rows,
                         preferred_element_type=jnp.float32).astype(q.dtype)
    keys, values = _pair_pages(k_pages, v_pages, pairs, layer, q.dtype)     # [M, Hkv, ps, D]
    scores = jnp.einsum("mktgd,mksd->mktgs", q_pairs, keys,
                        preferred_element_type=jnp.float32) * sm_scale
    kv_pos = pairs.starts[:, None] + jnp.arange(page_size)                     # [M, ps]
    visible = ((kv_pos[:, None, :] <= q_positions[rows][:, :, None])
               & valid_pair[:, None, None])                                    # [M, T, ps]
    visible = visible[:, None, :, None, :]
    scores = jnp.where(visible, scores, _MASK_VALUE)
    segment = jnp.where(valid_pair, pairs.rows, batch)                         # batch: dropped
    row_max = jax.ops.segment_max(scores.max(-1), segment, num_segments=batch)
    probs = jnp.where(visible, jnp.exp(scores - row_max[rows][..., None]), 0.0)
    denom = jax.ops.segment_sum(probs.sum(-1), segment, num_segments=batch)   # [B, Hkv, T, G]
    out_pairs = jnp.einsum("mktgs,mksd->mktgd", probs.astype(values.dtype), values,
                           preferred_element_type=jnp.float32)
    out = jax.ops.segment_sum(out_pairs, segment, num_segments=batch)
    out = out / jnp.maximum(denom, jnp.finfo(jnp.float32).tiny)[..., None]
    return jnp.moveaxis(out, 2, 1).reshape(batch, q_len, num_heads, dim).astype(q.dtype)


def pallas_decode_fits(head_dim: int, page_size: int, backend: str) -> bool:
    """Whether the compiled decode kernel of ``backend`` lowers for these shapes. Triton
    (GPU) needs every array in the kernel a power of two in size: the head dim and the page
    size (`_gpu_decode` pads the table width). Mosaic's paged kernel (TPU) gives its row
    statistics the queries' block shape, legal only for a head dim that is a multiple of 128
    (64, as in SmolLM2 or Qwen2.5-0.5B, is refused when lowering)."""
    if backend == "tpu":
        return head_dim % 128 == 0
    return _power_of_two(head_dim) and _power_of_two(page_size)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def paged_decode_attention(
    q: jax.Array,
    k_pages: jax.Array,
    v_pages: jax.Array,
    block_tables: jax.Array,
    lengths: jax.Array,
    *,
    sm_scale: float | None = None,
    impl: str = "auto",
    interpret: bool | None = None,
) -> jax.Array:
    """One query per row: q [B, Hq, D] over the first lengths[b] positions -> [B, Hq, D].

    impl: "xla" | "pallas" | "auto" (pallas on GPU/TPU, xla elsewhere). interpret=None runs the
    Pallas kernel compiled on an accelerator and interpreted on CPU. A compiled kernel serves
    only the shapes it takes (`pallas_decode_fits`); other shapes take the XLA path.
    """
    chex.assert_rank(q, 3)
    chex.assert_shape(lengths, (q.shape[0],))
    if impl not in ("xla", "pallas", "auto"):
        raise ValueError(f"paged attention impl must be xla/pallas/auto, got {impl!r}")
    backend = jax.default_backend()
    if impl == "auto":
        impl = "pallas" if backend in _ACCELERATORS else "xla"
    compiled = backend in _ACCELERATORS and not interpret
    if impl == "pallas" and compiled and not pallas_decode_fits(q.shape[-1], k_pages.shape[2],
                                                                backend):
        impl = "xla"
    sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    lengths = lengths.astype(jnp.int32)
    if impl == "xla":
        out = paged_attention_xla(q[:, None], k_pages, v_pages, block_tables,
                                  (lengths - 1)[:, None], sm_scale=sm_scale)
        return out[:, 0]
    # Both kernels take unscaled logits; scaling q first is the same softmax.
    q_scaled = (q.astype(jnp.float32) * sm_scale).astype(q.dtype)
    k_pages, v_pages = k_pages.astype(q.dtype), v_pages.astype(q.dtype)
    if backend == "tpu" and not interpret:
        return _tpu_decode(q_scaled, k_pages, v_pages, block_tables, lengths)
    return _gpu_decode(q_scaled, k_pages, v_pages, block_tables, lengths,
                       interpret=backend not in ("gpu", "cuda", "rocm") if interpret is None
                       else interpret)


def _gpu_decode(q, k_pages, v_pages, block_tables, lengths, *, interpret: bool) -> jax.Array:
    from jax.experimental.pallas.ops.gpu import paged_attention as gpu_kernel

    width = block_tables.shape[1]
    # A power of two: Triton refuses other block sizes (a table 6 pages wide, 6-page blocks).
    per_block = min(_PAGES_PER_BLOCK, 1 << (width - 1).bit_length())
    splits = max(1, min(_GPU_MAX_SPLITS, width // per_block))
    # The kernel needs the table width to divide into splits x whole compute blocks; the padding
    # pages lie past every row's length and are masked out.
    padded = -(-width // (splits * per_block)) * splits * per_block
    tables = jnp.pad(block_tables, ((0, 0), (0, padded - width)))
    return gpu_kernel.paged_attention(
        q, k_pages, v_pages, tables, lengths, block_h=_GPU_BLOCK_H,
        pages_per_compute_block=per_block, k_splits=splits, interpret=interpret,
        mask_value=_MASK_VALUE)


def _tpu_decode(q, k_pages, v_pages, block_tables, lengths) -> jax.Array:
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention as tpu_kernel

    width = block_tables.shape[1]
    per_block = math.gcd(width, _PAGES_PER_BLOCK)
    return tpu_kernel(q, k_pages, v_pages, lengths, block_tables,
                      pages_per_compute_block=per_block)
