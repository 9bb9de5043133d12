"""Scores of sampled answers on a benchmark: avg@k, unbiased pass@k, maj@k, bootstrap 95%
intervals, and the same per subject and level. Pure Python and NumPy; grading is
``agentic_jax.reward.grade_answer``.

With n samples of a problem of which c are correct:

    avg@n  = c / n                                     (mean accuracy of one sample)
    pass@k = 1 - C(n - c, k) / C(n, k)                  (unbiased; Chen et al. 2021, k <= n)
    maj@n  = [the largest class of equivalent answers is correct]

Answers are put in one class when the grader finds them equivalent ("1/2", "0.5" and
"\\frac12" vote together); a response without an answer does not vote, and ties go to the
class seen first. Each benchmark figure is the mean over problems; its 95% interval is the
2.5th-97.5th percentile of that mean over ``num_resamples`` bootstrap resamples of the problems.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from agentic_jax.reward import extract_answer, grade_answer

Grade = Callable[[str | None, str], bool]
NUM_RESAMPLES = 1000


@dataclasses.dataclass(frozen=True)
class Sample:
    """One sampled response to a problem; ``answer`` None means: extract it from ``response``."""

    response: str
    answer: str | None = None
    tool_calls: int = 0
    used_code: bool = False
    response_length: int = 0  # tokens


@dataclasses.dataclass(frozen=True)
class ProblemScore:
    """The graded samples of one problem."""

    answers: tuple[str | None, ...]  # [n] extracted answers
    correct: tuple[bool, ...]        # [n] each sample graded against the reference
    majority_correct: bool           # the majority class's answer is correct


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n - c, k) / C(n, k)."""
    if not 0 < k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 < k <= n and 0 <= c <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority_answer(answers: Sequence[str | None], grade: Grade = grade_answer) -> str | None:
    """The representative of the largest class of grader-equivalent answers (first seen wins
    ties); None when no sample has an answer."""
    representatives: list[str] = []
    counts: list[int] = []
    for answer in answers:
        if answer is None:
            continue
        index = next((i for i, rep in enumerate(representatives) if grade(answer, rep)), None)
        if index is None:
            representatives.append(answer)
            counts.append(1)
        else:
            counts[index] += 1
    if not counts:
        return None
    return representatives[int(np.argmax(counts))]  # argmax takes the first of equal counts


def score_problem(samples: Sequence[Sample], reference: str,
                  grade: Grade = grade_answer) -> ProblemScore:
    """Extracts (where needed) and grades every sample, and the majority vote."""
    answers = tuple(s.answer if s.answer is not None else extract_answer(s.response)
                    for s in samples)
    correct = tuple(grade(a, reference) for a in answers)
    majority = majority_answer(answers, grade)
    return ProblemScore(answers, correct, majority is not None and grade(majority, reference))


def wilson_interval(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95% for z = 1.96) of an accuracy of ``correct`` of ``n``."""
    if n < 1 or not 0 <= correct <= n:
        raise ValueError(f"wilson_interval: expected 0 <= correct <= n, n >= 1, got {correct}, "
                         f"{n}")
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def difference_interval(correct_a: int, n_a: int, correct_b: int, n_b: int,
                        z: float = 1.96) -> tuple[float, float]:
    """Newcombe's interval (method 10: Wilson intervals combined) of the difference of two
    independent accuracies, b - a. On the same problems (paired) it is conservative."""
    pa, pb = correct_a / n_a, correct_b / n_b
    la, ua = wilson_interval(correct_a, n_a, z)
    lb, ub = wilson_interval(correct_b, n_b, z)
    d = pb - pa
    return (d - math.sqrt((pb - lb) ** 2 + (ua - pa) ** 2),
            d + math.sqrt((ub - pb) ** 2 + (pa - la) ** 2))


class Paired(NamedTuple):
    """Two evaluations of the same problems, one outcome each (right or wrong)."""

    n: int
    both: int      # right in both
    only_a: int    # right in a only
    only_b: int    # right in b only
    difference: float  # accuracy of b - accuracy of a
    interval: tuple[float, float]  # 95% (Newcombe's paired method 10)
    p_value: float  # exact two-sided McNemar test: the discordant pairs split as by chance


def paired_difference(correct_a: Sequence[bool], correct_b: Sequence[bool],
                      z: float = 1.96) -> Paired:
    """Accuracy of b minus accuracy of a on the same problems (row i of both is problem i), with
    Newcombe's interval for paired proportions (1998, method 10: the two Wilson intervals
    combined with the phi correlation of the 2 x 2 table) and the exact McNemar p-value. Only
    the problems one got right and the other wrong move the difference, so this interval is
    narrower than `difference_interval`'s when the two agree on most problems."""
    a, b = np.asarray(correct_a, bool), np.asarray(correct_b, bool)
    if a.shape != b.shape or a.ndim != 1 or not a.size:
        raise ValueError(f"paired_difference: expected two equal, non-empty lists of outcomes, "
                         f"got shapes {a.shape} and {b.shape}")
    n = int(a.size)
    both, only_a, only_b = int(np.sum(a & b)), int(np.sum(a & ~b)), int(np.sum(~a & b))
    neither = n - both - only_a - only_b
    pa, pb = (both + only_a) / n, (both + only_b) / n
    la, ua = wilson_interval(both + only_a, n, z)
    lb, ub = wilson_interval(both + only_b, n, z)
    margins = (both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither)
    phi = (both * neither - only_a * only_b) / math.sqrt(margins) if margins else 0.0
    d = pb - pa
    lower = math.sqrt(max(0.0, (pb - lb) ** 2 - 2 * phi * (pb - lb) * (ua - pa)
                          + (ua - pa) ** 2))
    upper = math.sqrt(max(0.0, (ub - pb) ** 2 - 2 * phi * (ub - pb) * (pa - la)
                          + (pa - la) ** 2))
    discordant = only_a + only_b
    tail = sum(math.comb(discordant, i) for i in range(min(only_a, only_b) + 1))
    p_value = min(1.0, 2 * tail / 2 ** discordant) if discordant else 1.0
    return Paired(n, both, only_a, only_b, d, (max(-1.0, d - lower), min(1.0, d + upper)),
                  p_value)


