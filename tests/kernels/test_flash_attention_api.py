"""Argument checking, GQA without repeated K/V, and the causal tile-skipping bounds."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentic_jax.kernels import flash_attention
from agentic_jax.kernels._blocks import AttentionSpec, kv_block_range, q_block_range


def _zeros(*shape, dtype=jnp.float32):
    return jnp.zeros(shape, dtype)


def _qkv(q_shape=(1, 8, 2, 16), kv_shape=(1, 8, 2, 16), v_shape=None, dtype=jnp.float32):
    v_shape = v_shape or kv_shape
    return tuple(_zeros(*shape, dtype=dtype) for shape in (q_shape, kv_shape, v_shape))


BAD_ARGUMENTS = {
    "rank": (_qkv((2, 8, 4), (2, 8, 4)), {}, ValueError, r"q must be \[B, T, H, D\]"),
    "heads": (_qkv((1, 8, 3, 16)), {}, ValueError, "multiple of kv heads"),
    "head_dim": (_qkv((1, 8, 2, 16), (1, 8, 2, 32)), {}, ValueError, "head dim"),
    "kv_shapes": (_qkv(v_shape=(1, 9, 2, 16)), {}, ValueError, "same shape"),
    "int_dtype": (_qkv(dtype=jnp.int32), {}, TypeError, "float32/bfloat16"),
    "mixed_dtype": (_qkv()[:2] + (_zeros(1, 8, 2, 16, dtype=jnp.bfloat16),), {}, TypeError,
                    "dtypes differ"),
    "single_ids_t_ne_s": (_qkv((1, 4, 2, 16)), {"segment_ids": jnp.zeros((1, 4), jnp.int32)},
                          ValueError, "needs T == S"),
    "float_ids": (_qkv(), {"segment_ids": jnp.zeros((1, 8))}, ValueError, "q_ids must be int"),
    "block": (_qkv(), {"block_q": 24}, ValueError, "power of two"),
    "compiled_on_cpu": (_qkv(), {"interpret": False}, ValueError, "interpret=True"),
}


@pytest.mark.parametrize("name", sorted(BAD_ARGUMENTS))
def test_bad_arguments_raise_clear_errors(name):
    (q, k, v), kwargs, error, match = BAD_ARGUMENTS[name]
    with pytest.raises(error, match=match):
        flash_attention(q, k, v, **kwargs)


def test_gqa_kernels_read_unrepeated_kv():
    """Forward, dq and dkv kernels all take K and V with Hkv heads: nothing repeats them."""
    q, k = _zeros(1, 32, 8, 64), _zeros(1, 32, 2, 64)

    def loss(q, k, v):
        return flash_attention(q, k, v, interpret=True, block_q=16, block_kv=16).sum()

    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2)))(q, k, k).jaxpr
    calls = [e for e in jaxpr.eqns if e.primitive.name == "pallas_call"]
    assert len(calls) == 3
    for eqn in calls:
        kv_inputs = [x for x in eqn.invars if x.aval.shape == (1, 32, 2, 64)]
        assert len(kv_inputs) == 2, eqn.params["name"]


def _visibility(spec: AttentionSpec, q_block: int, kv_block: int) -> np.ndarray:
    rows = q_block * spec.block_q + np.arange(spec.block_q)[:, None]
    cols = kv_block * spec.block_kv + np.arange(spec.block_kv)[None, :]
    visible = np.broadcast_to(cols < spec.kv_len, (spec.block_q, spec.block_kv)).copy()
    if spec.causal:
        visible &= cols <= rows + spec.offset
    return visible


@pytest.mark.parametrize(
    "q_len, kv_len, block_q, block_kv, causal",
    [(64, 64, 16, 16, True), (40, 100, 16, 32, True), (100, 40, 32, 16, True),
     (1, 70, 16, 16, True), (50, 50, 16, 32, False)],
)
def test_block_ranges_skip_exactly_the_masked_tiles(q_len, kv_len, block_q, block_kv, causal):
    """Tiles run unmasked only when fully visible, and are skipped only when fully hidden."""
    spec = AttentionSpec(q_len, kv_len, block_q, block_kv, causal, 1.0, False, 1)
    num_q = -(-q_len // block_q)
    num_kv = -(-kv_len // block_kv)
    for i, j in itertools.product(range(num_q), range(num_kv)):
        visible = _visibility(spec, i, j)[: q_len - i * block_q]  # ignore padded query rows
        n_unmasked, n_end = (int(x) for x in kv_block_range(spec, jnp.int32(i)))
        start, unmasked = (int(x) for x in q_block_range(spec, jnp.int32(j), num_q))
        if j < n_unmasked or i >= unmasked:
            assert visible.all(), (i, j)
        if j >= n_end or i < start:
            assert not visible.any(), (i, j)
        if visible.any():
            assert j < n_end and i >= start, (i, j)
        if visible.size and not visible.all():
            assert j >= n_unmasked and i < unmasked, (i, j)


@pytest.mark.parametrize(
    "backend, platform, custom_call",
    [("gpu", "cuda", "__gpu$xla.gpu.triton"), ("tpu", "tpu", "tpu_custom_call")],
)
@pytest.mark.parametrize("segments", [False, True])
def test_compiled_kernels_lower_for_accelerators(monkeypatch, backend, platform, custom_call,
                                                 segments):
    """Forward and backward lower to Triton (GPU) and Mosaic (TPU) with their default tiles.

    Lowering runs the Pallas backends' own block-shape and op checks without the hardware.
    """
    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    q = jax.ShapeDtypeStruct((2, 200, 4, 128), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((2, 300, 2, 128), jnp.bfloat16)
    ids = (jax.ShapeDtypeStruct((2, 200), jnp.int32), jax.ShapeDtypeStruct((2, 300), jnp.int32))

    def grads(q, k, v, ids):
        def loss(q, k, v):
            out = flash_attention(q, k, v, causal=True, segment_ids=ids if segments else None)
            return out.astype(jnp.float32).sum()

        return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

    text = jax.jit(grads).trace(q, kv, kv, ids).lower(lowering_platforms=(platform,)).as_text()
    assert text.count(custom_call) == 3  # forward, dq, dkv
