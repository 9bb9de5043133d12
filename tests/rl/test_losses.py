"""Loss terms: hand-computed values, masking, exact micro-batch pooling, KL estimator sign."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentic_jax.rl import (
    AGGREGATIONS,
    LossConfig,
    aggregate,
    explained_variance,
    kl_estimate,
    kl_penalized_rewards,
    logprobs_and_entropy,
    loss_terms,
    objective,
)
from agentic_jax.rl.aggregation import aggregation_denominator
from agentic_jax.rl.losses import ppo_clip_loss, reinforce_loss, value_loss


def _row(*xs):
    return jnp.asarray([xs], jnp.float32)


def test_ppo_clip_asymmetric_range_and_clip_fraction():
    cfg = LossConfig(clip_low=0.2, clip_high=0.3)
    ratio = np.array([1.5, 1.5, 0.5, 0.5, 1.1], np.float32)
    adv = _row(1.0, -1.0, 1.0, -1.0, 2.0)
    out = ppo_clip_loss(jnp.log(_row(*ratio)), jnp.zeros((1, 5)), adv, cfg)
    # A>0, r=1.5: min(1.5, 1.3) -> -1.3 (clipped); A<0, r=1.5: max(-1.5,-1.3) -> 1.5 (unclipped)
    # A>0, r=0.5: -0.5 (unclipped); A<0, r=0.5: 0.8 (clipped); in range: -2.2
    np.testing.assert_allclose(out.loss[0], [-1.3, 1.5, -0.5, 0.8, -2.2], rtol=1e-6)
    np.testing.assert_array_equal(out.clipped[0], [1, 0, 0, 1, 0])


def test_ppo_clip_zero_gradient_outside_trust_region():
    cfg = LossConfig()
    adv = _row(1.0, 1.0)

    def total(logp):
        return ppo_clip_loss(logp, jnp.zeros((1, 2)), adv, cfg).loss.sum()

    grad = jax.grad(total)(jnp.log(_row(1.5, 1.1)))
    assert grad[0, 0] == 0.0 and grad[0, 1] < 0.0


def test_dual_clip_caps_negative_advantage_loss():
    ratio = _row(10.0, 10.0, 2.0)
    adv = _row(-1.0, 1.0, -1.0)
    plain = ppo_clip_loss(jnp.log(ratio), jnp.zeros((1, 3)), adv, LossConfig())
    dual = ppo_clip_loss(jnp.log(ratio), jnp.zeros((1, 3)), adv, LossConfig(dual_clip=3.0))
    np.testing.assert_allclose(plain.loss[0], [10.0, -1.2, 2.0], rtol=1e-6)
    np.testing.assert_allclose(dual.loss[0], [3.0, -1.2, 2.0], rtol=1e-6)
    np.testing.assert_array_equal(dual.clipped[0], [1, 1, 0])


def test_reinforce_is_weighted_cross_entropy_with_the_on_policy_ppo_gradient():
    rng = np.random.default_rng(5)
    logp = jnp.asarray(-rng.random((2, 5)) * 3, jnp.float32)
    adv = jnp.asarray(rng.normal(size=(2, 5)), jnp.float32)
    cfg = LossConfig(policy_loss="reinforce")
    np.testing.assert_allclose(reinforce_loss(logp, logp * 0, adv, cfg).loss, -adv * logp)

    def total(fn, lp):
        return fn(lp, jax.lax.stop_gradient(lp), adv, cfg).loss.sum()

    np.testing.assert_allclose(
        jax.grad(lambda lp: total(reinforce_loss, lp))(logp),
        jax.grad(lambda lp: total(ppo_clip_loss, lp))(logp),
        rtol=1e-6,
    )


def test_clipped_value_loss():
    values, returns, old = _row(2.0, 0.5), _row(0.0, 0.0), _row(1.0, 1.0)
    # unclipped errors 4 and 0.25; clipped predictions 1.2 and 0.8 -> 1.44 and 0.64
    np.testing.assert_allclose(value_loss(values, returns, old, 0.2)[0], [2.0, 0.32], rtol=1e-6)
    np.testing.assert_allclose(value_loss(values, returns, None, 0.2)[0], [2.0, 0.125], rtol=1e-6)


def test_logprobs_and_entropy():
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 7)), jnp.float32)
    targets = jnp.asarray([[0, 3, 6], [1, 1, 2]], jnp.int32)
    p = jax.nn.softmax(logits)
    logprobs, entropy = logprobs_and_entropy(logits, targets)
    np.testing.assert_allclose(logprobs, jnp.log(jnp.take_along_axis(p, targets[..., None],
                                                                      -1)[..., 0]), rtol=1e-5)
    np.testing.assert_allclose(entropy, -(p * jnp.log(p)).sum(-1), rtol=1e-5)
    _, uniform = logprobs_and_entropy(jnp.zeros((1, 1, 7)), jnp.zeros((1, 1), jnp.int32))
    np.testing.assert_allclose(uniform, [[np.log(7)]], rtol=1e-6)


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_estimators_estimate_kl_policy_to_reference(estimator):
    """Sampled from pi, every estimator's mean approaches KL(pi || pi_ref) (k2 to 2nd order)."""
    pi = np.array([0.5, 0.3, 0.2])
    ref = np.array([0.45, 0.35, 0.2])
    true_kl = float((pi * np.log(pi / ref)).sum())
    tokens = np.random.default_rng(0).choice(3, size=200_000, p=pi)
    est = kl_estimate(jnp.log(pi[tokens])[None], jnp.log(ref[tokens])[None], estimator)
    assert abs(float(est.mean()) - true_kl) < 0.15 * true_kl
    if estimator == "k3":
        assert float(est.min()) >= 0.0
    with pytest.raises(ValueError, match="kl_estimator"):
        kl_estimate(jnp.zeros((1, 1)), jnp.zeros((1, 1)), "k4")


