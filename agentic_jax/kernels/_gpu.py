"""Flash-attention kernels in the Pallas Triton formulation (GPU, and Pallas interpret mode).

In jax 0.10 the default Pallas GPU backend is Mosaic GPU, and `pl.pallas_call` kernels for it are
deprecated in favour of `plgpu.kernel`; passing `pallas.triton.CompilerParams` explicitly selects
the Triton backend, which lowers these `pallas_call` kernels on any CUDA GPU from Ampere on.

Each program owns one output tile and loops over the other sequence inside the kernel, since
Triton programs cannot accumulate across grid steps. Inputs are block-padded, layout
[B, T, H, D]; the log-sum-exp and delta rows are [B, Hq, T] float32.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from agentic_jax.kernels._blocks import (
    AttentionSpec,
    block_mask,
    finalize_softmax,
    init_softmax_state,
    kv_block_range,
    kv_head,
    matmul,
    online_softmax_step,
    out_struct,
    q_block_range,
    softmax_grads,
    with_segment_refs,
)


def _compiler_params(head_dim: int) -> pltriton.CompilerParams:
    return pltriton.CompilerParams(num_warps=4 if head_dim <= 64 else 8, num_stages=2)


def _kv_tile(spec: AttentionSpec, k_ref, v_ref, kv_ids_ref, q_block, kv_block, q_ids, masked: bool):
    """Loads key tile `kv_block` from whole-sequence refs: (k, v [bk, D], mask [bq, bk] | None)."""
    start = pl.multiple_of(kv_block * spec.block_kv, spec.block_kv)
    rows = pl.ds(start, spec.block_kv)
    mask = None
    if masked:
        kv_ids = None if kv_ids_ref is None else kv_ids_ref[rows][None, :]
        mask = block_mask(spec, q_block * spec.block_q, start, q_ids, kv_ids)
    return k_ref[rows, :], v_ref[rows, :], mask


def _whole_kv_spec(kv_len: int, head_dim: int, group: int) -> pl.BlockSpec:
    """Whole-sequence K or V of the kv head that query head h reads, over grid (b, h, i)."""
    return pl.BlockSpec(
        (None, kv_len, None, head_dim), lambda b, h, i: (b, 0, kv_head(h, group), 0)
    )


def _loop_kv_tiles(spec: AttentionSpec, q_block, visit, carry):
    """Runs visit(kv_block, carry, masked) over the key tiles query tile `q_block` sees."""
    n_unmasked, n_end = kv_block_range(spec, q_block)
    carry = lax.fori_loop(0, n_unmasked, functools.partial(visit, masked=False), carry)
    return lax.fori_loop(n_unmasked, n_end, functools.partial(visit, masked=True), carry)


def _fwd_kernel(spec: AttentionSpec, q_ref, k_ref, v_ref, q_ids_ref, kv_ids_ref, o_ref, lse_ref):
    q_block = pl.program_id(2)
    q = q_ref[...]
    q_ids = None if q_ids_ref is None else q_ids_ref[...][:, None]

    def visit(kv_block, carry, masked: bool):
        k, v, mask = _kv_tile(spec, k_ref, v_ref, kv_ids_ref, q_block, kv_block, q_ids, masked)
        return online_softmax_step(spec, q, k, v, *carry, mask=mask)

    carry = _loop_kv_tiles(spec, q_block, visit, init_softmax_state(spec.block_q, q.shape[-1]))
    out, lse = finalize_softmax(*carry)
    o_ref[...] = out.astype(o_ref.dtype)
    lse_ref[...] = lse[:, 0]


def _segment_specs(spec: AttentionSpec, q_ids, kv_ids, q_block_spec, kv_block_spec):
    if not spec.has_segments:
        return [], []
    return [q_ids, kv_ids], [q_block_spec, kv_block_spec]


def _q_tile_ids_specs(spec: AttentionSpec, kv_len: int):
    """Segment-id specs over grid (b, h, q block): the query tile's ids and all key ids."""
    return (
        pl.BlockSpec((None, spec.block_q), lambda b, h, i: (b, i)),
        pl.BlockSpec((None, kv_len), lambda b, h, i: (b, 0)),
    )


