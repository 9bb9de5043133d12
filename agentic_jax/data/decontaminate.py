"""Decontamination of training sets against evaluation sets by n-gram overlap of questions.

A training problem is contaminated when its question shares a word n-gram (n = 13, as in the
GPT-3, Tulu and Open-Reasoner-Zero reports) with the question of an evaluation problem.
Questions are compared as lower-case runs of letters and digits, so spacing, punctuation and
LaTeX braces do not hide a copy; a question shorter than n words is one n-gram of its whole
text, so short duplicates are still found.

    report = contamination_report(train, {"math500": math500, "aime24": aime24})
    logging.info(report.summary())
    kept, report = decontaminate(train, evals)       # for data.decontaminate=True
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from agentic_jax.data.problem import Problem

NGRAM = 13
MAX_EXAMPLES = 20
_WORD = re.compile(r"[a-z0-9]+")

Gram = tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Overlap:
    """One contaminated training problem: the evaluation problem it overlaps and one shared
    n-gram."""

    train_id: str
    benchmark: str
    eval_id: str
    shared: str


@dataclasses.dataclass(frozen=True)
class ContaminationReport:
    """Counts of training problems overlapping each evaluation set, with examples."""

    ngram: int
    num_train: int
    contaminated_ids: frozenset[str]
    by_benchmark: dict[str, int]     # benchmark -> training problems overlapping it
    examples: tuple[Overlap, ...]    # the first MAX_EXAMPLES overlaps

    @property
    def num_contaminated(self) -> int:
        return len(self.contaminated_ids)

    def summary(self) -> str:
        """One line for the start-up log."""
        parts = ", ".join(f"{name}: {count}" for name, count in self.by_benchmark.items())
        return (f"decontamination ({self.ngram}-grams): {self.num_contaminated} of "
                f"{self.num_train} training problems overlap an evaluation set ({parts})")


def ngrams(text: str, n: int = NGRAM) -> set[Gram]:
    """The word n-grams of ``text`` (its whole word sequence when it is shorter than n)."""
    if n < 1:
        raise ValueError(f"n-gram size must be >= 1, got {n}")
    words = _WORD.findall(text.lower())
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def _index(benchmarks: Mapping[str, Sequence[Problem]], n: int) -> dict[Gram, tuple[str, str]]:
    """n-gram -> (benchmark, problem id) of the first evaluation problem holding it."""
    index: dict[Gram, tuple[str, str]] = {}
    for name, problems in benchmarks.items():
        for problem in problems:
            for gram in ngrams(problem.question, n):
                index.setdefault(gram, (name, problem.id))
    return index


def contamination_report(train: Sequence[Problem], benchmarks: Mapping[str, Sequence[Problem]],
                         n: int = NGRAM) -> ContaminationReport:
    """Which training problems share an n-gram with any evaluation problem (each counted once
    per benchmark it overlaps)."""
    index = _index(benchmarks, n)
    by_benchmark = {name: 0 for name in benchmarks}
    contaminated: set[str] = set()
    examples: list[Overlap] = []
    for problem in train:
        hits: dict[str, tuple[str, Gram]] = {}
        for gram in ngrams(problem.question, n):
            found = index.get(gram)
            if found is not None:
                hits.setdefault(found[0], (found[1], gram))
        for name, (eval_id, gram) in hits.items():
            by_benchmark[name] += 1
            if len(examples) < MAX_EXAMPLES:
                examples.append(Overlap(problem.id, name, eval_id, " ".join(gram)))
        if hits:
            contaminated.add(problem.id)
    return ContaminationReport(n, len(train), frozenset(contaminated), by_benchmark,
                               tuple(examples))


def decontaminate(train: Sequence[Problem], benchmarks: Mapping[str, Sequence[Problem]],
                  n: int = NGRAM) -> tuple[list[Problem], ContaminationReport]:
    """The training problems that overlap no evaluation problem, and the report."""
    report = contamination_report(train, benchmarks, n)
    kept = [p for p in train if p.id not in report.contaminated_ids]
    return kept, report
