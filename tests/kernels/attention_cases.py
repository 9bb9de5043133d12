"""Shared inputs and checks for the flash-attention tests."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from agentic_jax.kernels import flash_attention, reference_attention

F32_TOL = (1e-5, 1e-4)  # relative error: forward, gradients
BF16_TOL = (2e-2, 5e-2)


@dataclasses.dataclass(frozen=True)
class Case:
    batch: int
    q_len: int
    kv_len: int
    q_heads: int
    kv_heads: int
    head_dim: int
    causal: bool = True
    segments: str | None = None  # None, "packed" (one array, T == S) or "pair" (q_ids, kv_ids)
    dtype: str = "float32"
    sm_scale: float | None = None


def rel_error(actual: jax.Array, expected: jax.Array) -> float:
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30))


def packed_ids(rng: np.random.Generator, batch: int, length: int) -> np.ndarray:
    """Sorted segment ids with a few random boundaries per row: [B, L] int32."""
    starts = rng.random((batch, length)) < 0.15
    starts[:, 0] = False
    return np.cumsum(starts, axis=1).astype(np.int32)


def make_inputs(case: Case, seed: int = 0):
    """(q, k, v, segment_ids, cotangent) for a case; values are N(0, 1) in the case dtype."""
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(case.dtype)

    def normal(*shape):
        return jnp.asarray(rng.standard_normal(shape), jnp.float32).astype(dtype)

    q = normal(case.batch, case.q_len, case.q_heads, case.head_dim)
    k = normal(case.batch, case.kv_len, case.kv_heads, case.head_dim)
    v = normal(case.batch, case.kv_len, case.kv_heads, case.head_dim)
    cotangent = normal(case.batch, case.q_len, case.q_heads, case.head_dim)
    segment_ids = None
    if case.segments == "packed":
        segment_ids = jnp.asarray(packed_ids(rng, case.batch, case.q_len))
    elif case.segments == "pair":
        q_ids = packed_ids(rng, case.batch, case.q_len)
        if case.q_len > 2:
            q_ids[:, -2:] = 99  # segment with no keys: these rows must come out as zeros
        segment_ids = (jnp.asarray(q_ids), jnp.asarray(packed_ids(rng, case.batch, case.kv_len)))
    return q, k, v, segment_ids, cotangent


def value_and_grads(attention, case: Case, q, k, v, segment_ids, cotangent):
    """Output and d<out, cotangent>/d(q, k, v), under jit."""

    def loss(q, k, v):
        out = attention(
            q, k, v, causal=case.causal, segment_ids=segment_ids, sm_scale=case.sm_scale
        )
        return jnp.sum(out.astype(jnp.float32) * cotangent.astype(jnp.float32)), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    return out, grads


def assert_matches_reference(case: Case, seed: int = 0, **kernel_kwargs) -> None:
    """Kernel output and gradients agree with the reference within the dtype's tolerance."""
    q, k, v, segment_ids, cotangent = make_inputs(case, seed)

    def kernel(*args, **kwargs):
        return flash_attention(*args, **kwargs, **kernel_kwargs)

    out, grads = value_and_grads(kernel, case, q, k, v, segment_ids, cotangent)
    # The reference sees the same (possibly bf16) inputs but computes in float32.
    f32 = [x.astype(jnp.float32) for x in (q, k, v)]
    ref_out, ref_grads = value_and_grads(reference_attention, case, *f32, segment_ids, cotangent)
    fwd_tol, grad_tol = BF16_TOL if case.dtype == "bfloat16" else F32_TOL
    assert out.dtype == q.dtype and out.shape == q.shape
    assert rel_error(out, ref_out) <= fwd_tol, f"forward rel error {rel_error(out, ref_out)}"
    for name, grad, ref_grad, primal in zip("qkv", grads, ref_grads, (q, k, v)):
        assert grad.shape == primal.shape and grad.dtype == primal.dtype
        err = rel_error(grad, ref_grad)
        assert err <= grad_tol, f"d{name} rel error {err}"
    if case.segments == "pair" and case.q_len > 2:
        assert np.all(np.asarray(out[:, -2:]) == 0.0), "rows without keys must be zeros"
    for grad in grads:
        assert np.isfinite(np.asarray(grad, np.float32)).all()