def forward(spec: AttentionSpec, q, k, v, q_ids, kv_ids):
    """q [B, Tp, Hq, D], k/v [B, Sp, Hkv, D] -> (out [B, Tp, Hq, D], lse [B, Hq, Tp] f32)."""
    batch, q_len, num_heads, head_dim = q.shape
    kv_len = k.shape[1]
    bq, group = spec.block_q, spec.group
    grid = (batch, num_heads, q_len // bq)
    id_arrays, id_specs = _segment_specs(spec, q_ids, kv_ids, *_q_tile_ids_specs(spec, kv_len))
    kv_spec = _whole_kv_spec(kv_len, head_dim, group)
    return pl.pallas_call(
        with_segment_refs(_fwd_kernel, spec, 3),
        grid=grid,
        in_specs=[
            pl.BlockSpec((None, bq, None, head_dim), lambda b, h, i: (b, i, h, 0)),
            kv_spec,
            kv_spec,
            *id_specs,
        ],
        out_specs=[
            pl.BlockSpec((None, bq, None, head_dim), lambda b, h, i: (b, i, h, 0)),
            pl.BlockSpec((None, None, bq), lambda b, h, i: (b, h, i)),
        ],
        out_shape=[
            out_struct(q.shape, q.dtype, q, k, v, q_ids, kv_ids),
            out_struct((batch, num_heads, q_len), jnp.float32, q, k, v, q_ids, kv_ids),
        ],
        compiler_params=_compiler_params(head_dim),
        interpret=spec.interpret,
        name="flash_attention_fwd",
    )(q, k, v, *id_arrays)


def _dq_kernel(
    spec, q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, q_ids_ref, kv_ids_ref, dq_ref
):
    q_block = pl.program_id(2)
    q, do = q_ref[...], do_ref[...]
    lse, delta = lse_ref[...][:, None], delta_ref[...][:, None]
    q_ids = None if q_ids_ref is None else q_ids_ref[...][:, None]

    def visit(kv_block, dq, masked: bool):
        k, v, mask = _kv_tile(spec, k_ref, v_ref, kv_ids_ref, q_block, kv_block, q_ids, masked)
        _, ds = softmax_grads(spec, q, k, v, do, lse, delta, mask)
        return dq + matmul(ds.astype(k.dtype), k)

    dq = _loop_kv_tiles(spec, q_block, visit, jnp.zeros(q.shape, jnp.float32))
    dq_ref[...] = (dq * spec.sm_scale).astype(dq_ref.dtype)


def _dkv_kernel(
    spec, k_ref, v_ref, q_ref, do_ref, lse_ref, delta_ref, q_ids_ref, kv_ids_ref, dk_ref, dv_ref
):
    """One key tile of one kv head; sums over the `group` query heads that share it."""
    bq, bk = spec.block_q, spec.block_kv
    kv_block = pl.program_id(2)
    k, v = k_ref[...], v_ref[...]
    num_q_blocks = q_ref.shape[0] // bq
    kv_ids = None if kv_ids_ref is None else kv_ids_ref[...][None, :]
    start, unmasked = q_block_range(spec, kv_block, num_q_blocks)

    def visit(q_block, carry, head: int, masked: bool):
        dk, dv = carry
        rows = pl.ds(pl.multiple_of(q_block * bq, bq), bq)
        q, do = q_ref[rows, head, :], do_ref[rows, head, :]
        lse, delta = lse_ref[head, rows][:, None], delta_ref[head, rows][:, None]
        mask = None
        if masked:
            q_ids = None if q_ids_ref is None else q_ids_ref[rows][:, None]
            mask = block_mask(spec, q_block * bq, kv_block * bk, q_ids, kv_ids)
        p, ds = softmax_grads(spec, q, k, v, do, lse, delta, mask)
        dv = dv + matmul(p.astype(do.dtype), do, trans_a=True)
        dk = dk + matmul(ds.astype(q.dtype), q, trans_a=True)
        return dk, dv

    carry = (jnp.zeros(k.shape, jnp.float32), jnp.zeros(v.shape, jnp.float32))
    for head in range(spec.group):  # static: the group is small and indexes a ref dimension
        masked_visit = functools.partial(visit, head=head, masked=True)
        carry = lax.fori_loop(start, unmasked, masked_visit, carry)
        carry = lax.fori_loop(
            unmasked, num_q_blocks, functools.partial(visit, head=head, masked=False), carry
        )
    dk, dv = carry
    dk_ref[...] = (dk * spec.sm_scale).astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


def backward(spec: AttentionSpec, q, k, v, q_ids, kv_ids, lse, delta, do):
    """Gradients (dq, dk, dv) shaped like (q, k, v); lse/delta [B, Hq, Tp] f32."""
    batch, q_len, num_heads, head_dim = q.shape
    kv_len, num_kv_heads = k.shape[1], k.shape[2]
    bq, bk, group = spec.block_q, spec.block_kv, spec.group
    params = _compiler_params(head_dim)
    inputs = (q, k, v, do, lse, delta, q_ids, kv_ids)

    q_tile = pl.BlockSpec((None, bq, None, head_dim), lambda b, h, i: (b, i, h, 0))
    row_tile = pl.BlockSpec((None, None, bq), lambda b, h, i: (b, h, i))
    kv_full = _whole_kv_spec(kv_len, head_dim, group)
    ids, id_specs = _segment_specs(spec, q_ids, kv_ids, *_q_tile_ids_specs(spec, kv_len))
    dq = pl.pallas_call(
        with_segment_refs(_dq_kernel, spec, 6),
        grid=(batch, num_heads, q_len // bq),
        in_specs=[q_tile, kv_full, kv_full, q_tile, row_tile, row_tile, *id_specs],
        out_specs=q_tile,
        out_shape=out_struct(q.shape, q.dtype, *inputs),
        compiler_params=params,
        interpret=spec.interpret,
        name="flash_attention_dq",
    )(q, k, v, do, lse, delta, *ids)

    kv_tile = pl.BlockSpec((None, bk, None, head_dim), lambda b, h, j: (b, j, h, 0))
    q_group = pl.BlockSpec((None, q_len, group, head_dim), lambda b, h, j: (b, 0, h, 0))
    rows_group = pl.BlockSpec((None, group, q_len), lambda b, h, j: (b, h, 0))
    ids, id_specs = _segment_specs(
        spec,
        q_ids,
        kv_ids,
        pl.BlockSpec((None, q_len), lambda b, h, j: (b, 0)),
        pl.BlockSpec((None, bk), lambda b, h, j: (b, j)),
    )
    dk, dv = pl.pallas_call(
        with_segment_refs(_dkv_kernel, spec, 6),
        grid=(batch, num_kv_heads, kv_len // bk),
        in_specs=[kv_tile, kv_tile, q_group, q_group, rows_group, rows_group, *id_specs],
        out_specs=[kv_tile, kv_tile],
        out_shape=[out_struct(k.shape, k.dtype, *inputs)] * 2,
        compiler_params=params,
        interpret=spec.interpret,
        name="flash_attention_dkv",
    )(k, v, q, do, lse, delta, *ids)
    return dq, dk, dv
