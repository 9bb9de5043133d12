"""Off-policy importance weights: exactly 1 on-policy, a hand-computed off-policy case at token
and sequence level with truncation and masking, and the mismatch metrics."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from agentic_jax.rl import losses
from agentic_jax.rl.off_policy import (
    OffPolicyConfig,
    importance_weights,
    mismatch_metrics,
    weight_metrics,
)

MASK = jnp.asarray([[0.0, 1.0, 1.0, 1.0]])
SAMPLER = jnp.zeros((1, 4))
# The trainer's (proximal) log-probs against the sampler's 0: ratios 1/2, 2 and 4.
TRAINER = jnp.log(jnp.asarray([[1.0, 0.5, 2.0, 4.0]]))


@pytest.mark.parametrize("cfg", [
    OffPolicyConfig("token"), OffPolicyConfig("sequence"),
    OffPolicyConfig("token", is_cap=2.0, is_mask=3.0),
    OffPolicyConfig("sequence", is_cap=1.0, is_mask=1.5)])
def test_on_policy_weights_are_exactly_one(cfg):
    lp = jnp.asarray(np.random.default_rng(0).normal(size=(3, 7)), jnp.float32)
    mask = jnp.asarray(np.random.default_rng(1).integers(0, 2, size=(3, 7)), jnp.float32)
    w = importance_weights(lp, lp, mask, cfg)
    np.testing.assert_array_equal(np.asarray(w.weights), np.asarray(mask))
    m = {k: float(v) for k, v in weight_metrics(w, mask).items()}
    assert m == {"is_weight_mean": 1.0, "is_weight_max": 1.0, "is_clipped_frac": 0.0,
                 "is_masked_frac": 0.0}
    assert {k: float(v) for k, v in mismatch_metrics(lp, lp, mask).items()} == {
        "mismatch_kl": 0.0, "mismatch_max_abs": 0.0}


def test_token_level_hand_computed():
    w = importance_weights(TRAINER, SAMPLER, MASK, OffPolicyConfig("token"))
    np.testing.assert_allclose(w.weights, [[0.0, 0.5, 2.0, 4.0]], rtol=1e-6)
    capped = importance_weights(TRAINER, SAMPLER, MASK, OffPolicyConfig("token", is_cap=3.0))
    np.testing.assert_allclose(capped.weights, [[0.0, 0.5, 2.0, 3.0]], rtol=1e-6)
    assert capped.clipped.tolist() == [[False, False, False, True]]
    # |log w| > log 3 drops the ratio-4 token only (1/2 and 2 lie inside [1/3, 3]).
    masked = importance_weights(TRAINER, SAMPLER, MASK,
                                OffPolicyConfig("token", is_cap=3.0, is_mask=3.0))
    np.testing.assert_allclose(masked.weights, [[0.0, 0.5, 2.0, 0.0]], rtol=1e-6)
    assert masked.masked.tolist() == [[False, False, False, True]]
    assert not masked.clipped.any()
    m = {k: float(v) for k, v in weight_metrics(masked, MASK).items()}
    assert m["is_weight_mean"] == pytest.approx(1.25) and m["is_weight_max"] == pytest.approx(2)
    assert m["is_masked_frac"] == pytest.approx(1 / 3) and m["is_clipped_frac"] == 0.0


def test_sequence_level_hand_computed():
    # The row's weight is the product of its token ratios: 1/2 * 2 * 4 = 4.
    w = importance_weights(TRAINER, SAMPLER, MASK, OffPolicyConfig("sequence"))
    np.testing.assert_allclose(w.weights, [[0.0, 4.0, 4.0, 4.0]], rtol=1e-6)
    capped = importance_weights(TRAINER, SAMPLER, MASK, OffPolicyConfig("sequence", is_cap=2.5))
    np.testing.assert_allclose(capped.weights, [[0.0, 2.5, 2.5, 2.5]], rtol=1e-6)
    masked = importance_weights(TRAINER, SAMPLER, MASK, OffPolicyConfig("sequence", is_mask=3.))
    np.testing.assert_array_equal(masked.weights, [[0.0, 0.0, 0.0, 0.0]])


def test_mismatch_metrics_hand_computed():
    m = mismatch_metrics(TRAINER, SAMPLER, MASK)
    k3 = [(r - 1) - math.log(r) for r in (0.5, 2.0, 4.0)]
    assert float(m["mismatch_kl"]) == pytest.approx(sum(k3) / 3, rel=1e-5)
    assert float(m["mismatch_max_abs"]) == pytest.approx(math.log(4), rel=1e-6)


def test_weights_scale_the_policy_loss_only():
    cfg = losses.LossConfig()
    adv = jnp.asarray([[0.0, 1.0, -1.0, 0.5]])
    lp = TRAINER + 0.1
    w = importance_weights(TRAINER, SAMPLER, MASK, OffPolicyConfig("token")).weights
    plain = losses.loss_terms(cfg, MASK, lp, TRAINER, adv, jnp.ones((1, 4)))
    weighted = losses.loss_terms(cfg, MASK, lp, TRAINER, adv, jnp.ones((1, 4)), is_weights=w)
    per_token = losses.ppo_clip_loss(lp, TRAINER, adv, cfg).loss
    assert float(weighted["policy_loss"].sum) == pytest.approx(float((per_token * w).sum()))
    assert float(plain["policy_loss"].sum) == pytest.approx(float((per_token * MASK).sum()))
    assert float(weighted["entropy"].sum) == float(plain["entropy"].sum)


@pytest.mark.parametrize("kwargs, message", [
    ({"is_level": "row"}, "is_level: expected one of"),
    ({"is_cap": 0.5}, "is_cap: expected 0"),
    ({"is_mask": 1.0}, "is_mask: expected 0")])
def test_bad_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        OffPolicyConfig(**kwargs)
