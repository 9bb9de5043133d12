"""Shared helpers of the data tests: sandbox runs, grading and deliberately wrong answers."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from fractions import Fraction

from agentic_jax.data import Problem
from agentic_jax.sandbox import Sandbox, SandboxConfig

# Generous limits: the machine running the tests is shared, and these tests check the
# curriculum, not the sandbox's time limits.
SANDBOX_CONFIG = SandboxConfig(timeout_ms=20000, memory_mb=512, num_workers=2, cache_size=0)


def grade(predicted: str, reference: str, attempts: int = 3) -> bool:
    """The project's grader. Its numeric checks stop at a wall-clock deadline and then answer
    "not equal", which a loaded test machine can hit; a true inequality stays False on every
    attempt, so a retry removes only that flake."""
    from agentic_jax.reward import grade_answer

    return any(grade_answer(predicted, reference) for _ in range(attempts))


def by_kind(problems: Sequence[Problem], per_kind: int) -> list[Problem]:
    """The first `per_kind` problems of every kind."""
    groups: dict[str, list[Problem]] = collections.defaultdict(list)
    for problem in problems:
        if len(groups[problem.kind]) < per_kind:
            groups[problem.kind].append(problem)
    return [p for group in groups.values() for p in group]


def _shift(text: str) -> str:
    return str(Fraction(text.strip()) + 1)


def wrong_answer(problem: Problem) -> str:
    """A plausible but incorrect answer of the problem's own shape."""
    answer = problem.answer
    if answer in ("True", "False"):
        return "False" if answer == "True" else "True"
    if answer.startswith("["):
        items = answer[1:-1].split(", ")
        return "[" + ", ".join(items[:-1] + [_shift(items[-1])]) + "]"
    if problem.kind == "system":
        first, second = answer[1:-1].split(", ")
        return f"({_shift(first)}, {second})"
    try:
        return _shift(answer)
    except ValueError:
        return f"{answer} + x"


def run_tests(sandbox: Sandbox, problems: Sequence[Problem], answers: Sequence[str]) -> list:
    """Runs each problem's tests against a candidate answer; returns the ExecResults."""
    programs = [f"ANSWER = {a!r}\n{p.tests}" for p, a in zip(problems, answers)]
    return sandbox.run_batch(programs)


def last_line(stdout: str) -> str:
    """The final printed line (the answer the reference code prints)."""
    lines = stdout.strip().splitlines()
    return lines[-1].strip() if lines else ""


def check_problems(sandbox: Sandbox, problems: Sequence[Problem]) -> list[str]:
    """All cross-check failures: code runs and prints a graded-correct answer, reference
    answers pass their tests, wrong answers fail them."""
    failures = []
    runs = sandbox.run_batch([p.solution_code for p in problems])
    for p, r in zip(problems, runs):
        if not r.ok:
            failures.append(f"{p.id} code: {r.error} {r.message}")
        elif not grade(last_line(r.stdout), p.answer):
            failures.append(f"{p.id} printed {last_line(r.stdout)!r}, answer {p.answer!r}")
    for p, r in zip(problems, run_tests(sandbox, problems, [p.answer for p in problems])):
        if not r.ok:
            failures.append(f"{p.id} reference {p.answer!r} fails: {r.error} {r.message}")
    wrong = [wrong_answer(p) for p in problems]
    for p, w, r in zip(problems, wrong, run_tests(sandbox, problems, wrong)):
        if r.ok or r.error != "AssertionError":
            failures.append(f"{p.id} wrong answer {w!r} gave ok={r.ok} error={r.error}")
    return failures
