"""The Mosaic TPU kernels' semantics, run on CPU under Pallas's TPU interpret mode."""

from __future__ import annotations

import pytest
from jax.experimental.pallas import tpu as pltpu

from attention_cases import Case, assert_matches_reference

CASES = {
    "gqa2_t_lt_s_tails": Case(1, 40, 150, 4, 2, 64),
    "bf16_packed_noncausal": Case(1, 32, 32, 2, 1, 128, causal=False, segments="packed",
                                  dtype="bfloat16"),
    "decode_t1_pair_segments": Case(1, 1, 130, 2, 1, 64, segments="pair"),
}


@pytest.fixture
def tpu_interpret():
    yield pltpu.InterpretParams()
    # The interpreter keeps simulated-memory state across calls; drop it after each test.
    pltpu.reset_tpu_interpret_mode_state()


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_reference(name, tpu_interpret):
    assert_matches_reference(CASES[name], interpret=tpu_interpret, block_q=16, block_kv=128)


@pytest.mark.slow
@pytest.mark.parametrize("ratio", [1, 4, 8])
def test_sweep_causal_gqa(ratio, tpu_interpret):
    case = Case(2, 96, 256, 2 * ratio, 2, 128)
    assert_matches_reference(case, interpret=tpu_interpret, block_q=32, block_kv=128)
