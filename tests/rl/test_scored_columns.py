"""The LM head on the scored columns only (`forward.scored_columns`, `TrainBatch.scored`): the
loss mask's columns are found, padded and sized as documented; log-probs, entropies and the
update equal those of the head on every column; packed minibatches get their own."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from agentic_jax.models import Transformer, get_preset
from agentic_jax.parallel import make_mesh
from agentic_jax.rl import LossConfig, compute_logprobs, init_opt_state, make_train_step
from agentic_jax.rl import train_shardings
from agentic_jax.rl.experience import minibatches
from agentic_jax.rl.forward import SCORED_FRACTIONS, scored_columns
from agentic_jax.rl.step import TrainBatch

VOCAB, B, T = 64, 8, 32


def test_scored_columns_lists_the_mask_columns_then_padding():
    mask = np.zeros((3, 16), np.float32)
    mask[0, [0, 3, 4, 9]] = 1.0  # column 0 has no prefix and is never scored
    mask[1, 5:8] = 1.0
    scored = np.asarray(scored_columns(jnp.asarray(mask)))
    step = 16 // SCORED_FRACTIONS
    assert scored.shape == (3, step * 2)  # the longest row has 3, rounded up to 2 x 2
    assert scored[0].tolist() == [3, 4, 9, 16]
    assert scored[1].tolist() == [5, 6, 7, 16]
    assert scored[2].tolist() == [16] * 4
    full = np.asarray(scored_columns(jnp.ones((2, 16), jnp.float32)))
    assert full.shape == (2, 16) and full[0].tolist() == list(range(1, 16)) + [16]


@pytest.fixture(scope="module")
def model():
    cfg = get_preset("tiny-0.2m", vocab_size=VOCAB, num_layers=2, value_head=True)
    return nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, VOCAB, (B, T)).astype(np.int32)
    mask = np.zeros((B, T), np.float32)
    for b in range(B):  # prompts of 8-20 tokens, responses of 4-10 with a tool output inside
        start = int(rng.integers(8, 20))
        mask[b, start:start + int(rng.integers(4, 11))] = 1.0
        mask[b, start + 2] = 0.0
    return tokens, mask, rng


def test_the_head_on_scored_columns_gives_the_same_outputs(model):
    graphdef, state = model
    tokens, mask, _ = _batch()
    scored = scored_columns(jnp.asarray(mask))
    assert scored.shape[1] < T // 2  # the head runs on under half of the columns
    full = compute_logprobs(graphdef, state, jnp.asarray(tokens))
    part = compute_logprobs(graphdef, state, jnp.asarray(tokens), scored=scored)
    on = mask > 0
    for name, x, y in zip(("logprobs", "values", "entropy"), full, part):
        x, y = np.asarray(x), np.asarray(y)
        if name == "values":  # the value head runs on every column either way
            np.testing.assert_allclose(y, x, atol=1e-6)
            continue
        np.testing.assert_allclose(y[on], x[on], atol=1e-5, err_msg=name)
        assert np.all(y[~on] == 0.0), name
    # Split into micro-batches, as the old / reference passes may be.
    chunked = compute_logprobs(graphdef, state, jnp.asarray(tokens), scored=scored,
                               micro_batches=2)
    np.testing.assert_allclose(np.asarray(chunked[0]), np.asarray(part[0]), atol=1e-6)


def _train_batch(graphdef, state, scored):
    tokens, mask, rng = _batch(1)
    logprobs, values, _ = compute_logprobs(graphdef, state, jnp.asarray(tokens))
    return TrainBatch(
        tokens=jnp.asarray(tokens),
        positions=jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T)),
        loss_mask=jnp.asarray(mask),
        old_logprobs=logprobs + rng.normal(scale=0.1, size=(B, T)).astype(np.float32),
        advantages=jnp.asarray(rng.normal(size=(B, T)).astype(np.float32)),
        returns=jnp.asarray(rng.normal(size=(B, T)).astype(np.float32)),
        old_values=values, sampler_logprobs=logprobs,
        scored=scored_columns(jnp.asarray(mask)) if scored else None)


@pytest.mark.parametrize("micro_batches, on_mesh", [(1, False), (2, False), (2, True)])
def test_the_update_is_the_same(model, micro_batches, on_mesh):
    graphdef, state = model
    optimizer = optax.sgd(1.0)  # the weights move by the gradient itself
    loss = LossConfig(value_clip=0.2, entropy_coef=0.01)
    results = []
    for scored in (False, True):
        params = jax.tree.map(jnp.array, state)
        if on_mesh:
            mesh = make_mesh(2, 2, 2)
            shardings = train_shardings(params, optimizer, mesh)
            params = jax.device_put(params, shardings.state)
            opt_state = jax.jit(lambda s: init_opt_state(optimizer, s),
                                out_shardings=shardings.opt_state)(params)
            step = make_train_step(graphdef, optimizer, loss, mesh, micro_batches,
                                   shardings=shardings)
        else:
            opt_state = init_opt_state(optimizer, params)
            step = make_train_step(graphdef, optimizer, loss, micro_batches=micro_batches)
        new, _, metrics = step(params, opt_state, _train_batch(graphdef, state, scored))
        results.append((jax.tree.map(np.asarray, new), {k: float(v) for k, v in
                                                         metrics.items()}))
    (full, m_full), (part, m_part) = results
    # Not vacuous: the step reads the columns it is given (all padding: no policy loss at all).
    if micro_batches == 1 and not on_mesh:
        params = jax.tree.map(jnp.array, state)
        batch = _train_batch(graphdef, state, True)
        batch = batch.replace(scored=jnp.full_like(batch.scored, T))
        _, _, m_none = make_train_step(graphdef, optimizer, loss)(
            params, init_opt_state(optimizer, params), batch)
        assert abs(float(m_none["policy_loss"]) - m_part["policy_loss"]) > 1e-3
    for key in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac",
                "grad_norm", "logprob_mismatch", "tokens"):
        assert m_part[key] == pytest.approx(m_full[key], rel=2e-5, abs=1e-7), key
    for x, y, s in zip(jax.tree.leaves(full), jax.tree.leaves(part), jax.tree.leaves(state)):
        moved = np.abs(x - np.asarray(s)).max()
        np.testing.assert_allclose(y - np.asarray(s), x - np.asarray(s), atol=1e-4 * moved + 1e-9)


def test_packed_minibatches_score_their_own_columns(model):
    graphdef, state = model
    batch = _train_batch(graphdef, state, scored=True)
    ends = np.array([np.nonzero(np.asarray(batch.loss_mask)[b])[0].max() + 1 for b in range(B)])
    packed = list(minibatches(batch, 2, np.random.default_rng(0), lengths=ends, pack_width=64,
                              row_multiple=2))
    for mb in packed:
        mask = np.asarray(mb.loss_mask)
        assert mb.tokens.shape[1] == 64
        expected = np.asarray(scored_columns(jnp.asarray(mask)))
        np.testing.assert_array_equal(np.asarray(mb.scored), expected)
        # Every masked column of a packed row is scored.
        for row, cols in zip(mask, np.asarray(mb.scored)):
            assert set(np.nonzero(row)[0]) == set(cols[cols < 64].tolist())
