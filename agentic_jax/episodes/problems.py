"""The problems a run draws from: curriculum or dataset files, the held-out split, the
evaluation benchmarks (and the overlap of the training set with them), and the prompts."""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Sequence
from typing import Any

from agentic_jax.config import ConfigError, RunConfig
from agentic_jax.data import Problem
from agentic_jax.data.benchmarks import load_benchmarks
from agentic_jax.data.decontaminate import contamination_report, decontaminate
from agentic_jax.data.sources import load_source
from agentic_jax.inference.prompts import encode_prompt  # noqa: F401  (the run's prompts)

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Problems:
    train: list[Problem]
    test: list[Problem]
    stages: list[str]  # every stage name the run can see, sorted (the same on every host)
    benchmarks: dict[str, list[Problem]]  # eval.benchmarks by name
    # warmstart.disjoint: the warm start's own problems, none of them in ``train`` (empty: the
    # warm start draws from ``train``).
    warmstart: list[Problem] = dataclasses.field(default_factory=list)

    def every(self) -> list[Problem]:
        return (self.train + self.warmstart + self.test
                + [x for rows in self.benchmarks.values() for x in rows])


def load_problems(cfg: RunConfig, benchmarks: bool = True) -> Problems:
    """The run's training and held-out problems and its benchmarks (decontaminated on request;
    ``benchmarks`` False: none loaded, nothing decontaminated)."""
    d = cfg.data
    if d.source == "curriculum":
        def pick(split: str) -> list[Problem]:
            problems = load_source("curriculum", split=split, seed=cfg.seed,
                                   test_fraction=d.test_fraction)
            return [p for p in problems
                    if p.stage in d.stages and p.difficulty <= d.max_difficulty
                    and (not d.kinds or p.kind in d.kinds)]
        train, test = pick("train"), pick("test")
    else:
        def load(split: str) -> list[Problem]:
            return load_source(d.source, split=split, seed=cfg.seed,
                               test_fraction=d.test_fraction, levels=d.levels or None)
        train, test = load("train"), load("test")
    benchmarks = benchmark_problems(cfg) if benchmarks else {}
    # A dataset's own held-out split is checked beside the benchmarks (the curriculum's splits
    # are disjoint by construction). The overlap is logged either way; with data.decontaminate
    # it is also dropped.
    evals = {**({"held-out": test} if d.source != "curriculum" and test else {}), **benchmarks}
    if evals:
        if d.decontaminate:
            train, report = decontaminate(train, evals)
        else:
            report = contamination_report(train, evals)
        logger.info("%s%s", report.summary(), "; dropped" if d.decontaminate else "")
    warmstart: list[Problem] = []
    if cfg.warmstart.enabled and cfg.warmstart.disjoint and train:
        train, warmstart = set_aside(train, cfg.warmstart.steps * cfg.warmstart.batch_size,
                                     cfg.seed)
        logger.info("warm start: %d problems set aside, RL draws from the other %d (no problem "
                    "in both)", len(warmstart), len(train))
    if not train:
        raise ConfigError(f"data: no training problems for data.source={d.source!r}, "
                          f"data.stages={d.stages}")
    test = held_out(test, d.eval_size) if test else train[:d.eval_size]
    return Problems(train, test, sorted({p.stage for p in train + test}), benchmarks, warmstart)


def set_aside(train: list[Problem], count: int, seed: int) -> tuple[list[Problem], list[Problem]]:
    """(the rest, ``count`` problems drawn from ``train`` with ``seed``), each in ``train``'s
    order. Problems with reference code are drawn first, so that tool-using examples can be
    made of them; at least one problem is always left to the rest."""
    if len(train) < 2:
        raise ConfigError(f"warmstart.disjoint: {len(train)} training problem(s) cannot be "
                          "split between the warm start and RL")
    order = list(range(len(train)))
    random.Random(seed).shuffle(order)
    order.sort(key=lambda i: not train[i].solution_code)  # stable: the shuffle within each
    chosen = set(order[:min(count, len(train) - 1)])
    return ([p for i, p in enumerate(train) if i not in chosen],
            [p for i, p in enumerate(train) if i in chosen])


def benchmark_problems(cfg: RunConfig) -> dict[str, list[Problem]]:
    """The run's ``eval.benchmarks`` by name, each cut at ``eval.limit`` problems."""
    benchmarks = load_benchmarks(cfg.eval.specs)
    if cfg.eval.limit:
        benchmarks = {name: rows[:cfg.eval.limit] for name, rows in benchmarks.items()}
    return benchmarks


def held_out(test: list[Problem], size: int) -> list[Problem]:
    """The first ``size`` held-out problems, taken from the stages in turn (each stage's own
    order kept), so a run over several stages evaluates every one of them; with one stage this
    is ``test[:size]``. A stage with fewer problems than its share leaves its turns to the rest.
    """
    by_stage: dict[str, list[Problem]] = {}
    for problem in test:
        by_stage.setdefault(problem.stage, []).append(problem)
    queues = list(by_stage.values())
    out: list[Problem] = []
    depth = 0
    while len(out) < size and any(depth < len(q) for q in queues):
        out += [q[depth] for q in queues if depth < len(q)][:size - len(out)]
        depth += 1
    return out


def check_prompts(cfg: RunConfig, tokenizer: Any, problems: Sequence[Problem]) -> None:
    """Every host checks every prompt the run can draw, so a bad one stops them all here."""
    longest = max((len(encode_prompt(cfg, tokenizer, x)) for x in problems), default=0)
    max_length = cfg.training.max_length
    if longest >= max_length:
        raise ConfigError(f"training.max_length: expected more than the longest prompt "
                          f"({longest} tokens), got {max_length}")
