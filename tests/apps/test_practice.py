"""Adaptive practice: difficulty and stage follow each learner's own recent accuracy."""

import pytest

from agentic_jax.apps import practice
from agentic_jax.apps.practice import Learner


@pytest.fixture(scope="module")
def pool():
    return practice.practice_pool(seed=0)


def _session(learner, is_right, n):
    """n problems answered by a simulated learner; the difficulties they were given."""
    given = []
    for _ in range(n):
        p = learner.next_problem()
        given.append((p.stage, p.difficulty))
        learner.answer(p.answer if is_right(p) else "no idea")
    return given


def test_a_strong_learner_gets_harder_problems_and_moves_on(pool):
    learner = Learner(pool)
    given = _session(learner, lambda p: True, 30)
    first = [d for _, d in given[:5]]
    assert [s for s, _ in given[:5]] == ["arithmetic"] * 5 and first == sorted(first)
    assert learner.scheduler.current_stage != "arithmetic"
    for stage in ("arithmetic", learner.scheduler.current_stage):
        drawn = [d for s, d in given if s == stage]
        assert drawn[-1] > drawn[0] + 0.3, (stage, drawn)
    assert learner.progress()["recent_accuracy"] == 1.0


def test_a_struggling_learner_gets_easier_problems(pool):
    learner = Learner(pool, practice.PracticeConfig(start_level=0.6))
    given = _session(learner, lambda p: False, 20)
    assert all(s == "arithmetic" for s, _ in given)
    assert given[-1][1] < 0.1 and learner.levels["arithmetic"] == 0.0


def test_the_level_settles_where_the_learner_starts_failing(pool):
    learner = Learner(pool, practice.PracticeConfig(stage_threshold=1.0, window=8))
    given = _session(learner, lambda p: p.difficulty < 0.5, 80)
    late = [d for _, d in given[-30:]]
    assert 0.3 < sum(late) / len(late) < 0.65


def test_learners_are_independent_and_their_state_round_trips(pool):
    strong, weak = Learner(pool), Learner(pool)
    _session(strong, lambda p: True, 10)
    _session(weak, lambda p: False, 10)
    assert strong.levels["arithmetic"] > weak.levels["arithmetic"]
    copy = Learner(pool)
    copy.load_state_dict(strong.state_dict())
    assert copy.progress() == strong.progress()
    assert copy.next_problem().id == strong.next_problem().id


def test_answers_are_graded_by_equivalence(pool):
    learner = Learner(pool)
    p = learner.next_problem()
    feedback = learner.answer(f"so the answer is \\boxed{{{p.answer}}}")
    assert feedback.correct and feedback.reference == p.answer
    with pytest.raises(ValueError, match="no problem"):
        learner.answer("1")
