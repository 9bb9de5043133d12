"""Packed update minibatches: every episode once, whole and apart, and the same update as one
right-padded episode a row."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from agentic_jax.models import Transformer, get_preset
from agentic_jax.rl import (LossConfig, compute_logprobs, init_opt_state, make_train_step)
from agentic_jax.rl.experience import minibatches, pack_plan, pack_rows
from agentic_jax.rl.step import TrainBatch

VOCAB = 64


def test_pack_plan_places_every_episode_once_and_whole():
    lengths = np.array([30, 3, 17, 16, 1, 32, 9, 12])
    plan = pack_plan(lengths, width=32, row_multiple=4)
    assert plan.rows.shape == plan.cols.shape == plan.segment_ids.shape
    assert plan.rows.shape[0] % 4 == 0 and plan.rows.shape[1] == 32
    seen = {}
    for r in range(plan.rows.shape[0]):
        for seg in range(1, plan.segment_ids[r].max() + 1):
            where = np.flatnonzero(plan.segment_ids[r] == seg)
            episode = set(plan.rows[r, where])
            assert len(episode) == 1, "a segment holds one episode"
            (i,) = episode
            assert i not in seen, "each episode once"
            seen[i] = r
            assert np.array_equal(where, np.arange(where[0], where[0] + lengths[i]))
            assert np.array_equal(plan.cols[r, where], np.arange(lengths[i]))
    assert sorted(seen) == list(range(len(lengths)))
    # First-fit decreasing fills 120 tokens into 4 rows of 32 (the fewest possible).
    assert len(set(seen.values())) == 4
    assert (plan.segment_ids == 0).sum() == plan.rows.size - lengths.sum()


def test_pack_plan_refuses_an_episode_longer_than_a_row():
    with pytest.raises(ValueError, match="do not fit rows of 16 tokens"):
        pack_plan(np.array([4, 17]), width=16)


def _batch(lengths, width, rng):
    """A right-padded update batch: 5 prompt tokens, then the response with a tool span."""
    n = len(lengths)
    tokens = rng.integers(1, VOCAB, (n, width)).astype(np.int32)
    mask = np.zeros((n, width), np.float32)
    for i, length in enumerate(lengths):
        tokens[i, length:] = 0
        mask[i, 5:length] = 1.0
        mask[i, 7:9] = 0.0
    positions = np.broadcast_to(np.arange(width, dtype=np.int32), (n, width)).copy()
    return tokens, positions, mask


def test_packed_minibatch_gives_the_update_of_the_padded_one():
    cfg = get_preset("tiny-0.2m", vocab_size=VOCAB, num_layers=1, value_head=True)
    graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    rng = np.random.default_rng(0)
    lengths = [20, 9, 31, 12, 14, 25, 10, 18]
    tokens, positions, mask = _batch(lengths, 32, rng)
    logprobs, values, _ = compute_logprobs(graphdef, state, jnp.asarray(tokens))
    noise = rng.normal(scale=0.2, size=tokens.shape).astype(np.float32)
    batch = TrainBatch(
        tokens=jnp.asarray(tokens), positions=jnp.asarray(positions),
        loss_mask=jnp.asarray(mask), old_logprobs=logprobs + noise,
        advantages=jnp.asarray(rng.normal(size=tokens.shape).astype(np.float32)),
        returns=jnp.asarray(rng.normal(size=tokens.shape).astype(np.float32)),
        old_values=values, sampler_logprobs=logprobs)
    # Plain SGD: the new parameters are a linear function of the gradient (Adam's first step
    # would turn the noise of a zero gradient, like a key bias's, into a full step).
    optimizer = optax.sgd(0.1)
    loss = LossConfig(value_clip=0.2, entropy_coef=0.01)
    step = make_train_step(graphdef, optimizer, loss)
    order = np.random.default_rng(5)
    padded = list(minibatches(batch, 2, np.random.default_rng(5)))
    packed = list(minibatches(batch, 2, order, lengths=np.array(lengths), pack_width=48,
                              row_multiple=2))
    for a, b in zip(padded, packed, strict=True):
        assert b.segment_ids is not None and b.tokens.shape[1] == 48
        assert b.tokens.shape[0] < a.tokens.shape[0]  # fewer rows: that is the point
        assert float(b.loss_mask.sum()) == float(a.loss_mask.sum())
        fresh = [jax.tree.map(lambda x: x.copy(), state) for _ in range(2)]
        new_a, _, m_a = step(fresh[0], init_opt_state(optimizer, fresh[0]), a)
        new_b, _, m_b = step(fresh[1], init_opt_state(optimizer, fresh[1]), b)
        for key in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm",
                    "tokens"):
            np.testing.assert_allclose(float(m_b[key]), float(m_a[key]), rtol=2e-5,
                                       atol=1e-7, err_msg=key)
        for (path, x), (_, y) in zip(nnx.to_flat_state(new_a), nnx.to_flat_state(new_b),
                                     strict=True):
            np.testing.assert_allclose(np.asarray(y), np.asarray(x), atol=1e-6,
                                       err_msg=str(path))


def test_packing_without_segments_would_mix_episodes():
    """The check above is not vacuous: without segment ids a packed row's later episodes
    attend to the earlier ones, and the log-probs change."""
    cfg = get_preset("tiny-0.2m", vocab_size=VOCAB, num_layers=1, value_head=True)
    graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    rng = np.random.default_rng(1)
    lengths = [12, 9, 14, 10]
    tokens, positions, mask = _batch(lengths, 16, rng)
    zeros = jnp.zeros(tokens.shape, jnp.float32)
    batch = TrainBatch(tokens=jnp.asarray(tokens), positions=jnp.asarray(positions),
                       loss_mask=jnp.asarray(mask), old_logprobs=zeros, advantages=zeros,
                       returns=zeros)
    plan = pack_plan(np.array(lengths), width=32)
    packed = pack_rows(batch, jnp.asarray(plan.rows), jnp.asarray(plan.cols),
                       jnp.asarray(plan.segment_ids))
    ref, _, _ = compute_logprobs(graphdef, state, batch.tokens, batch.positions)
    apart, _, _ = compute_logprobs(graphdef, state, packed.tokens, packed.positions,
                                   packed.segment_ids)
    mixed, _, _ = compute_logprobs(graphdef, state, packed.tokens, packed.positions)
    keep = np.asarray(packed.loss_mask) > 0
    expected = np.asarray(ref)[plan.rows, plan.cols][keep]
    np.testing.assert_allclose(np.asarray(apart)[keep], expected, atol=1e-5)
    assert np.abs(np.asarray(mixed)[keep] - expected).max() > 1e-3


def test_packed_row_count_pads_little_and_meets_few_counts():
    from agentic_jax.rl.experience import packed_row_count

    assert [packed_row_count(r) for r in (1, 7, 15)] == [1, 7, 15]     # below 16: exact
    assert packed_row_count(17) == 18        # not 24: a padding row costs a filled one's time
    assert packed_row_count(33) == 36 and packed_row_count(65) == 72
    for multiple in (1, 2, 4, 8, 12):
        for rows in range(1, 300):
            count = packed_row_count(rows, multiple)
            assert count >= rows and count % multiple == 0
            if multiple == 1:
                assert count - rows < max(1, rows / 8)
    # An octave of row counts compiles the train step 8 times at most.
    for low in (16, 32, 64, 128):
        counts = {packed_row_count(r) for r in range(low + 1, 2 * low + 1)}
        assert counts == set(range(low + low // 8, 2 * low + 1, low // 8))
    assert packed_row_count(0) == 1
