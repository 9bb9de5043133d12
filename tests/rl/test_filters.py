"""Episode filters: uniform groups, truncation, void turns, padding kept rows to a multiple."""

import numpy as np
import pytest

from agentic_jax.rl import (
    FilterConfig,
    episode_filter,
    kept_indices,
    mask_episodes,
    nonuniform_group_mask,
)


def test_nonuniform_group_mask():
    rewards = np.array([1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 0.2])
    group_ids = np.array([3, 3, 9, 9, 4, 4, 8])
    np.testing.assert_array_equal(
        nonuniform_group_mask(rewards, group_ids), [False, False, True, True, False, False, False]
    )
    with pytest.raises(ValueError, match="group_ids"):
        nonuniform_group_mask(rewards, group_ids[:3])


def test_episode_filter_combines_drop_and_mask():
    rewards = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    group_ids = np.array([0, 0, 1, 1, 2, 2])
    truncated = np.array([False, True, False, False, True, False])
    void = np.array([False, False, False, False, False, True])
    keep, train = episode_filter(
        FilterConfig(drop_uniform_groups=True, truncated="mask", mask_void_turns=True),
        rewards,
        group_ids,
        truncated,
        void,
    )
    np.testing.assert_array_equal(keep, [True, True, False, False, True, True])
    np.testing.assert_array_equal(train, [True, False, True, True, False, False])
    keep, train = episode_filter(FilterConfig(truncated="drop"), rewards, group_ids, truncated)
    np.testing.assert_array_equal(keep, ~truncated)
    assert train.all()
    keep, train = episode_filter(FilterConfig(), rewards, group_ids)
    assert keep.all() and train.all()


def test_episode_filter_needs_its_flags():
    with pytest.raises(ValueError, match="truncated"):
        episode_filter(FilterConfig(truncated="drop"), np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match="void_turn"):
        episode_filter(FilterConfig(mask_void_turns=True), np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match="truncated"):
        FilterConfig(truncated="clip")


def test_mask_episodes_and_kept_indices():
    loss_mask = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(
        mask_episodes(loss_mask, np.array([True, False, True])).sum(axis=1), [4, 0, 4]
    )
    idx, real = kept_indices(np.array([True, False, True, True, False]), multiple_of=4)
    np.testing.assert_array_equal(idx, [0, 2, 3, 0])
    np.testing.assert_array_equal(real, [True, True, True, False])
    idx, real = kept_indices(np.array([True, True]), multiple_of=2)
    np.testing.assert_array_equal(idx, [0, 1]) and real.all()
    idx, real = kept_indices(np.zeros(3, bool), multiple_of=4)
    assert idx.size == 0 and real.size == 0
    with pytest.raises(ValueError, match="multiple_of"):
        kept_indices(np.ones(2, bool), multiple_of=0)