def test_kl_in_reward_only_on_model_tokens():
    logp, ref = _row(-1.0, -2.0, -0.5), _row(-1.5, -1.0, -0.5)
    mask = _row(1.0, 0.0, 1.0)
    np.testing.assert_allclose(
        kl_penalized_rewards(logp, ref, mask, 0.1, "k1")[0], [-0.05, 0.0, 0.0], atol=1e-7
    )


def test_aggregation_modes():
    per_token = _row(1.0, 2.0, 3.0, 0.0)
    per_token = jnp.concatenate([per_token, _row(4.0, 0.0, 0.0, 0.0), _row(9.0, 9.0, 9.0, 9.0)])
    mask = jnp.asarray([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], jnp.float32)
    expected = {
        "token_mean": 10.0 / 4.0,
        "sequence_mean": (2.0 + 4.0) / 2.0,
        "sequence_sum": 10.0 / 2.0,
    }
    for mode in AGGREGATIONS:
        pooled = aggregate(per_token, mask, mode)
        assert float(pooled.mean()) == pytest.approx(expected[mode]), mode
        assert float(pooled.denom) == float(aggregation_denominator(mask, mode))
    with pytest.raises(ValueError, match="aggregation"):
        aggregation_denominator(mask, "batch_mean")


def _random_terms_inputs(rng, b=6, t=9):
    mask = (rng.random((b, t)) > 0.3).astype(np.float32)
    mask[0] = 0.0  # an episode with no model token
    f = lambda scale=1.0: jnp.asarray(rng.normal(scale=scale, size=(b, t)), jnp.float32)
    return {
        "loss_mask": jnp.asarray(mask),
        "logprobs": f(0.3) - 1.0,
        "old_logprobs": f(0.3) - 1.0,
        "advantages": f(),
        "entropy": jnp.abs(f()),
        "values": f(),
        "returns": f(),
        "old_values": f(),
        "ref_logprobs": f(0.3) - 1.0,
    }


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_micro_batches_pool_exactly(aggregation):
    cfg = LossConfig(aggregation=aggregation, entropy_coef=0.01, kl_coef=0.05, dual_clip=3.0)
    x = _random_terms_inputs(np.random.default_rng(1))
    full = loss_terms(cfg, **x)
    halves = [
        loss_terms(cfg, **{k: v[s] for k, v in x.items()}) for s in (slice(0, 3), slice(3, 6))
    ]
    pooled = jax.tree.map(jnp.add, *halves)
    for name in full:
        np.testing.assert_allclose(pooled[name].mean(), full[name].mean(), rtol=1e-5, err_msg=name)
    denom = aggregation_denominator(x["loss_mask"], aggregation)
    split_objective = sum(objective(h, cfg, denom) for h in halves)
    np.testing.assert_allclose(split_objective, objective(full, cfg), rtol=1e-5)


