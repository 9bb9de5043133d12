"""Dynamic sampling: in-band groups are kept in draw order, draws go on until the batch is full
within the oversampling budget, out-of-band groups fill what is left, group ids renumbered."""

import types

import jax
import numpy as np

from agentic_jax.rollout import Episode
from agentic_jax.training.dynamic_sampling import Draw, choose_groups, collect_in_band

GROUP = 2


def test_choose_groups():
    acc = np.asarray([0.0, 0.5, 1.0, 0.5, 0.0, 1.0])
    chosen = choose_groups(acc, (0.1, 0.9), 2)
    assert chosen.groups.tolist() == [1, 3] and chosen.in_band == 2
    short = choose_groups(acc, (0.1, 0.9), 4)     # two in band, then the last two outside
    assert short.groups.tolist() == [1, 3, 4, 5] and short.in_band == 2
    assert choose_groups(acc, (0.0, 1.0), 3).groups.tolist() == [0, 1, 2]


def _run(batch_size, band, max_oversample):
    cfg = types.SimpleNamespace(
        rl=types.SimpleNamespace(group_size=GROUP, accuracy_band=band,
                                 max_oversample=max_oversample),
        training=types.SimpleNamespace(batch_size=batch_size))
    return types.SimpleNamespace(cfg=cfg)


def _drawer(outcomes):
    """draw(key, n): the next n groups of ``outcomes`` (per group, its episodes' correctness)."""
    calls = []

    def draw(key, n):
        start = sum(c[1] for c in calls)
        calls.append((key, n))
        groups = outcomes[start:start + n]
        correct = np.asarray([c for g in groups for c in g], np.float32)
        episodes = [Episode(prompt_tokens=[start * GROUP + i], group_id=i // GROUP,
                            correct=bool(c)) for i, c in enumerate(correct)]
        return Draw(episodes, [f"p{start * GROUP + i}" for i in range(len(episodes))],
                    {"correct": correct}, {"rollout_s": 1.0}, 0)

    return draw, calls


def test_draws_until_full_and_renumbers():
    outcomes = [(0, 0), (1, 0), (1, 1), (0, 0), (0, 1), (1, 0)]
    draw, calls = _drawer(outcomes)
    key = jax.random.key(0)
    episodes, problems, table, timing, counts = collect_in_band(
        _run(3, (0.1, 0.9), 3.0), key, draw)
    # Round 1: 3 prompts, one in band (group 1); round 2: 2 more, one in band (group 4);
    # round 3: 1 more (group 5), in band.
    assert [n for _, n in calls] == [3, 2, 1]
    assert calls[0][0] is key
    assert [e.prompt_tokens[0] for e in episodes] == [2, 3, 8, 9, 10, 11]
    assert [e.group_id for e in episodes] == [0, 0, 1, 1, 2, 2]
    assert problems == ["p2", "p3", "p8", "p9", "p10", "p11"]
    assert len(table["correct"]) == 12 and timing["rollout_s"] == 3.0
    assert counts == {"dynamic_drawn_prompts": 6.0, "dynamic_in_band_groups": 3.0,
                      "dynamic_filled_groups": 0.0}


def test_budget_bounds_the_draws_and_fills():
    outcomes = [(0, 0), (1, 1), (0, 1), (1, 1), (0, 0), (0, 0)]
    draw, calls = _drawer(outcomes)
    episodes, _, _, _, counts = collect_in_band(_run(2, (0.1, 0.9), 2.0), jax.random.key(0),
                                                draw)
    assert sum(n for _, n in calls) == 4        # max_oversample 2 x batch_size 2
    # Group 2 is the only one in band; the last out-of-band group drawn (3) fills the batch.
    assert [e.prompt_tokens[0] for e in episodes] == [4, 5, 6, 7]
    assert counts == {"dynamic_drawn_prompts": 4.0, "dynamic_in_band_groups": 1.0,
                      "dynamic_filled_groups": 1.0}
