"""Old log-probs from the update's own forward (`TrainBatch.old_logprobs` None): for the one
optimizer step of a batch it is the same update as with a pass of their own before it, and the
sampler-trainer mismatch metrics come from that forward. (Where a run chooses it:
tests/train/test_old_logprobs_choice.py.)"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from agentic_jax.models import Transformer, get_preset
from agentic_jax.rl import LossConfig, compute_logprobs, init_opt_state
from agentic_jax.rl import make_train_step
from agentic_jax.rl.experience import ExperienceConfig
from agentic_jax.rl.off_policy import OffPolicyConfig, mismatch_metrics

VOCAB, B, T = 64, 8, 16
GRPO = LossConfig(clip_low=0.2, clip_high=0.28, value_coef=0.0, value_clip=None)


@pytest.fixture(scope="module")
def setup():
    cfg = get_preset("tiny-0.2m", vocab_size=VOCAB, num_layers=2)
    graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, (B, T)).astype(np.int32)
    mask = np.zeros((B, T), np.float32)
    mask[:, 5:15] = 1.0
    mask[:, 8:10] = 0.0  # a tool-output span inside the response
    mask[2, 11:] = 0.0
    old, _, _ = compute_logprobs(graphdef, state, jnp.asarray(tokens))
    batch = {
        "tokens": tokens,
        "positions": np.broadcast_to(np.arange(T, dtype=np.int32), (B, T)).copy(),
        "loss_mask": mask,
        # The sampler rounds differently from the trainer.
        "sampler_logprobs": np.asarray(old) + rng.normal(scale=0.05, size=(B, T)).astype(
            np.float32),
        "advantages": np.repeat(rng.normal(size=(B, 1)), T, axis=1).astype(np.float32),
        "returns": np.zeros((B, T), np.float32),
    }
    return graphdef, jax.tree.map(np.asarray, state), np.asarray(old), batch


def _step(setup, old_logprobs, micro_batches):
    graphdef, host_state, _, batch = setup
    # Plain gradient descent: the weights move by the gradient itself (Adam's first step,
    # about lr * sign(g), would magnify float rounding in gradients near 0).
    optimizer = optax.sgd(1.0)
    state = jax.tree.map(jnp.asarray, host_state)
    opt_state = init_opt_state(optimizer, state)
    step = make_train_step(graphdef, optimizer, GRPO, micro_batches=micro_batches)
    new, _, metrics = step(state, opt_state, dict(batch, old_logprobs=old_logprobs))
    return jax.tree.map(np.asarray, new), {k: float(v) for k, v in metrics.items()}


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_the_update_is_the_one_a_pass_of_their_own_gives(setup, micro_batches):
    _, host_state, old, batch = setup
    recomputed, m_recomputed = _step(setup, old, micro_batches)
    own, m_own = _step(setup, None, micro_batches)
    moved = max(float(np.abs(a - b).max()) for a, b in zip(
        jax.tree.leaves(recomputed), jax.tree.leaves(host_state)))
    assert moved > 1e-3  # the step changed the weights...
    for a, b, c in zip(jax.tree.leaves(own), jax.tree.leaves(recomputed),
                       jax.tree.leaves(host_state)):
        step = np.abs(b - c).max()
        np.testing.assert_allclose(a - c, b - c, atol=1e-4 * step + 1e-9)  # ... alike
    for key in ("loss", "policy_loss", "grad_norm", "entropy", "logprob_mismatch", "tokens"):
        assert m_own[key] == pytest.approx(m_recomputed[key], rel=1e-5, abs=1e-7), key
    assert m_own["approx_kl"] == 0.0 and m_own["clip_frac"] == 0.0
    # The mismatch the experience pass measures, now measured by the update's forward.
    expected = {k: float(v) for k, v in mismatch_metrics(
        jnp.asarray(old), jnp.asarray(batch["sampler_logprobs"]),
        jnp.asarray(batch["loss_mask"])).items()}
    assert expected["mismatch_kl"] > 1e-4
    assert m_own["mismatch_kl"] == pytest.approx(expected["mismatch_kl"], rel=1e-4)
    assert m_own["mismatch_max_abs"] == pytest.approx(expected["mismatch_max_abs"], rel=1e-4)
    assert "mismatch_kl" not in m_recomputed  # the experience pass reports it there


def test_importance_weights_need_old_logprobs(setup):
    _, _, _, batch = setup
    with pytest.raises(ValueError, match="importance weights need"):
        _step((setup[0], setup[1], setup[2], dict(batch, is_weights=np.ones((B, T),
                                                                              np.float32))),
              None, 1)


def test_the_experience_config_refuses_what_needs_them():
    with pytest.raises(ValueError, match="importance weights"):
        ExperienceConfig(estimator="grpo", off_policy=OffPolicyConfig(is_level="token"),
                         recompute_old_logprobs=False)
    with pytest.raises(ValueError, match="GAE"):
        ExperienceConfig(estimator="gae", recompute_old_logprobs=False)
    assert dataclasses.replace(ExperienceConfig(estimator="grpo"),
                               recompute_old_logprobs=False).needs_old_logprobs() == ""
