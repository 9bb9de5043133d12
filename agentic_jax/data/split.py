"""Train/test splits with no question shared and near-duplicates removed."""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Sequence

from agentic_jax.data.problem import Problem

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_NOISE = re.compile(r"[\s.,;:!?]+")


def normalise_question(question: str) -> str:
    """Case, whitespace, punctuation and `**` vs `^` no longer matter."""
    return _NOISE.sub(" ", question.casefold().replace("**", "^")).strip()


def near_duplicate_key(problem: Problem) -> str:
    """What two problems share when one is a rephrasing of the other.

    Curriculum problems carry their mathematical content in `meta["key"]` (operands of
    commutative operations already sorted). Other problems fall back to their normalised text
    with the numbers taken out and sorted, so "3 + 5" and "5 + 3" collide.
    """
    key = problem.meta.get("key") if problem.meta else None
    if key:
        return f"{problem.stage}|{key}"
    text = normalise_question(problem.question)
    numbers = sorted(_NUMBER.findall(text))
    return f"{_NUMBER.sub('#', text)}|{' '.join(numbers)}"


def deduplicate(problems: Sequence[Problem]) -> list[Problem]:
    """Keeps the first problem of each question text and of each near-duplicate key."""
    seen: set[str] = set()
    kept = []
    for problem in problems:
        keys = {"q:" + normalise_question(problem.question), "k:" + near_duplicate_key(problem)}
        if keys & seen:
            continue
        seen |= keys
        kept.append(problem)
    if len(kept) < len(problems):
        logging.info("removed %d near-duplicate problems of %d", len(problems) - len(kept),
                     len(problems))
    return kept


def split_problems(problems: Sequence[Problem], test_fraction: float = 0.1,
                   seed: int = 0) -> tuple[list[Problem], list[Problem]]:
    """Splits into (train, test) per stage, after removing near-duplicates.

    Each stage contributes round(test_fraction * its size) problems to the test split, so
    both splits cover every stage. Problems keep their original order within a split.
    """
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction: expected a value in [0, 1), got {test_fraction}")
    kept = deduplicate(problems)
    by_stage: dict[str, list[int]] = {}
    for index, problem in enumerate(kept):
        by_stage.setdefault(problem.stage, []).append(index)
    test_indices: set[int] = set()
    for stage, indices in sorted(by_stage.items()):
        rng = random.Random(f"{seed}:{stage}")
        shuffled = list(indices)
        rng.shuffle(shuffled)
        test_indices.update(shuffled[: round(test_fraction * len(indices))])
    train = [p for i, p in enumerate(kept) if i not in test_indices]
    test = [p for i, p in enumerate(kept) if i in test_indices]
    return train, test
