"""Dynamic sampling: in-band groups are kept in draw order, draws go on until the batch is full
within the oversampling budget, out-of-band groups fill what is left, group ids renumbered."""

import dataclasses
import json
import types

import jax
import numpy as np
import pytest

from agentic_jax.rollout import Episode
from agentic_jax.rollout.engine.types import EngineStats
from agentic_jax.training.dynamic_sampling import Draw, choose_groups, collect_in_band, fold_timing

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


def test_a_steps_engine_figures_fold_over_its_rounds():
    """Phase seconds add up over the rounds; the engine's peak, pool, utilisation and the
    accelerator's idle fraction come from the rounds' counters, not from adding ratios."""
    def stats(peak, in_use, token_steps, slot_steps, decode_s):
        return EngineStats(pool_pages=1120, page_bytes=64, pages_peak=peak, pages_in_use=in_use,
                           token_steps=token_steps, slot_steps=slot_steps, steps=slot_steps // 32,
                           pages_in_use_sum=in_use * (slot_steps // 32), decode_s=decode_s)

    rounds = [stats(300, 10, 640, 3200, 4.0), stats(200, 20, 320, 320, 1.0)]
    seconds = [(8.0, 6.0), (2.0, 0.0)]    # (rollout_s, decode_s): idle 0.25, then 1.0
    draws = [Draw([], [], {}, {"rollout_s": r, "decode_s": d, "reward_s": 0.5,
                               "accelerator_idle_frac": 1 - d / r, **s.as_metrics()}, 0, s)
             for s, (r, d) in zip(rounds, seconds)]
    timing = fold_timing(draws)
    assert timing["rollout_s"] == 10.0 and timing["reward_s"] == 1.0
    assert timing["accelerator_idle_frac"] == 0.4             # 1 - 6 / 10: not 1.25, 0.625, 1.0
    assert timing["engine_pages_pool"] == 1120.0              # not 2240
    assert timing["engine_pages_peak"] == 300.0               # the larger peak, not 500
    assert timing["engine_kv_peak_frac"] == 300 / 1120
    assert timing["engine_slot_utilisation"] == 960 / 3520    # token steps / slot steps
    assert timing["engine_pages_in_use_mean"] == (10 * 100 + 20 * 10) / 110
    assert timing["time_engine_decode_s"] == 5.0
    assert rounds[0].pages_peak == 300 and rounds[0].token_steps == 640   # inputs untouched


def test_a_round_with_engine_figures_but_no_counters_is_refused():
    with pytest.raises(ValueError, match="without its counters"):
        fold_timing([Draw([], [], {}, {"rollout_s": 1.0, "engine_pages_peak": 3.0}, 0)])
    assert fold_timing([Draw([], [], {}, {"rollout_s": 1.0}, 0)]) == {"rollout_s": 1.0}


def test_every_engine_counter_has_a_way_to_fold():
    """A field added to EngineStats must say how it folds (a peak or a gauge added up was the
    bug this guards)."""
    ways = EngineStats.CONSTANTS + EngineStats.LATEST + EngineStats.PEAKS + EngineStats.COUNTS
    assert sorted(ways) == sorted(f.name for f in dataclasses.fields(EngineStats))


def test_engine_stats_fold():
    first = EngineStats(pool_pages=8, page_bytes=4, pages_peak=5, pages_in_use=3, prefill_calls=2,
                        prefill_s=1.5)
    first.fold(EngineStats(pool_pages=8, page_bytes=4, pages_peak=4, pages_in_use=1,
                           prefill_calls=1, prefill_s=0.5))
    assert (first.pool_pages, first.page_bytes, first.pages_peak, first.pages_in_use,
            first.prefill_calls, first.prefill_s) == (8, 4, 5, 1, 3, 2.0)


def test_a_run_under_dynamic_sampling_logs_the_engines_own_figures(tmp_path):
    """A training step that draws several rounds logs the engine's pool and peak as the engine
    holds them (the rounds' figures were once added up: a peak above the pool)."""
    from tests.train.train_testing import tiny_config, train

    cfg = tiny_config(**{"training.total_steps": 1, "training.warmup_steps": 0,
                         "rl.accuracy_band": (0.4, 0.6),
                         "rl.max_oversample": 3.0, "checkpoint.every_steps": 1,
                         "data.eval_size": 2})
    train(cfg, str(tmp_path))
    (record,) = [r for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())
                 if "engine_pages_pool" in r]
    assert record["dynamic_drawn_prompts"] > cfg.training.batch_size     # several rounds
    assert 0 < record["engine_pages_peak"] <= record["engine_pages_pool"]
    peak, pool = record["engine_pages_peak"], record["engine_pages_pool"]
    assert record["engine_kv_peak_frac"] == peak / pool
    assert 0 < record["engine_slot_utilisation"] <= 1
    assert 0 <= record["accelerator_idle_frac"] <= 1
