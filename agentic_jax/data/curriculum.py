"""The four-stage training curriculum, deterministic for a seed."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping

from agentic_jax.data import algebra, arithmetic, calculus, proof
from agentic_jax.data.problem import STAGES, KindTable, Problem

DEFAULT_SIZES: dict[str, int] = {"arithmetic": 10000, "algebra": 5000, "calculus": 3000,
                                 "proof": 1000}
_GENERATORS: dict[str, KindTable] = {
    "arithmetic": arithmetic.GENERATORS,
    "algebra": algebra.GENERATORS,
    "calculus": calculus.GENERATORS,
    "proof": proof.GENERATORS,
}
# Redraws allowed per problem before a stage is declared too small for the requested size.
_MAX_REDRAWS = 200


def kinds(stage: str) -> tuple[str, ...]:
    """The problem kinds a stage generates."""
    return tuple(_GENERATORS[stage])


def _stage_problems(stage: str, count: int, seed: int) -> list[Problem]:
    """`count` problems of one stage with distinct questions and distinct math content."""
    rng = random.Random(seed * 7919 + STAGES.index(stage))
    table = _GENERATORS[stage]
    names = list(table)
    weights = [table[name][0] for name in names]
    seen_keys: set[str] = set()
    seen_questions: set[str] = set()
    out: list[Problem] = []
    for index in range(count):
        for _ in range(_MAX_REDRAWS):
            kind = rng.choices(names, weights)[0]
            problem = table[kind][1](rng, rng.random())
            key = problem.meta["key"]
            if key not in seen_keys and problem.question not in seen_questions:
                break
        else:
            raise ValueError(f"sizes[{stage!r}]={count}: cannot generate that many distinct "
                             f"problems (stopped at {index})")
        seen_keys.add(key)
        seen_questions.add(problem.question)
        out.append(dataclasses.replace(problem, id=f"{stage}-{seed}-{index:05d}", stage=stage))
    return out


def generate_curriculum(seed: int = 0, sizes: Mapping[str, int] | None = None) -> list[Problem]:
    """Generates the curriculum: stages in order, each with distinct problems.

    Args:
      seed: the same seed gives the same problems, in any process.
      sizes: problems per stage; stages left out get none. Default `DEFAULT_SIZES`
        (arithmetic 10000, algebra 5000, calculus 3000, proof 1000).

    Returns:
      The problems, arithmetic first, then algebra, calculus and proof.
    """
    sizes = dict(DEFAULT_SIZES if sizes is None else sizes)
    for stage, count in sizes.items():
        if stage not in STAGES:
            raise ValueError(f"sizes: unknown stage {stage!r}; expected one of {STAGES}")
        if not isinstance(count, int) or count < 0:
            raise ValueError(f"sizes[{stage!r}]: expected a non-negative int, got {count!r}")
    problems: list[Problem] = []
    for stage in STAGES:
        problems += _stage_problems(stage, sizes.get(stage, 0), seed)
    return problems
