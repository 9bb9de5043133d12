"""Public flash-attention entry point: validation, padding, backend choice and the custom VJP."""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from agentic_jax.kernels import _gpu, _tpu
from agentic_jax.kernels._blocks import AttentionSpec

_FLOAT_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
SegmentIds = jax.Array | tuple[jax.Array, jax.Array] | None


def flash_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    causal: bool = True,
    segment_ids: SegmentIds = None,
    sm_scale: float | None = None,
    interpret: Any = None,
    *,
    block_q: int | None = None,
    block_kv: int | None = None,
) -> jax.Array:
    """Memory-efficient softmax(q kᵀ · sm_scale) v, differentiable through a custom VJP.

    Args:
      q: [B, T, Hq, D] queries; k, v: [B, S, Hkv, D] keys and values, Hq % Hkv == 0 (grouped-query
        attention: query head h reads kv head h // (Hq // Hkv), K/V are never repeated).
      causal: query i sees keys j <= i + S - T (the ends are aligned, as when decoding against a
        cache).
      segment_ids: int [B, T] for self-attention (T == S), or a pair (q_ids [B, T], kv_ids [B, S]);
        a query sees only keys of its own segment. A row that sees no key returns zeros.
      sm_scale: score scale, default 1 / sqrt(D).
      interpret: None compiles on GPU (Pallas Triton) and TPU (Mosaic) and interprets on CPU;
        True runs the GPU kernels in Pallas interpret mode; a `pltpu.InterpretParams` runs the TPU
        kernels in Pallas's TPU interpret mode; False forces compilation.
      block_q, block_kv: tile sizes (powers of two on GPU; multiples of 8 and 128 on TPU).

    Returns:
      [B, T, Hq, D] in q's dtype; softmax and accumulation run in float32.
    """
    _check_inputs(q, k, v)
    q_ids, kv_ids = _segment_pair(segment_ids, q, k)
    local = functools.partial(_flash_attention, causal=causal, sm_scale=sm_scale,
                              interpret=interpret, block_q=block_q, block_kv=block_kv)
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1 or mesh.manual_axes:
        return local(q, k, v, q_ids, kv_ids)
    return _per_shard(local, mesh, q, k, v, q_ids, kv_ids)


def _per_shard(attend, mesh, q, k, v, q_ids, kv_ids) -> jax.Array:
    """``attend`` on each device's shard under the context mesh (the train step's): Mosaic
    refuses to be partitioned automatically, and XLA would run a Triton kernel on every device
    over the whole gathered batch. Rows split over the "batch" mesh axes and heads over the
    "kv_heads" ones where they divide (`logical_to_mesh_spec`); other axes keep them whole."""
    from agentic_jax.models.partitioning import logical_to_mesh_spec  # lazy: models import kernels

    heads = logical_to_mesh_spec(("batch", "length", "kv_heads", "head_dim"), shape=k.shape,
                                 mesh=mesh)
    ids = () if q_ids is None else (q_ids, kv_ids)

    def run(q, k, v, *ids):
        return attend(q, k, v, *(ids or (None, None)))

    return jax.shard_map(run, mesh=mesh, in_specs=(heads,) * 3 + (P(heads[0], None),) * len(ids),
                         out_specs=heads)(q, k, v, *ids)


def _flash_attention(q, k, v, q_ids, kv_ids, *, causal, sm_scale, interpret, block_q, block_kv):
    """`flash_attention` on one device's arrays (segment ids already paired)."""
    backend, interpret = _backend(interpret)
    batch, q_len, num_heads, head_dim = q.shape
    kv_len, num_kv_heads = k.shape[1], k.shape[2]
    bq, bk = _block_sizes(backend, q_len, kv_len, block_q, block_kv)
    spec = AttentionSpec(
        q_len=q_len,
        kv_len=kv_len,
        block_q=bq,
        block_kv=bk,
        causal=bool(causal),
        sm_scale=float(1.0 / math.sqrt(head_dim) if sm_scale is None else sm_scale),
        has_segments=q_ids is not None,
        group=num_heads // num_kv_heads,
        interpret=interpret,
    )
    # Triton tiles need power-of-two sizes; zero head-dim padding changes no score or output.
    padded_dim = _next_pow2(max(head_dim, 16)) if backend is _gpu else head_dim
    q_p = _pad(q, 1, _round_up(q_len, bq), padded_dim)
    k_p = _pad(k, 1, _round_up(kv_len, bk), padded_dim)
    v_p = _pad(v, 1, _round_up(kv_len, bk), padded_dim)
    if q_ids is not None:
        q_ids = _pad(q_ids, 1, q_p.shape[1])
        kv_ids = _pad(kv_ids, 1, k_p.shape[1])
    out = _attention(backend, spec, q_p, k_p, v_p, q_ids, kv_ids)
    return out[:, :q_len, :, :head_dim]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _attention(backend, spec, q, k, v, q_ids, kv_ids):
    out, _ = backend.forward(spec, q, k, v, q_ids, kv_ids)
    return out


