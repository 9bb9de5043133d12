"""Advantage estimators against direct per-episode loops over model tokens."""

import hypothesis.strategies as st
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from agentic_jax.rl import ADVANTAGE_ESTIMATORS, AdvantageConfig, get_advantage_estimator


def _episode_mask(rng, batch, length):
    """Prompt (mask 0), then model tokens with tool-output spans (mask 0), then padding."""
    mask = np.zeros((batch, length), np.float32)
    for b in range(batch):
        start, end = rng.integers(1, 4), rng.integers(length - 4, length)
        mask[b, start:end] = 1.0
        tool = rng.integers(start + 1, end - 1)
        mask[b, tool : tool + rng.integers(1, 3)] = 0.0
    return mask


def _gae_loop(rewards, mask, values, token_rewards, gamma, lam):
    adv = np.zeros_like(mask)
    for b in range(mask.shape[0]):
        idx = np.flatnonzero(mask[b])
        r = token_rewards[b, idx].copy()
        r[-1] += rewards[b]
        v = np.append(values[b, idx], 0.0)
        running = 0.0
        for i in reversed(range(len(idx))):
            running = r[i] + gamma * v[i + 1] - v[i] + gamma * lam * running
            adv[b, idx[i]] = running
    return adv


def _discounted_returns_loop(rewards, mask, token_rewards, gamma):
    out = np.zeros_like(mask)
    for b in range(mask.shape[0]):
        idx = np.flatnonzero(mask[b])
        r = token_rewards[b, idx].copy()
        r[-1] += rewards[b]
        running = 0.0
        for i in reversed(range(len(idx))):
            running = r[i] + gamma * running
            out[b, idx[i]] = running
    return out


@pytest.fixture
def episodes():
    rng = np.random.default_rng(0)
    b, t = 6, 20
    mask = _episode_mask(rng, b, t)
    return {
        "rewards": rng.normal(size=b).astype(np.float32),
        "mask": mask,
        "values": rng.normal(size=(b, t)).astype(np.float32),
        "token_rewards": rng.normal(scale=0.1, size=(b, t)).astype(np.float32),
    }


def test_registry_names_and_unknown_name():
    assert set(ADVANTAGE_ESTIMATORS) == {"gae", "grpo", "reinforce_pp"}
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'"):
        get_advantage_estimator("ppo")


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0)])
def test_gae_matches_loop_and_skips_tool_tokens(episodes, gamma, lam):
    e = episodes
    cfg = AdvantageConfig(gamma=gamma, lam=lam, whiten=False)
    adv, ret = get_advantage_estimator("gae")(
        jnp.asarray(e["rewards"]),
        jnp.asarray(e["mask"]),
        cfg,
        values=jnp.asarray(e["values"]),
        token_rewards=jnp.asarray(e["token_rewards"]),
    )
    expected = _gae_loop(e["rewards"], e["mask"], e["values"], e["token_rewards"], gamma, lam)
    np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, (expected + e["values"]) * e["mask"], rtol=1e-5, atol=1e-5)
    assert np.all(np.asarray(adv)[e["mask"] == 0] == 0)


def test_gae_ignores_values_and_rewards_on_masked_tokens(episodes):
    e = episodes
    noisy_values = np.where(e["mask"] > 0, e["values"], 1e3)
    noisy_token_rewards = np.where(e["mask"] > 0, e["token_rewards"], -1e3)
    cfg = AdvantageConfig(gamma=0.97, lam=0.9, whiten=False)
    fn = get_advantage_estimator("gae")
    clean = fn(e["rewards"], e["mask"], cfg, values=e["values"], token_rewards=e["token_rewards"])
    noisy = fn(e["rewards"], e["mask"], cfg, values=noisy_values, token_rewards=noisy_token_rewards)
    np.testing.assert_allclose(clean[0], noisy[0], rtol=1e-6)
    np.testing.assert_allclose(clean[1], noisy[1], rtol=1e-6)