def test_masked_tokens_excluded_from_every_term_and_gradient():
    cfg = LossConfig(entropy_coef=0.01, kl_coef=0.1)
    x = _random_terms_inputs(np.random.default_rng(2))
    off = x["loss_mask"] == 0
    junk = {
        k: jnp.where(off, -1e4 if k == "old_logprobs" else 1e4, v)
        for k, v in x.items()
        if k != "loss_mask"
    }
    junk["logprobs"] = jnp.where(off, -200.0, x["logprobs"])  # exp(ref - logp) overflows here

    def run(inputs):
        def total(logprobs, values, entropy):
            args = dict(inputs, logprobs=logprobs, values=values, entropy=entropy)
            terms = loss_terms(cfg, loss_mask=x["loss_mask"], **args)
            return objective(terms, cfg), terms

        grads, terms = jax.grad(total, argnums=(0, 1, 2), has_aux=True)(
            inputs["logprobs"], inputs["values"], inputs["entropy"]
        )
        return terms, grads

    clean_inputs = {k: v for k, v in x.items() if k != "loss_mask"}
    (clean, clean_grads), (noisy, noisy_grads) = run(clean_inputs), run(junk)
    assert set(clean) == {
        "policy_loss",
        "entropy",
        "approx_kl",
        "clip_frac",
        "logprob_mismatch",
        "value_loss",
        "kl_ref",
    }
    for name in clean:
        np.testing.assert_allclose(noisy[name].mean(), clean[name].mean(), rtol=1e-6, err_msg=name)
    for g_clean, g_noisy in zip(clean_grads, noisy_grads):
        np.testing.assert_allclose(g_noisy, g_clean, rtol=1e-6)
        assert np.all(np.asarray(g_noisy)[np.asarray(off)] == 0)


def test_on_policy_metrics_and_objective():
    cfg = LossConfig(value_coef=0.5, entropy_coef=0.01, kl_coef=0.1)
    x = _random_terms_inputs(np.random.default_rng(3))
    x["old_logprobs"] = x["logprobs"]
    terms = loss_terms(cfg, **x)
    m = x["loss_mask"]
    assert float(terms["approx_kl"].mean()) == pytest.approx(0.0, abs=1e-7)
    assert float(terms["clip_frac"].mean()) == 0.0
    np.testing.assert_allclose(
        terms["policy_loss"].mean(), -(x["advantages"] * m).sum() / m.sum(), rtol=1e-5
    )
    expected = (
        terms["policy_loss"].mean()
        - 0.01 * terms["entropy"].mean()
        + 0.5 * terms["value_loss"].mean()
        + 0.1 * terms["kl_ref"].mean()
    )
    np.testing.assert_allclose(objective(terms, cfg), expected, rtol=1e-6)
    assert "value_loss" not in loss_terms(cfg, **{k: v for k, v in x.items() if k != "values"})


def test_explained_variance():
    rng = np.random.default_rng(4)
    ret = jnp.asarray(rng.normal(size=(3, 5)), jnp.float32)
    mask = jnp.ones((3, 5)).at[:, 0].set(0.0)
    assert float(explained_variance(ret, ret, mask)) == pytest.approx(1.0)
    mean = (ret * mask).sum() / mask.sum()
    assert float(explained_variance(jnp.full_like(ret, mean), ret, mask)) == pytest.approx(
        0.0, abs=1e-5
    )
    assert float(explained_variance(ret, jnp.ones_like(ret), mask)) == 0.0


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"policy_loss": "a2c"}, "policy_loss"),
        ({"kl_estimator": "k9"}, "kl_estimator"),
        ({"aggregation": "mean"}, "aggregation"),
        ({"clip_low": 1.0}, "clip_low"),
        ({"dual_clip": 0.5}, "dual_clip"),
        ({"temperature": 0.0}, "temperature"),
    ],
)
def test_loss_config_validation(kwargs, field):
    with pytest.raises(ValueError, match=field):
        LossConfig(**kwargs)