def _attention_fwd(backend, spec, q, k, v, q_ids, kv_ids):
    out, lse = backend.forward(spec, q, k, v, q_ids, kv_ids)
    return out, (q, k, v, q_ids, kv_ids, out, lse)


def _attention_bwd(backend, spec, residuals, do):
    q, k, v, q_ids, kv_ids, out, lse = residuals
    # delta_i = sum_d dO_id O_id = sum_j P_ij dP_ij, the softmax-backward row term: [B, Hq, Tp].
    delta = jnp.einsum("bthd,bthd->bht", do.astype(jnp.float32), out.astype(jnp.float32))
    dq, dk, dv = backend.backward(spec, q, k, v, q_ids, kv_ids, lse, delta, do.astype(q.dtype))
    return dq, dk, dv, None, None


_attention.defvjp(_attention_fwd, _attention_bwd)


def _check_inputs(q: jax.Array, k: jax.Array, v: jax.Array) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 4:
            raise ValueError(f"flash_attention: {name} must be [B, T, H, D], got shape {x.shape}")
        if x.dtype not in _FLOAT_DTYPES:
            raise TypeError(
                f"flash_attention: {name} must be float32/bfloat16/float16, got {x.dtype}"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"flash_attention: q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    if k.shape != v.shape:
        raise ValueError(f"flash_attention: k {k.shape} and v {v.shape} must have the same shape")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(
            f"flash_attention: batch and head dim of q {q.shape} and k {k.shape} must match"
        )
    if q.shape[2] % k.shape[2]:
        raise ValueError(
            f"flash_attention: query heads ({q.shape[2]}) must be a multiple of kv heads "
            f"({k.shape[2]})"
        )
    if q.shape[1] == 0 or k.shape[1] == 0:
        raise ValueError(f"flash_attention: empty sequence, q {q.shape}, k {k.shape}")


def _segment_pair(segment_ids: SegmentIds, q: jax.Array, k: jax.Array):
    """Normalises segment_ids to (q_ids [B, T], kv_ids [B, S]) int32, or (None, None)."""
    if segment_ids is None:
        return None, None
    if isinstance(segment_ids, (tuple, list)):
        if len(segment_ids) != 2:
            raise ValueError("flash_attention: segment_ids pair must be (q_ids, kv_ids)")
        q_ids, kv_ids = segment_ids
    else:
        if q.shape[1] != k.shape[1]:
            raise ValueError(
                "flash_attention: a single segment_ids array needs T == S; pass (q_ids, kv_ids) "
                f"for T={q.shape[1]}, S={k.shape[1]}"
            )
        q_ids = kv_ids = segment_ids
    expected = ((q.shape[0], q.shape[1]), (k.shape[0], k.shape[1]))
    for name, ids, shape in (("q_ids", q_ids, expected[0]), ("kv_ids", kv_ids, expected[1])):
        if tuple(ids.shape) != shape or not jnp.issubdtype(ids.dtype, jnp.integer):
            raise ValueError(
                f"flash_attention: segment {name} must be int {list(shape)}, got "
                f"{ids.dtype}{list(ids.shape)}"
            )
    return q_ids.astype(jnp.int32), kv_ids.astype(jnp.int32)


def _backend(interpret: Any):
    """Picks the kernel family and the pallas_call `interpret` value."""
    if interpret is not None and not isinstance(interpret, bool):
        return _tpu, interpret  # TPU interpret-mode parameters
    platform = jax.default_backend()
    if platform == "tpu":
        return _tpu, bool(interpret)
    if platform == "cpu":
        if interpret is False:
            raise ValueError("flash_attention: Pallas kernels run on CPU only with interpret=True")
        return _gpu, True
    return _gpu, bool(interpret)


def _block_sizes(backend, q_len: int, kv_len: int, block_q: int | None, block_kv: int | None):
    if backend is _gpu:
        # Triton dots need every tile side >= 16 and a power of two.
        bq = block_q or min(128, _next_pow2(max(q_len, 16)))
        bk = block_kv or min(64, _next_pow2(max(kv_len, 16)))
        for name, b in (("block_q", bq), ("block_kv", bk)):
            if b < 16 or b & (b - 1):
                raise ValueError(f"flash_attention: {name}={b} must be a power of two >= 16")
        return bq, bk
    bq = block_q or min(128, _round_up(q_len, 16))
    bk = block_kv or 128
    if bq % 8 or bk % 128:
        raise ValueError(
            f"flash_attention: TPU tiles need block_q % 8 == 0 and block_kv % 128 == 0, "
            f"got {bq}, {bk}"
        )
    return bq, bk


def _pad(x: jax.Array, axis: int, size: int, last_dim: int | None = None) -> jax.Array:
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, size - x.shape[axis])
    if last_dim is not None:
        widths[-1] = (0, last_dim - x.shape[-1])
    return jnp.pad(x, widths) if any(w[1] for w in widths) else x


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()