def test_gae_whitening_and_missing_values(episodes):
    e = episodes
    adv, _ = get_advantage_estimator("gae")(
        e["rewards"], e["mask"], AdvantageConfig(gamma=0.99, lam=0.95), values=e["values"]
    )
    valid = np.asarray(adv)[e["mask"] > 0]
    assert abs(valid.mean()) < 1e-5 and abs(valid.std() - 1.0) < 1e-3
    with pytest.raises(ValueError, match="values"):
        get_advantage_estimator("gae")(e["rewards"], e["mask"], AdvantageConfig())


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=3, max_size=12), st.floats(-3, 3))
def test_gae_monte_carlo_limit(values, reward):
    """gamma = lam = 1, no tool tokens: A_t = R - V_t (the Monte Carlo advantage)."""
    v = np.asarray(values, np.float32)[None]
    mask = np.ones_like(v)
    adv, ret = get_advantage_estimator("gae")(
        np.asarray([reward], np.float32), mask, AdvantageConfig(whiten=False), values=v
    )
    np.testing.assert_allclose(adv, reward - v, atol=1e-4)
    np.testing.assert_allclose(ret, np.full_like(v, reward), atol=1e-4)


def test_grpo_group_normalisation_with_arbitrary_ids():
    rewards = np.array([1.0, 0.0, 5.0, 0.0, 1.0, 5.0, 2.0], np.float32)
    group_ids = np.array([42, 42, 7, 42, 42, 7, 3])  # interleaved, arbitrary ids
    mask = np.ones((7, 4), np.float32)
    mask[:, 0] = 0.0
    adv, ret = get_advantage_estimator("grpo")(
        rewards, mask, AdvantageConfig(eps=0.0), group_ids=group_ids
    )
    a = np.asarray(adv)[:, 1]
    # group 42: mean 0.5, unbiased std sqrt(1/3): +-0.5 * sqrt(3)
    np.testing.assert_allclose(
        a[[0, 1, 3, 4]], np.array([1, -1, -1, 1]) * 0.5 * np.sqrt(3), rtol=1e-5
    )
    assert np.all(a[[2, 5]] == 0) and a[6] == 0  # all-equal group, singleton group
    assert np.all(np.asarray(adv)[:, 0] == 0)
    np.testing.assert_allclose(np.asarray(ret)[:, 2], rewards)
    centred, _ = get_advantage_estimator("grpo")(
        rewards, mask, AdvantageConfig(normalize_std=False), group_ids=group_ids
    )
    np.testing.assert_allclose(np.asarray(centred)[[0, 1], 1], [0.5, -0.5])


def test_grpo_requires_group_ids():
    with pytest.raises(ValueError, match="group_ids"):
        get_advantage_estimator("grpo")(np.zeros(2), np.ones((2, 3)), AdvantageConfig())


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_pp_discounted_and_batch_normalised(episodes, gamma):
    e = episodes
    adv, ret = get_advantage_estimator("reinforce_pp")(
        e["rewards"],
        e["mask"],
        AdvantageConfig(gamma=gamma, eps=0.0),
        token_rewards=e["token_rewards"],
    )
    expected = _discounted_returns_loop(e["rewards"], e["mask"], e["token_rewards"], gamma)
    np.testing.assert_allclose(ret, expected, rtol=1e-5, atol=1e-5)
    valid = expected[e["mask"] > 0]
    whitened = (expected - valid.mean()) / valid.std() * e["mask"]
    np.testing.assert_allclose(adv, whitened, rtol=1e-4, atol=1e-4)


def test_reinforce_pp_group_baseline_removes_per_prompt_offsets(episodes):
    e = episodes
    group_ids = np.array([0, 0, 1, 1, 2, 2])
    offsets = np.array([10.0, 10.0, -3.0, -3.0, 0.5, 0.5], np.float32)
    cfg = AdvantageConfig(gamma=0.95, baseline="group")
    fn = get_advantage_estimator("reinforce_pp")
    base = fn(e["rewards"], e["mask"], cfg, group_ids=group_ids)[0]
    shifted = fn(e["rewards"] + offsets, e["mask"], cfg, group_ids=group_ids)[0]
    np.testing.assert_allclose(base, shifted, atol=1e-4)
    plain = fn(e["rewards"] + offsets, e["mask"], AdvantageConfig(gamma=0.95))[0]
    assert not np.allclose(plain, base, atol=1e-2)
    with pytest.raises(ValueError, match="baseline"):
        fn(e["rewards"], e["mask"], AdvantageConfig(baseline="critic"))


def test_grpo_uniform_group_is_exactly_zero_without_eps():
    rewards = np.full(3, 0.1, np.float32)  # 0.1 * 3 / 3 != 0.1 in float32
    adv, _ = get_advantage_estimator("grpo")(
        rewards, np.ones((3, 2), np.float32), AdvantageConfig(eps=0.0), group_ids=np.zeros(3)
    )
    assert np.all(np.asarray(adv) == 0)
