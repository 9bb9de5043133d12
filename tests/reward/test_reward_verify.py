"""verify(): range, roots, derivative, antiderivative, factoring and reference checks."""

import dataclasses

import pytest

from agentic_jax.reward import VerificationResult, verify


@dataclasses.dataclass
class FakeProblem:
    answer: str
    kind: str = ""
    stage: str = "algebra"
    meta: dict = dataclasses.field(default_factory=dict)
    tests: str = ""
    id: str = "p0"
    difficulty: float = 0.5
    question: str = ""
    solution_code: str = ""
    direct_solution: str = ""


QUADRATIC = FakeProblem(
    "[-3, 2]", "quadratic", meta={"variable": "x", "expression": "x**2 + x - 6"}
)
DERIVATIVE = FakeProblem(
    "2*x*cos(x**2)", "derivative", "calculus", {"variable": "x", "expression": "sin(x**2)"}
)
ANTIDERIVATIVE = FakeProblem(
    "x**3/3 + C", "antiderivative", "calculus", {"variable": "x", "expression": "x**2"}
)
FACTOR = FakeProblem("(x - 1)*(x + 1)", "factor", meta={"expression": "x**2 - 1"})


@pytest.mark.parametrize(
    "problem,answer,checks",
    [
        (QUADRATIC, "x = 2, x = -3", ("parse", "range", "roots", "reference")),
        (QUADRATIC, r"\{-3, 2\}", ("parse", "range", "roots", "reference")),
        (DERIVATIVE, r"2x\cos(x^2)", ("parse", "range", "derivative", "reference")),
        (ANTIDERIVATIVE, r"\frac{x^3}{3}", ("parse", "range", "antiderivative", "reference")),
        (ANTIDERIVATIVE, r"\frac{x^3 + 6}{3}", ("parse", "range", "antiderivative", "reference")),
        (FACTOR, "(x+1)(x-1)", ("parse", "range", "factored", "reference")),
        (FakeProblem("yes", "divisibility", "proof"), "Yes.", ("parse", "range", "reference")),
        (
            FakeProblem("-1/13", "linear", meta={"key": "linear:42-13*x=43"}),
            r"-\frac{1}{13}",
            ("parse", "range", "roots", "reference"),
        ),
    ],
)
def test_correct_answers_pass_every_check(problem, answer, checks):
    result = verify(problem, answer)
    assert result == VerificationResult(True, checks, "all checks passed")


@pytest.mark.parametrize(
    "problem,answer,failed_check",
    [
        (QUADRATIC, "2, 3", "roots"),
        (QUADRATIC, "2", "reference"),  # a true root, but not all of them
        (QUADRATIC, "-3, 2, 2.5", "roots"),
        (QUADRATIC, "10**10**10", "range"),
        (QUADRATIC, r"\frac{1}{0}", "range"),
        (DERIVATIVE, r"\cos(x^2)", "derivative"),
        (ANTIDERIVATIVE, "x^3", "antiderivative"),
        (FACTOR, "x^2 - 1", "factored"),  # equal, but not factored
        (FACTOR, "(x-1)^2", "factored"),
        (FakeProblem("yes", "divisibility", "proof"), "no", "reference"),
        (FakeProblem("5", "sum"), "6", "reference"),
        (FakeProblem("5", "sum"), None, "parse"),
        (FakeProblem("5", "sum"), "1" * 5000, "parse"),
    ],
)
def test_wrong_answers_fail_the_named_check(problem, answer, failed_check):
    result = verify(problem, answer)
    assert not result.ok
    assert result.checks[-1] == failed_check
    assert result.reason.startswith(failed_check + ":")


def test_decimal_roots_use_the_decimal_tolerance():
    problem = FakeProblem(r"\sqrt{2}, -\sqrt{2}", "quadratic", meta={"expression": "x**2 - 2"})
    assert verify(problem, "1.41421356237, -1.41421356237").ok
    assert not verify(problem, "1.414, -1.414").ok


def test_problem_tests_run_in_the_sandbox():
    sandbox_module = pytest.importorskip("agentic_jax.sandbox")
    problem = FakeProblem("4", "sum", tests="assert int(ANSWER) == 4, ANSWER\n")
    with sandbox_module.Sandbox(sandbox_module.SandboxConfig(timeout_ms=2000, num_workers=1)) as sb:
        good = verify(problem, "4", sandbox=sb)
        quoted = verify(problem, "4'); import os; ('", sandbox=sb)
    assert good.ok and good.checks[-1] == "tests"
    assert not quoted.ok
