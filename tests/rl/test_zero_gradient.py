"""A batch whose loss has an exactly zero gradient (every trained token's advantage 0, no other
loss term: a GRPO step where every group got one reward) is updated without the forward and
backward passes (`make_zero_gradient_step`): the same weights and optimizer state as the full
step, momentum and weight decay included."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agentic_jax.models import Transformer, get_preset
from agentic_jax.rl import LossConfig, init_opt_state, make_optimizer, make_train_step
from agentic_jax.rl.step import make_zero_gradient_step
from agentic_jax.training import update as update_lib
from agentic_jax.training.update import zero_gradient

VOCAB, B, T = 64, 8, 16
GRPO = LossConfig(clip_low=0.2, clip_high=0.28, value_coef=0.0, value_clip=None)


def _batch(advantages):
    rng = np.random.default_rng(0)
    mask = np.zeros((B, T), np.float32)
    mask[:, 5:15] = 1.0
    mask[:, 8:10] = 0.0  # a tool-output span inside the response
    return {
        "tokens": rng.integers(0, VOCAB, (B, T)).astype(np.int32),
        "positions": np.broadcast_to(np.arange(T, dtype=np.int32), (B, T)).copy(),
        "loss_mask": mask,
        "old_logprobs": rng.normal(-4.0, 0.3, (B, T)).astype(np.float32),
        "advantages": advantages.astype(np.float32),
        "returns": np.zeros((B, T), np.float32),
    }


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_the_zero_gradient_step_is_the_full_step_of_a_zero_advantage_batch(weight_decay):
    cfg = get_preset("tiny-0.2m", vocab_size=VOCAB, num_layers=2)
    graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    optimizer = make_optimizer(1e-2, warmup_steps=2, total_steps=10,
                               weight_decay=weight_decay)
    full = make_train_step(graphdef, optimizer, GRPO)
    zero = make_zero_gradient_step(optimizer)
    opt_state = init_opt_state(optimizer, state)
    # One step with a gradient first: Adam's moments hold momentum the next steps still apply.
    signal = np.repeat(np.random.default_rng(1).normal(size=(B, 1)), T, axis=1)
    state, opt_state, _ = full(state, opt_state, _batch(signal))
    copy = lambda tree: jax.tree.map(jnp.array, tree)  # noqa: E731 (the steps donate)
    a_state, a_opt = copy(state), copy(opt_state)
    b_state, b_opt = copy(state), copy(opt_state)
    nothing = _batch(np.zeros((B, T)))
    for _ in range(3):
        a_state, a_opt, metrics = full(a_state, a_opt, nothing)
        assert float(metrics["grad_norm"]) == 0.0 and float(metrics["skipped"]) == 0.0
        b_state, b_opt, lr = zero(b_state, b_opt)
        assert float(lr) == pytest.approx(float(metrics["lr"]))
    for a, b in zip(_leaves(a_state) + _leaves(a_opt), _leaves(b_state) + _leaves(b_opt)):
        np.testing.assert_array_equal(a, b)
    # and the weights did move (momentum), so the comparison above could fail
    moved = [np.abs(x - y).max() for x, y in zip(_leaves(a_state), _leaves(state))]
    assert max(moved) > 0


def _fields(**kw):
    none = dict(ref_logprobs=None, old_logprobs=None, sampler_logprobs=None, is_weights=None)
    return types.SimpleNamespace(**(none | kw))


def test_which_batches_have_a_zero_gradient():
    mask = np.zeros((2, 6), np.float32)
    mask[:, 2:5] = 1.0
    adv = np.zeros((2, 6), np.float32)
    batch = _fields(advantages=adv, loss_mask=mask)
    assert zero_gradient(batch, GRPO)
    adv[1, 5] = 0.7          # an advantage on a position the loss does not train
    assert zero_gradient(batch, GRPO)
    adv[0, 3] = 1e-9         # on a trained one, however small
    assert not zero_gradient(batch, GRPO)
    adv[0, 3] = 0.0
    assert not zero_gradient(batch, LossConfig(value_coef=0.0, entropy_coef=0.01))
    assert not zero_gradient(batch, LossConfig(value_coef=0.5))
    assert zero_gradient(batch, LossConfig(value_coef=0.0, kl_coef=0.1))   # no reference
    with_ref = _fields(advantages=adv, loss_mask=mask, ref_logprobs=adv)
    assert not zero_gradient(with_ref, LossConfig(value_coef=0.0, kl_coef=0.1))
    # a non-finite log-prob or weight where the loss trains: the full step decides (its loss
    # is NaN and it skips the update); outside the trained positions it does not matter
    old = np.full((2, 6), -2.0, np.float32)
    old[0, 0] = -np.inf
    assert zero_gradient(_fields(advantages=adv, loss_mask=mask, old_logprobs=old), GRPO)
    old[1, 3] = -np.inf
    assert not zero_gradient(_fields(advantages=adv, loss_mask=mask, old_logprobs=old), GRPO)
    weights = np.ones((2, 6), np.float32)
    weights[0, 2] = np.nan
    assert not zero_gradient(_fields(advantages=adv, loss_mask=mask, is_weights=weights), GRPO)


def test_a_zero_gradient_update_logs_the_mean_rate_of_its_optimizer_steps():
    """ppo_epochs x minibatches optimizer steps, as the full update takes; its lr metric is
    their mean, as the full update's is."""
    rates = iter([1.0, 2.0, 3.0, 6.0])
    calls = []

    def zero_step_fn(params, opt_state):
        calls.append(1)
        return params + 1, opt_state, jnp.float32(next(rates))

    training = types.SimpleNamespace(ppo_epochs=2, minibatches=2)
    run = types.SimpleNamespace(cfg=types.SimpleNamespace(training=training),
                                zero_step_fn=zero_step_fn)
    state = types.SimpleNamespace(params=0, opt_state=None,
                                  replace=lambda **kw: types.SimpleNamespace(**kw))
    batch = _fields(loss_mask=np.ones((4, 3), np.float32))
    result = update_lib._zero_gradient_update(run, state, batch, {"kept_frac": 1.0})
    assert len(calls) == 4 and result.state.params == 4
    assert result.metrics["lr"] == 3.0 and result.metrics["tokens"] == 6.0
    assert result.metrics["zero_gradient"] == 1.0 and result.metrics["kept_frac"] == 1.0
    assert "approx_kl" in result.metrics        # old log-probs are the update's own: ratio 1
