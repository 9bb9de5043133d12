"""Reference solutions and tests, run through the sandbox and judged by the grader."""

from __future__ import annotations

import pytest
from data_testing import SANDBOX_CONFIG, by_kind, check_problems, run_tests

from agentic_jax.data import STAGES, generate_curriculum, kinds
from agentic_jax.sandbox import Sandbox

SMALL = {"arithmetic": 300, "algebra": 200, "calculus": 200, "proof": 120}


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SANDBOX_CONFIG) as sb:
        yield sb


@pytest.fixture(scope="module")
def sample():
    return by_kind(generate_curriculum(seed=3, sizes=SMALL), per_kind=3)


def test_sample_of_every_kind_cross_checks(sandbox, sample):
    assert {p.kind for p in sample} == {k for stage in STAGES for k in kinds(stage)}
    assert check_problems(sandbox, sample) == []


def test_tests_accept_equivalent_spellings(sandbox, sample):
    first = {p.kind: p for p in sample}
    cases = [
        (first["fraction"], lambda a: f"\\frac{{{a.split('/')[0]}}}{{{a.split('/')[1]}}}"
         if "/" in a else a),
        (first["linear"], lambda a: f"x = {a}"),
        (first["quadratic"], lambda a: " or ".join(f"x = {r}" for r in a[1:-1].split(", ")[::-1])),
        (first["system"], lambda a: a.replace("(", "x = ").replace(", ", ", y = ").rstrip(")")),
        (first["derivative"], lambda a: f"\\boxed{{{a.replace('**', '^')}}}"),
        (first["antiderivative"], lambda a: f"{a} + C"),
        (first["divisibility"], lambda a: "yes" if a == "True" else "no"),
        (first["product"], lambda a: f"{a}."),
    ]
    answers = [spell(p.answer) for p, spell in cases]
    results = run_tests(sandbox, [p for p, _ in cases], answers)
    assert [(a, r.error) for a, r in zip(answers, results) if not r.ok] == []


def test_tests_reject_near_misses(sandbox, sample):
    first = {p.kind: p for p in sample}
    factor = first["factor"]
    repeating = next(p for p in sample if p.kind == "fraction" and _repeats(p.answer))
    expanded = factor.solution_code.split("factor(", 1)[1][:-2]
    cases = [
        (factor, expanded),  # equal but not factored
        (first["quadratic"], first["quadratic"].answer.split(", ")[0] + "]"),  # one root only
        (repeating, f"{eval_fraction(repeating.answer):.4f}"),  # 1/3 is not 0.3333
        (first["derivative"], "x"),
        (first["linear"], "not a number"),
        (first["identity"], "maybe"),
    ]
    results = run_tests(sandbox, [p for p, _ in cases], [a for _, a in cases])
    assert [(a, r.ok) for (_, a), r in zip(cases, results) if r.error != "AssertionError"] == []


def eval_fraction(text: str) -> float:
    top, _, bottom = text.partition("/")
    return int(top) / int(bottom or 1)


def _repeats(text: str) -> bool:
    """Whether the fraction's decimal expansion never ends."""
    bottom = int(text.partition("/")[2] or 1)
    for prime in (2, 5):
        while bottom % prime == 0:
            bottom //= prime
    return bottom > 1


@pytest.mark.slow
def test_all_default_problems_cross_check(sandbox):
    problems = generate_curriculum(seed=0)
    failures = []
    for start in range(0, len(problems), 500):
        failures += check_problems(sandbox, problems[start:start + 500])
    assert failures == []
