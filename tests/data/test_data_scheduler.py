"""The adaptive curriculum scheduler: thresholds, mixture, sampling, checkpointable state."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from agentic_jax.data import CurriculumScheduler, SchedulerConfig, generate_curriculum

SIZES = {"arithmetic": 60, "algebra": 40, "calculus": 30, "proof": 20}
CONFIG = SchedulerConfig(threshold=0.8, window=20, min_samples=10, floor=0.2)


@pytest.fixture(scope="module")
def problems():
    return generate_curriculum(seed=4, sizes=SIZES)


def test_starts_on_the_first_stage_only(problems):
    scheduler = CurriculumScheduler(problems, CONFIG)
    assert scheduler.current_stage == "arithmetic"
    assert scheduler.mixture() == {"arithmetic": 1.0, "algebra": 0.0, "calculus": 0.0,
                                   "proof": 0.0}
    assert {p.stage for p in scheduler.sample(50)} == {"arithmetic"}


def test_advances_only_past_threshold_with_enough_samples(problems):
    scheduler = CurriculumScheduler(problems, CONFIG)
    assert not scheduler.update({"arithmetic": [1.0] * 9})  # below min_samples
    assert not scheduler.update({"arithmetic": [0.0] * 11})  # 9/20 < 0.8
    assert scheduler.accuracy("arithmetic") == pytest.approx(9 / 20)
    assert not scheduler.update({"algebra": [1.0] * 20})  # not the current stage
    assert scheduler.update([("arithmetic", 1)] * 16)  # window: last 20 -> 16/20 + 4 ones
    assert scheduler.current_stage == "algebra"
    weights = scheduler.mixture()
    assert weights == pytest.approx({"arithmetic": 0.2, "algebra": 0.8, "calculus": 0.0,
                                     "proof": 0.0})


def test_sampling_follows_the_mixture_and_walks_each_pool(problems):
    scheduler = CurriculumScheduler(problems, CONFIG)
    algebra = [p for p in problems if p.stage == "algebra"]
    scheduler.update([(p, 1.0) for p in problems if p.stage == "arithmetic"][:20])
    scheduler.update([(p, True) for p in algebra][:20])
    assert scheduler.current_stage == "calculus"
    drawn = scheduler.sample(3000)
    counts = Counter(p.stage for p in drawn)
    assert counts["calculus"] == pytest.approx(2400, abs=120)
    assert counts["arithmetic"] == pytest.approx(300, abs=80)
    assert counts["algebra"] == pytest.approx(300, abs=80)
    assert counts["proof"] == 0
    fresh = CurriculumScheduler(problems, CONFIG)
    first_epoch = fresh.sample(60)
    assert sorted(p.id for p in first_epoch) == sorted(
        p.id for p in problems if p.stage == "arithmetic")


def test_stays_on_the_last_stage(problems):
    scheduler = CurriculumScheduler(problems, CONFIG)
    for stage in ("arithmetic", "algebra", "calculus", "proof", "proof"):
        scheduler.update({stage: [1.0] * 20})
    assert scheduler.current_stage == "proof"
    assert scheduler.mixture()["proof"] == pytest.approx(0.8)


def test_ahead_shares_weight_over_the_later_stages(problems):
    config = SchedulerConfig(threshold=0.8, window=20, min_samples=10, floor=0.2, ahead=0.3)
    scheduler = CurriculumScheduler(problems, config)
    assert scheduler.mixture() == pytest.approx({"arithmetic": 0.7, "algebra": 0.1,
                                                 "calculus": 0.1, "proof": 0.1})
    counts = Counter(p.stage for p in scheduler.sample(3000))
    assert counts["arithmetic"] == pytest.approx(2100, abs=120)
    assert min(counts[s] for s in ("algebra", "calculus", "proof")) >= 220
    scheduler.update({"arithmetic": [1.0] * 20})
    assert scheduler.mixture() == pytest.approx({"arithmetic": 0.2, "algebra": 0.5,
                                                 "calculus": 0.15, "proof": 0.15})
    for stage in ("algebra", "calculus"):
        scheduler.update({stage: [1.0] * 20})
    assert scheduler.mixture() == pytest.approx({"arithmetic": 0.2 / 3, "algebra": 0.2 / 3,
                                                 "calculus": 0.2 / 3, "proof": 0.8})


def test_state_round_trips_through_json(problems):
    scheduler = CurriculumScheduler(problems, CONFIG, seed=3)
    scheduler.sample(7)
    scheduler.update({"arithmetic": [1.0] * 20})
    scheduler.sample(5)
    state = json.loads(json.dumps(scheduler.state_dict()))
    restored = CurriculumScheduler(problems, CONFIG, seed=99)
    restored.load_state_dict(state)
    assert restored.current_stage == scheduler.current_stage == "algebra"
    assert restored.accuracy("arithmetic") == 1.0
    assert [p.id for p in restored.sample(40)] == [p.id for p in scheduler.sample(40)]
    rng_a, rng_b = random.Random(1), random.Random(1)
    assert [p.id for p in restored.sample(9, rng_a)] == [p.id for p in scheduler.sample(9, rng_b)]


def test_mismatched_state_and_bad_config_are_clear_errors(problems):
    scheduler = CurriculumScheduler(problems, CONFIG)
    only_arithmetic = CurriculumScheduler([p for p in problems if p.stage == "arithmetic"])
    with pytest.raises(ValueError, match=r"state_dict\['stages'\]"):
        only_arithmetic.load_state_dict(scheduler.state_dict())
    with pytest.raises(ValueError, match="threshold"):
        SchedulerConfig(threshold=0.0)
    with pytest.raises(ValueError, match="min_samples"):
        SchedulerConfig(window=5, min_samples=6)
    with pytest.raises(ValueError, match="floor"):
        SchedulerConfig(floor=1.0)
    with pytest.raises(ValueError, match="ahead"):
        SchedulerConfig(floor=0.5, ahead=0.5)
    with pytest.raises(ValueError, match="problems"):
        CurriculumScheduler([])
