"""The curriculum generator: sizes, determinism, field contracts, difficulty, copyable code."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from collections import Counter

import pytest

from agentic_jax.data import DEFAULT_SIZES, STAGES, generate_curriculum, kinds
from agentic_jax.data.split import near_duplicate_key

_NUMBER = re.compile(r"\d+")
SMALL = {"arithmetic": 200, "algebra": 100, "calculus": 100, "proof": 60}


@pytest.fixture(scope="module")
def full():
    start = time.perf_counter()
    problems = generate_curriculum(seed=0)
    return problems, time.perf_counter() - start


def _digest(problems) -> str:
    fields = (f"{p.id}|{p.question}|{p.answer}|{p.solution_code}|{p.tests}" for p in problems)
    text = "\n".join(fields)
    return hashlib.sha256(text.encode()).hexdigest()


def test_default_sizes_stage_order_and_speed(full):
    problems, seconds = full
    counts = {s: sum(p.stage == s for p in problems) for s in STAGES}
    assert counts == DEFAULT_SIZES == {"arithmetic": 10000, "algebra": 5000, "calculus": 3000,
                                       "proof": 1000}
    assert [p.stage for p in problems] == sorted((p.stage for p in problems), key=STAGES.index)
    assert seconds < 20  # a few seconds on an idle core; generous for a shared machine


def test_ids_questions_and_content_are_unique(full):
    problems, _ = full
    assert len({p.id for p in problems}) == len(problems)
    assert len({p.question for p in problems}) == len(problems)
    assert len({near_duplicate_key(p) for p in problems}) == len(problems)


def test_fields_are_filled_and_kinds_known(full):
    problems, _ = full
    for p in problems:
        assert p.question and p.answer and p.solution_code and p.tests and p.direct_solution
        assert 0.0 <= p.difficulty <= 1.0
        assert p.kind in kinds(p.stage)
        assert "ANSWER" in p.tests
    for stage in STAGES:
        assert {p.kind for p in problems if p.stage == stage} == set(kinds(stage))


def test_same_seed_same_problems_in_any_process():
    here = _digest(generate_curriculum(seed=5, sizes=SMALL))
    assert here == _digest(generate_curriculum(seed=5, sizes=SMALL))
    assert here != _digest(generate_curriculum(seed=6, sizes=SMALL))
    script = (f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
              "from test_data_curriculum import _digest, SMALL; "
              "from agentic_jax.data import generate_curriculum; "
              "print(_digest(generate_curriculum(seed=5, sizes=SMALL)))")
    env = {**os.environ, "PYTHONHASHSEED": "123"}  # another string-hash order
    other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True, env=env)
    assert other.stdout.strip() == here


def test_sizes_argument_and_errors():
    problems = generate_curriculum(seed=1, sizes={"algebra": 7, "proof": 3})
    assert [p.stage for p in problems] == ["algebra"] * 7 + ["proof"] * 3
    with pytest.raises(ValueError, match="unknown stage 'geometry'"):
        generate_curriculum(sizes={"geometry": 1})
    with pytest.raises(ValueError, match=r"sizes\['proof'\]"):
        generate_curriculum(sizes={"proof": -1})


def test_arithmetic_difficulty_spans_easy_to_hard(full):
    problems, _ = full
    arithmetic = [p for p in problems if p.stage == "arithmetic"]
    easy = [p for p in arithmetic if p.difficulty <= 0.1]
    hard = [p for p in arithmetic if p.difficulty >= 0.9]
    assert len(easy) > 500 and len(hard) > 500
    easy_sums = [p for p in easy if p.kind == "sum"]
    assert easy_sums and all(len(n) <= 2 for p in easy_sums for n in _NUMBER.findall(p.question))
    digits = lambda group: sum(len(p.answer) for p in group) / len(group)  # noqa: E731
    assert digits(hard) > 3 * digits(easy)
    assert any(p.kind == "power" and len(p.answer) >= 25 for p in hard)
    assert any(p.kind == "product" and len(p.answer) >= 8 for p in hard)


def test_arithmetic_code_copies_the_question_expression(full):
    problems, _ = full
    for p in problems:
        if p.stage == "arithmetic" and p.kind not in ("quotient", "fraction"):
            expression = p.solution_code[len("print("):-1]
            assert p.solution_code.startswith("print(") and expression in p.question
            assert "**" in p.question or p.kind != "power"


def test_code_is_short_and_copies_the_numbers(full):
    problems, _ = full
    for p in problems:
        assert len(p.solution_code) <= 200 and p.solution_code.count("\n") <= 3, p.id
        missing = Counter(_NUMBER.findall(p.question)) - Counter(_NUMBER.findall(p.solution_code))
        assert not missing, p.id


def test_direct_solution_ends_in_the_answer(full):
    problems, _ = full
    for p in problems:
        assert "```" not in p.direct_solution and "print(" not in p.direct_solution
        tail = p.direct_solution[-(len(p.answer) + 40):]
        assert p.answer in tail, p.id
    small_sum = next(p for p in problems if p.kind == "sum" and p.difficulty == 0.0)
    assert small_sum.direct_solution.count("=") >= 3  # shows its steps


def test_true_false_statements_are_balanced(full):
    problems, _ = full
    verdicts = [p.answer for p in problems if p.answer in ("True", "False")]
    assert len(verdicts) > 500
    assert 0.35 < verdicts.count("True") / len(verdicts) < 0.65
