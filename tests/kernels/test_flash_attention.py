"""flash_attention (GPU kernels in Pallas interpret mode) against the reference attention."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentic_jax.kernels import flash_attention, reference_attention
from attention_cases import Case, assert_matches_reference, make_inputs, rel_error

CASES = {
    "mha_t_lt_s_tails": Case(2, 40, 56, 4, 4, 64),
    "decode_t1_gqa8": Case(1, 1, 37, 8, 1, 64),
    "packed_gqa2_noncausal": Case(2, 48, 48, 4, 2, 64, causal=False, segments="packed"),
    "t_gt_s_gqa4_d128": Case(1, 33, 20, 4, 1, 128, sm_scale=0.3),
    "pair_segments_empty_rows": Case(1, 24, 40, 2, 1, 64, segments="pair"),
    "bf16_packed_gqa2_d128": Case(2, 64, 64, 4, 2, 128, segments="packed", dtype="bfloat16"),
    "bf16_noncausal_t_lt_s": Case(1, 17, 80, 2, 1, 64, causal=False, dtype="bfloat16"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_reference(name):
    assert_matches_reference(CASES[name], interpret=True, block_q=16, block_kv=16)


def _random_case(seed: int) -> Case:
    rng = np.random.default_rng(seed)
    kv_heads = int(rng.choice([1, 2]))
    return Case(
        batch=1,
        q_len=int(rng.integers(1, 70)),
        kv_len=int(rng.integers(1, 70)),
        q_heads=kv_heads * int(rng.choice([1, 2, 4, 8])),
        kv_heads=kv_heads,
        head_dim=64,
        causal=bool(rng.integers(2)),
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_random_shapes(seed):
    assert_matches_reference(_random_case(seed), seed=seed, interpret=True, block_q=16, block_kv=32)


@pytest.mark.slow  # the random-shape cases check the kernel against the reference by default
def test_default_blocks_and_vmap():
    """Default tile sizes, and vmap over an extra leading axis through the custom VJP."""
    case = Case(2, 24, 24, 2, 1, 64)
    q, k, v, _, cotangent = make_inputs(case)
    # Stack along a new axis 0 by splitting the batch.
    qs, ks, vs, cs = (x[:, None] for x in (q, k, v, cotangent))

    def loss(attention, q, k, v, c):
        return jnp.sum(attention(q, k, v, causal=True) * c)

    def kernel(q, k, v, causal):
        return flash_attention(q, k, v, causal=causal, interpret=True)

    grad_fn = jax.vmap(jax.grad(loss, argnums=(1, 2, 3)), in_axes=(None, 0, 0, 0, 0))
    grads = grad_fn(kernel, qs, ks, vs, cs)
    ref = grad_fn(reference_attention, qs, ks, vs, cs)
    for grad, ref_grad in zip(grads, ref):
        assert rel_error(grad, ref_grad) <= 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("ratio", [1, 2, 4, 8])
@pytest.mark.parametrize("causal", [True, False])
def test_sweep_gqa_lengths(ratio, causal):
    for q_len, kv_len in [(128, 128), (1, 128), (96, 128), (128, 72)]:
        case = Case(2, q_len, kv_len, 2 * ratio, 2, 128, causal=causal)
        assert_matches_reference(case, interpret=True, block_q=32, block_kv=32)
