"""Flash-attention kernels for Mosaic TPU.

The innermost grid axis walks the reduced sequence ("arbitrary" semantics) and the running
statistics live in VMEM scratch, the pattern Mosaic pipelines well. Kernels see the [B, H, T, D]
layout so every tile's last two dims are (sequence block, full head dim); 1-wide row statistics
and segment ids are given a unit last (or second-to-last) axis so their tiles obey the (8, 128)
rule. Masked-out tiles are skipped with `pl.when`, and their index maps are clamped to a tile that
is needed anyway, so the pipeline does not fetch them.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

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


def _params(num_parallel: int, num_arbitrary: int) -> pltpu.CompilerParams:
    semantics = (pltpu.PARALLEL,) * num_parallel + (pltpu.ARBITRARY,) * num_arbitrary
    return pltpu.CompilerParams(dimension_semantics=semantics)


def _tile_mask(spec: AttentionSpec, q_block, kv_block, q_ids_ref, kv_ids_ref):
    """Mask of the current [bq, bk] tile; the id refs hold [bq, 1] and [1, bk] tiles."""
    q_ids = None if q_ids_ref is None else q_ids_ref[...]
    kv_ids = None if kv_ids_ref is None else kv_ids_ref[...]
    return block_mask(spec, q_block * spec.block_q, kv_block * spec.block_kv, q_ids, kv_ids)


def _last_kv_block(spec: AttentionSpec, q_block, kv_block):
    """kv_block clamped to the last tile `q_block` visits, so skipped tiles cost no DMA."""
    _, n_end = kv_block_range(spec, q_block)
    return jnp.minimum(kv_block, jnp.maximum(n_end - 1, 0))


def _fwd_kernel(
    spec, q_ref, k_ref, v_ref, q_ids_ref, kv_ids_ref, o_ref, lse_ref, m_sc, l_sc, acc_sc
):
    q_block, kv_block = pl.program_id(2), pl.program_id(3)
    n_unmasked, n_end = kv_block_range(spec, q_block)

    @pl.when(kv_block == 0)
    def _init():
        m_sc[...], l_sc[...], acc_sc[...] = init_softmax_state(spec.block_q, acc_sc.shape[-1])

    def step(masked: bool):
        mask = _tile_mask(spec, q_block, kv_block, q_ids_ref, kv_ids_ref) if masked else None
        state = (m_sc[...], l_sc[...], acc_sc[...])
        m_sc[...], l_sc[...], acc_sc[...] = online_softmax_step(
            spec, q_ref[...], k_ref[...], v_ref[...], *state, mask=mask
        )

    pl.when(kv_block < n_unmasked)(lambda: step(False))
    pl.when((kv_block >= n_unmasked) & (kv_block < n_end))(lambda: step(True))

    @pl.when(kv_block == pl.num_programs(3) - 1)
    def _finish():
        out, lse = finalize_softmax(m_sc[...], l_sc[...], acc_sc[...])
        o_ref[...] = out.astype(o_ref.dtype)
        lse_ref[...] = lse


def _common_specs(spec: AttentionSpec, head_dim: int):
    """BlockSpecs over grid (b, h, q_block, kv_block) for the forward and dq kernels."""
    bq, bk = spec.block_q, spec.block_kv

    def kv_index(b, h, i, j):
        return b, kv_head(h, spec.group), _last_kv_block(spec, i, j), 0

    q_tile = pl.BlockSpec((None, None, bq, head_dim), lambda b, h, i, j: (b, h, i, 0))
    kv_tile = pl.BlockSpec((None, None, bk, head_dim), kv_index)
    rows = pl.BlockSpec((None, None, bq, 1), lambda b, h, i, j: (b, h, i, 0))
    ids = [
        pl.BlockSpec((None, bq, 1), lambda b, h, i, j: (b, i, 0)),
        pl.BlockSpec((None, 1, bk), lambda b, h, i, j: (b, 0, _last_kv_block(spec, i, j))),
    ]
    return q_tile, kv_tile, rows, ids if spec.has_segments else []


def _ids_arrays(spec: AttentionSpec, q_ids, kv_ids):
    return [q_ids[:, :, None], kv_ids[:, None, :]] if spec.has_segments else []


def _to_bhtd(x):
    return jnp.swapaxes(x, 1, 2)


def forward(spec: AttentionSpec, q, k, v, q_ids, kv_ids):
    """q [B, Tp, Hq, D], k/v [B, Sp, Hkv, D] -> (out [B, Tp, Hq, D], lse [B, Hq, Tp] f32)."""
    batch, q_len, num_heads, head_dim = q.shape
    q_tile, kv_tile, rows, id_specs = _common_specs(spec, head_dim)
    grid = (batch, num_heads, q_len // spec.block_q, k.shape[1] // spec.block_kv)
    out, lse = pl.pallas_call(
        with_segment_refs(_fwd_kernel, spec, 3),
        grid=grid,
        in_specs=[q_tile, kv_tile, kv_tile, *id_specs],
        out_specs=[q_tile, rows],
        out_shape=[
            out_struct((batch, num_heads, q_len, head_dim), q.dtype, q, k, v, q_ids, kv_ids),
            out_struct((batch, num_heads, q_len, 1), jnp.float32, q, k, v, q_ids, kv_ids),
        ],
        scratch_shapes=[
            pltpu.VMEM((spec.block_q, 1), jnp.float32),
            pltpu.VMEM((spec.block_q, 1), jnp.float32),
            pltpu.VMEM((spec.block_q, head_dim), jnp.float32),
        ],
        compiler_params=_params(3, 1),
        interpret=spec.interpret,
        name="flash_attention_fwd_tpu",
    )(_to_bhtd(q), _to_bhtd(k), _to_bhtd(v), *_ids_arrays(spec, q_ids, kv_ids))
    return _to_bhtd(out), lse[..., 0]


def _dq_kernel(
    spec, q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, q_ids_ref, kv_ids_ref, dq_ref, dq_sc
):
    q_block, kv_block = pl.program_id(2), pl.program_id(3)
    n_unmasked, n_end = kv_block_range(spec, q_block)

    @pl.when(kv_block == 0)
    def _init():
        dq_sc[...] = jnp.zeros(dq_sc.shape, jnp.float32)

    def step(masked: bool):
        mask = _tile_mask(spec, q_block, kv_block, q_ids_ref, kv_ids_ref) if masked else None
        k = k_ref[...]
        _, ds = softmax_grads(
            spec, q_ref[...], k, v_ref[...], do_ref[...], lse_ref[...], delta_ref[...], mask
        )
        dq_sc[...] += matmul(ds.astype(k.dtype), k)

    pl.when(kv_block < n_unmasked)(lambda: step(False))
    pl.when((kv_block >= n_unmasked) & (kv_block < n_end))(lambda: step(True))

    @pl.when(kv_block == pl.num_programs(3) - 1)
    def _finish():
        dq_ref[...] = (dq_sc[...] * spec.sm_scale).astype(dq_ref.dtype)


def _dkv_kernel(
    spec, k_ref, v_ref, q_ref, do_ref, lse_ref, delta_ref, q_ids_ref, kv_ids_ref,
    dk_ref, dv_ref, dk_sc, dv_sc,
):  # fmt: skip
    """Grid (b, kv head, kv block, group member, q block); sums over the last two axes."""
    kv_block, member, q_block = pl.program_id(2), pl.program_id(3), pl.program_id(4)
    start, unmasked = q_block_range(spec, kv_block, pl.num_programs(4))

    @pl.when((member == 0) & (q_block == 0))
    def _init():
        dk_sc[...] = jnp.zeros(dk_sc.shape, jnp.float32)
        dv_sc[...] = jnp.zeros(dv_sc.shape, jnp.float32)

    def step(masked: bool):
        mask = _tile_mask(spec, q_block, kv_block, q_ids_ref, kv_ids_ref) if masked else None
        q, do = q_ref[...], do_ref[...]
        p, ds = softmax_grads(
            spec, q, k_ref[...], v_ref[...], do, lse_ref[...], delta_ref[...], mask
        )
        dv_sc[...] += matmul(p.astype(do.dtype), do, trans_a=True)
        dk_sc[...] += matmul(ds.astype(q.dtype), q, trans_a=True)

    pl.when((q_block >= start) & (q_block < unmasked))(lambda: step(True))
    pl.when(q_block >= unmasked)(lambda: step(False))

    @pl.when((member == pl.num_programs(3) - 1) & (q_block == pl.num_programs(4) - 1))
    def _finish():
        dk_ref[...] = (dk_sc[...] * spec.sm_scale).astype(dk_ref.dtype)
        dv_ref[...] = dv_sc[...].astype(dv_ref.dtype)


def _dkv_specs(spec: AttentionSpec, head_dim: int, num_q_blocks: int):
    """BlockSpecs over grid (b, kv head, kv block, group member, q block)."""
    bq, bk, group = spec.block_q, spec.block_kv, spec.group

    def first_needed(j, i):
        start, _ = q_block_range(spec, j, num_q_blocks)
        return jnp.maximum(i, jnp.minimum(start, num_q_blocks - 1))

    kv_tile = pl.BlockSpec((None, None, bk, head_dim), lambda b, h, j, g, i: (b, h, j, 0))
    q_tile = pl.BlockSpec(
        (None, None, bq, head_dim), lambda b, h, j, g, i: (b, h * group + g, first_needed(j, i), 0)
    )
    rows = pl.BlockSpec(
        (None, None, bq, 1), lambda b, h, j, g, i: (b, h * group + g, first_needed(j, i), 0)
    )
    ids = [
        pl.BlockSpec((None, bq, 1), lambda b, h, j, g, i: (b, first_needed(j, i), 0)),
        pl.BlockSpec((None, 1, bk), lambda b, h, j, g, i: (b, 0, j)),
    ]
    return kv_tile, q_tile, rows, ids if spec.has_segments else []


def backward(spec: AttentionSpec, q, k, v, q_ids, kv_ids, lse, delta, do):
    """Gradients (dq, dk, dv) shaped like (q, k, v); lse/delta [B, Hq, Tp] f32."""
    batch, q_len, num_heads, head_dim = q.shape
    kv_len, num_kv_heads = k.shape[1], k.shape[2]
    num_q_blocks, num_kv_blocks = q_len // spec.block_q, kv_len // spec.block_kv
    q_t, k_t, v_t, do_t = (_to_bhtd(x) for x in (q, k, v, do))
    lse, delta = lse[..., None], delta[..., None]
    ids = _ids_arrays(spec, q_ids, kv_ids)
    inputs = (q, k, v, do, lse, delta, q_ids, kv_ids)

    q_tile, kv_tile, rows, id_specs = _common_specs(spec, head_dim)
    dq = pl.pallas_call(
        with_segment_refs(_dq_kernel, spec, 6),
        grid=(batch, num_heads, num_q_blocks, num_kv_blocks),
        in_specs=[q_tile, kv_tile, kv_tile, q_tile, rows, rows, *id_specs],
        out_specs=q_tile,
        out_shape=out_struct(q_t.shape, q.dtype, *inputs),
        scratch_shapes=[pltpu.VMEM((spec.block_q, head_dim), jnp.float32)],
        compiler_params=_params(3, 1),
        interpret=spec.interpret,
        name="flash_attention_dq_tpu",
    )(q_t, k_t, v_t, do_t, lse, delta, *ids)

    kv_tile, q_tile, rows, id_specs = _dkv_specs(spec, head_dim, num_q_blocks)
    dk, dv = pl.pallas_call(
        with_segment_refs(_dkv_kernel, spec, 6),
        grid=(batch, num_kv_heads, num_kv_blocks, spec.group, num_q_blocks),
        in_specs=[kv_tile, kv_tile, q_tile, q_tile, rows, rows, *id_specs],
        out_specs=[kv_tile, kv_tile],
        out_shape=[out_struct(k_t.shape, k.dtype, *inputs)] * 2,
        scratch_shapes=[pltpu.VMEM((spec.block_kv, head_dim), jnp.float32)] * 2,
        compiler_params=_params(3, 2),
        interpret=spec.interpret,
        name="flash_attention_dkv_tpu",
    )(k_t, v_t, q_t, do_t, lse, delta, *ids)
    return _to_bhtd(dq), _to_bhtd(dk), _to_bhtd(dv)
