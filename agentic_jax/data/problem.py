"""The `Problem` record shared by the curriculum, the dataset sources and the trainer."""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable

STAGES: tuple[str, ...] = ("arithmetic", "algebra", "calculus", "proof")


@dataclasses.dataclass(frozen=True)
class Problem:
    """One math problem with everything needed to train on it and to check answers.

    Attributes:
      id: unique within a curriculum or source (e.g. "algebra-0-00042", "jsonl:train.jsonl:7").
      stage: curriculum stage ("arithmetic", "algebra", "calculus", "proof"), or "external"
        for problems from a dataset source.
      difficulty: a number in [0, 1] ordering problems within their stage.
      question: the natural-language question.
      answer: the canonical answer string (what `solution_code` prints, up to equivalence).
      solution_code: reference Python (sympy/numpy/math) whose last printed line is the answer.
      tests: Python source that reads the string `ANSWER` and raises AssertionError unless it is
        a correct answer; empty when the source has none.
      direct_solution: short reasoning written out without code, ending in the answer.
      kind: the problem family (e.g. "product", "quadratic", "derivative").
      meta: free-form extras; `meta["key"]` (when present) names the mathematical content so that
        rephrasings of one problem are recognised as near-duplicates.
    """

    id: str
    stage: str
    difficulty: float
    question: str
    answer: str
    solution_code: str
    tests: str
    direct_solution: str
    kind: str
    meta: dict[str, Any] = dataclasses.field(default_factory=dict, hash=False, compare=False)


def draft(kind: str, difficulty: float, question: str, answer: str, solution_code: str,
          tests: str, direct_solution: str, key: str) -> Problem:
    """A generated problem before the curriculum gives it an id and a stage.

    `key` names the mathematical content (see `Problem.meta`); difficulty is clipped to [0, 1].
    """
    return Problem(id="", stage="", difficulty=round(min(max(difficulty, 0.0), 1.0), 4),
                   question=question, answer=answer, solution_code=solution_code, tests=tests,
                   direct_solution=direct_solution, kind=kind, meta={"key": key})


# A stage's problem kinds: name -> (sampling weight, generator(rng, level in [0, 1])).
KindTable = dict[str, tuple[float, Callable[[random.Random, float], Problem]]]
