"""The update's batch: trimmed to the longest episode, with the same numbers as untrimmed."""

import dataclasses

import numpy as np
import pytest
from flax import nnx

from agentic_jax.models import Transformer, get_preset
from agentic_jax.rl.experience import ExperienceConfig, make_train_batch
from agentic_jax.rollout import Episode, RolloutBatch


def _episodes(lengths, rng):
    episodes = []
    for n in lengths:
        ep = Episode(prompt_tokens=list(rng.integers(1, 50, 5)))
        ep.add_model_tokens(rng.integers(1, 50, n - 2), [-1.0] * (n - 2), [0.0] * (n - 2))
        ep.add_tool_tokens([7, 8])
        episodes.append(ep)
    return episodes


def _graded(episodes, rewards, group_ids):
    for ep, r, g in zip(episodes, rewards, group_ids, strict=True):
        ep.reward, ep.group_id = float(r), int(g)
    return episodes


def _batch(lengths, width=64):
    rng = np.random.default_rng(0)
    episodes = _graded(_episodes(lengths, rng), rng.normal(size=len(lengths)),
                       [0, 0, 1, 1][: len(lengths)])
    return RolloutBatch.from_episodes(episodes, length=width, pad_id=0)


def test_trimmed_cuts_to_a_multiple_of_the_longest_episode():
    batch = _batch([9, 20, 13, 4])  # longest: 5 prompt + 20 response = 25 tokens
    cut = batch.trimmed(16)
    assert cut.tokens.shape == (4, 32) and cut.loss_mask.shape == (4, 32)
    assert cut.sampler_logprobs.shape == (4, 32) and cut.rewards.shape == (4,)
    np.testing.assert_array_equal(cut.tokens, batch.tokens[:, :32])
    assert batch.loss_mask[:, 32:].sum() == 0  # only padding was dropped
    assert batch.trimmed(0) is batch
    assert batch.trimmed(128).tokens.shape == (4, 64)  # never wider than the batch


def test_trimmed_batch_gives_the_same_advantages_and_logprobs():
    cfg = get_preset("tiny-0.2m", vocab_size=64, value_head=True)
    graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    batch = _batch([9, 20, 13, 4])
    base = ExperienceConfig(estimator="gae", length_multiple=0)
    full, _ = make_train_batch(batch, base, graphdef=graphdef, state=state)
    cut, _ = make_train_batch(batch, dataclasses.replace(base, length_multiple=16),
                              graphdef=graphdef, state=state)
    assert full.tokens.shape == (4, 64) and cut.tokens.shape == (4, 32)
    for name in ("loss_mask", "old_logprobs", "advantages", "returns", "old_values"):
        a, b = np.asarray(getattr(full, name)), np.asarray(getattr(cut, name))
        mask = np.asarray(full.loss_mask)
        np.testing.assert_allclose(b * mask[:, :32], a[:, :32] * mask[:, :32], atol=1e-5,
                                   err_msg=name)
        assert np.all(a[:, 32:] * mask[:, 32:] == 0), name


@pytest.mark.parametrize("multiple", [1, 8])
def test_trimmed_keeps_every_episode_token(multiple):
    batch = _batch([30, 3], width=48)
    cut = batch.trimmed(multiple)
    assert cut.tokens.shape[1] >= int(batch.lengths.max())
    assert cut.tokens.shape[1] % multiple == 0
    assert cut.loss_mask.sum() == batch.loss_mask.sum()


def test_padding_rows_do_not_weigh_in_group_statistics():
    cfg = get_preset("tiny-0.2m", vocab_size=64, value_head=True)
    graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    rng = np.random.default_rng(1)
    episodes = _graded(_episodes([9, 12, 10], rng), [1.0, 0.0, 0.0], [0, 0, 0])
    batch = RolloutBatch.from_episodes(episodes, length=32, pad_id=0)
    base = ExperienceConfig(estimator="grpo")
    exact, _ = make_train_batch(batch, base, graphdef=graphdef, state=state)
    padded, _ = make_train_batch(batch, dataclasses.replace(base, row_multiple=4),
                                 graphdef=graphdef, state=state)
    assert exact.tokens.shape[0] == 3 and padded.tokens.shape[0] == 4
    assert float(np.asarray(padded.loss_mask)[3].sum()) == 0.0  # the repeat is masked out
    np.testing.assert_allclose(np.asarray(padded.advantages)[:3], np.asarray(exact.advantages),
                               atol=1e-6)