def paired_outcomes(a: Mapping[str, int], b: Mapping[str, int]) -> Paired:
    """`paired_difference` of two evaluations' outcomes (problem id -> right (1) or wrong (0),
    as ``eval_<split>.json`` stores them under ``outcomes``); both must hold the same
    problems."""
    if a.keys() != b.keys():
        raise ValueError(f"paired comparison: the evaluations hold different problems ("
                         f"{len(a.keys() - b.keys())} only in the first, "
                         f"{len(b.keys() - a.keys())} only in the second)")
    if any(v not in (0, 1) for v in (*a.values(), *b.values())):
        raise ValueError("paired comparison: expected one sample per problem (outcomes 0 or "
                         "1); evaluate with --num_samples=1")
    ids = sorted(a)
    return paired_difference([bool(a[i]) for i in ids], [bool(b[i]) for i in ids])


class Pooled(NamedTuple):
    """B - A over several pairs of evaluations of the same problems (seeds of one recipe)."""

    n: int            # problems
    pairs: int        # pairs of evaluations
    difference: float  # the mean over pairs of accuracy of b - accuracy of a
    interval: tuple[float, float]  # 95%, over problems, the pairs held fixed


def pooled_paired_outcomes(pairs: Sequence[tuple[Mapping[str, int], Mapping[str, int]]],
                           z: float = 1.96) -> Pooled:
    """`paired_outcomes` pooled over ``pairs`` (a, b) of evaluations of the same problems, e.g.
    a recipe's warm start and RL result for each of its seeds: each problem's b - a is averaged
    over the pairs, and the 95% interval is the normal one of the mean of those per-problem
    differences. It says how far the problems drawn could move the mean gain of these runs,
    not how far another seed's run could land (two or three seeds cannot measure that)."""
    if not pairs:
        raise ValueError("pooled comparison: expected at least one pair of evaluations")
    ids = sorted(pairs[0][0])
    diffs = []
    for a, b in pairs:
        paired_outcomes(a, b)      # the same problems in both, one 0 / 1 outcome each
        if sorted(a) != ids:
            raise ValueError("pooled comparison: the pairs hold different problems")
        diffs.append([int(b[i]) - int(a[i]) for i in ids])
    d = np.mean(np.asarray(diffs, float), axis=0)
    mean = float(d.mean())
    half = z * float(d.std(ddof=1)) / math.sqrt(d.size) if d.size > 1 else 1.0
    return Pooled(int(d.size), len(pairs), mean, (max(-1.0, mean - half), min(1.0, mean + half)))


def _interval(values: np.ndarray, resamples: np.ndarray) -> list[float]:
    """95% bootstrap interval of the mean of ``values`` [P] over ``resamples`` [B, P]."""
    means = values[resamples].mean(axis=1)
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def summarize(scores: Sequence[ProblemScore], *, num_resamples: int = NUM_RESAMPLES,
              seed: int = 0) -> dict:
    """avg@K, pass@1..pass@K, maj@K (K = samples per problem) and their ``ci95`` intervals."""
    if not scores:
        raise ValueError("no problems to summarize")
    n = len(scores[0].correct)
    if n == 0 or any(len(s.correct) != n for s in scores):
        raise ValueError("every problem needs the same, non-zero number of samples")
    counts = np.array([sum(s.correct) for s in scores])
    per_problem = {f"avg@{n}": counts / n}
    for k in range(1, n + 1):
        per_problem[f"pass@{k}"] = np.array([pass_at_k(n, int(c), k) for c in counts])
    per_problem[f"maj@{n}"] = np.array([float(s.majority_correct) for s in scores])
    rng = np.random.default_rng(seed)
    resamples = rng.integers(0, len(scores), size=(num_resamples, len(scores)))
    result: dict = {"num_problems": len(scores), "num_samples": n}
    result.update({name: float(v.mean()) for name, v in per_problem.items()})
    result["ci95"] = {name: _interval(v, resamples) for name, v in per_problem.items()}
    extracted = [a is not None for s in scores for a in s.answers]
    result["extraction_rate"] = sum(extracted) / len(extracted)
    return result


def breakdown(scores: Sequence[ProblemScore], keys: Sequence[object], **kwargs) -> dict:
    """``summarize`` per group of problems: ``keys[i]`` is problem i's subject, level, ...;
    problems whose key is None or "" are left out."""
    groups: dict[str, list[ProblemScore]] = {}
    for score, key in zip(scores, keys, strict=True):
        if key not in (None, ""):
            groups.setdefault(str(key), []).append(score)
    return {key: summarize(group, **kwargs) for key, group in sorted(groups.items())}


def usage(samples: Sequence[Sequence[Sample]]) -> Mapping[str, float]:
    """Code use, tool calls and response length averaged over every sample."""
    flat = [s for problem in samples for s in problem]
    if not flat:
        return {"code_use_rate": 0.0, "tool_calls": 0.0, "response_length": 0.0}
    return {
        "code_use_rate": sum(s.used_code for s in flat) / len(flat),
        "tool_calls": sum(s.tool_calls for s in flat) / len(flat),
        "response_length": sum(s.response_length for s in flat) / len(flat),
    }
