"""Train/test splitting: disjoint questions, near-duplicates removed, per-stage fractions."""

from __future__ import annotations

import dataclasses

import pytest

from agentic_jax.data import Problem, deduplicate, generate_curriculum, split_problems
from agentic_jax.data.split import normalise_question

SIZES = {"arithmetic": 400, "algebra": 200, "calculus": 150, "proof": 50}


def _external(question: str, index: int) -> Problem:
    return Problem(id=f"x{index}", stage="external", difficulty=0.0, question=question,
                   answer="1", solution_code="", tests="", direct_solution="", kind="jsonl")


def test_split_is_disjoint_per_stage_and_deterministic():
    problems = generate_curriculum(seed=2, sizes=SIZES)
    train, test = split_problems(problems, test_fraction=0.2, seed=7)
    assert len(train) + len(test) == len(problems)
    assert not {normalise_question(p.question) for p in train} & {
        normalise_question(p.question) for p in test}
    for stage, size in SIZES.items():
        assert sum(p.stage == stage for p in test) == round(0.2 * size)
    again = split_problems(problems, test_fraction=0.2, seed=7)
    assert ([p.id for p in again[0]], [p.id for p in again[1]]) == ([p.id for p in train],
                                                                    [p.id for p in test])
    other = split_problems(problems, test_fraction=0.2, seed=8)[1]
    assert {p.id for p in other} != {p.id for p in test}
    order = {p.id: i for i, p in enumerate(problems)}
    assert [order[p.id] for p in train] == sorted(order[p.id] for p in train)


def test_rephrasings_of_one_curriculum_problem_are_removed():
    original = generate_curriculum(seed=0, sizes={"arithmetic": 5})
    rephrased = dataclasses.replace(original[0], id="copy", question="Please work out: "
                                    + original[0].question, meta=dict(original[0].meta))
    train, test = split_problems(original + [rephrased], test_fraction=0.4, seed=0)
    assert "copy" not in {p.id for p in train + test}
    assert len(train) + len(test) == 5


def test_external_near_duplicates_are_removed():
    questions = ["What is 3 + 5?", "what  is 5 + 3", "What is 3 + 6?", "What is 3 + 5?",
                 "Solve 2*x**2 = 8.", "Solve 2*x^2 = 8"]
    kept = deduplicate([_external(q, i) for i, q in enumerate(questions)])
    assert [p.question for p in kept] == ["What is 3 + 5?", "What is 3 + 6?", "Solve 2*x**2 = 8."]


def test_bad_fraction_is_a_clear_error():
    with pytest.raises(ValueError, match="test_fraction"):
        split_problems([], test_fraction=1.0)
