r"""Accuracy and speed of the answer grader against math-verify on the project's case set.

    python tools/bench_grader.py [--cases=tests/reward/grader_cases.jsonl] [--repeats=3]

The case set (one JSON object per line) holds answer pairs in the real datasets' formats
(MATH, GSM8K, AIME, AMC, Minerva, OlympiadBench) with the expected verdict:

    {"source": "math", "predicted": "2\\frac{1}{2}", "reference": "\\frac{5}{2}", "equal": true}

and whole responses whose final answer must first be extracted:

    {"source": "gsm8k", "response": "...\n#### 72", "stated": "72", "reference": "72",
     "equal": true}

Accuracy counts cases whose verdict matches ``equal``; extraction counts responses whose
extracted answer grades equal to ``stated``. math-verify (an optional dependency) runs on the
same cases in the same process and is skipped when it is not installed; speeds are printed as
calls per second and as a ratio to ours.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable

DEFAULT_CASES = os.path.join(os.path.dirname(__file__), "..", "tests", "reward",
                             "grader_cases.jsonl")


@dataclasses.dataclass(frozen=True)
class Score:
    """Results of one grader on the case set."""

    accuracy: float                 # over all cases
    extraction: float               # over response cases
    per_source: dict[str, float]    # accuracy by dataset format
    failures: list[dict]            # the cases it got wrong
    calls_per_s: float              # grading calls (extraction included) per second


@dataclasses.dataclass(frozen=True)
class Grader:
    """A grader under test: ``extract(response) -> answer | None`` and
    ``grade(predicted, reference) -> bool``."""

    name: str
    extract: Callable[[str], object]
    grade: Callable[[object, str], bool]


def load_cases(path: str = DEFAULT_CASES) -> list[dict]:
    """The case set; each line must be a pair case or a response case (see the docstring)."""
    cases = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            case = json.loads(line)
            if not {"reference", "equal"} <= case.keys() or not (
                    "predicted" in case or {"response", "stated"} <= case.keys()):
                raise ValueError(f"{path}:{line_no}: expected reference, equal and either "
                                 "predicted or response+stated")
            cases.append(case)
    return cases


def _verdicts(grader: Grader, case: dict) -> tuple[bool, bool | None]:
    """(verdict matches ``equal``, extraction right or None for pair cases)."""
    if "predicted" in case:
        return grader.grade(case["predicted"], case["reference"]) == case["equal"], None
    answer = grader.extract(case["response"])
    extracted = answer is not None and grader.grade(answer, case["stated"])
    return grader.grade(answer, case["reference"]) == case["equal"], extracted


def score(grader: Grader, cases: list[dict], repeats: int = 1) -> Score:
    """Runs ``grader`` over ``cases`` ``repeats`` times (verdicts from the first pass)."""
    start = time.perf_counter()
    results = [_verdicts(grader, case) for case in cases]
    for _ in range(repeats - 1):
        for case in cases:
            _verdicts(grader, case)
    elapsed = time.perf_counter() - start
    by_source: dict[str, list[bool]] = defaultdict(list)
    for case, (right, _) in zip(cases, results):
        by_source[case["source"]].append(right)
    extractions = [e for _, e in results if e is not None]
    calls = repeats * sum(1 if "predicted" in c else 3 for c in cases)
    return Score(
        accuracy=sum(r for r, _ in results) / len(cases),
        extraction=sum(extractions) / max(1, len(extractions)),
        per_source={s: sum(v) / len(v) for s, v in sorted(by_source.items())},
        failures=[c for c, (right, _) in zip(cases, results) if not right],
        calls_per_s=calls / elapsed,
    )


def ours() -> Grader:
    from agentic_jax.reward import extract_answer, grade_answer

    return Grader("agentic_jax", extract_answer, grade_answer)


def math_verify() -> Grader | None:
    """math-verify's parse/verify, bare answers wrapped in ``\\boxed{}`` so its extraction sees
    them as answers; None when the package is absent."""
    try:
        import math_verify as mv
    except ImportError:
        return None

    def parsed(text: object) -> list:
        if isinstance(text, list):
            return text
        return mv.parse(text, parsing_timeout=None) if isinstance(text, str) else []

    def grade(predicted: object, reference: str) -> bool:
        pred = parsed(predicted if isinstance(predicted, list) else f"\\boxed{{{predicted}}}")
        gold = parsed(f"\\boxed{{{reference}}}")
        return bool(pred) and bool(mv.verify(gold, pred, timeout_seconds=None))

    def extract(response: str) -> list | None:
        return parsed(response) or None

    return Grader("math-verify", extract, grade)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--show-failures", action="store_true")
    args = parser.parse_args(argv)
    cases = load_cases(args.cases)
    graders = [g for g in (ours(), math_verify()) if g is not None]
    if len(graders) == 1:
        print("math-verify is not installed: measuring this grader alone")
    scores = {g.name: score(g, cases, args.repeats) for g in graders}
    base = scores["agentic_jax"]
    print(f"{len(cases)} cases from {args.cases}")
    print(f"{'grader':<12} {'accuracy':>9} {'extraction':>11} {'calls/s':>9} {'speed':>7}  "
          "per source")
    for name, s in scores.items():
        sources = " ".join(f"{k}={v:.3f}" for k, v in s.per_source.items())
        print(f"{name:<12} {s.accuracy:>9.3f} {s.extraction:>11.3f} {s.calls_per_s:>9.0f} "
              f"{s.calls_per_s / base.calls_per_s:>6.2f}x  {sources}")
        if args.show_failures:
            for case in s.failures:
                print("   wrong:", json.dumps(case, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
