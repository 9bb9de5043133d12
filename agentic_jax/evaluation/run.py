"""One call that evaluates a policy on named benchmarks and writes every result file.

The policy is any callable that samples responses for a list of problems, so the evaluate
command and the trainer wire it in a few lines:

    results = evaluate_benchmarks(
        load_benchmarks(parse_benchmark_specs(flag_value)),
        sample=lambda problems, k: my_sampler(problems, k),   # -> [len(problems)][k] Samples
        eval_dir=os.path.join(workdir, "eval"), num_samples=16, step=None)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence

from agentic_jax.errors import UserError
from agentic_jax.evaluation import report
from agentic_jax.evaluation.metrics import (
    NUM_RESAMPLES,
    Grade,
    Sample,
    breakdown,
    score_problem,
    summarize,
    usage,
)
from agentic_jax.reward import grade_answer

logger = logging.getLogger(__name__)
SampleFn = Callable[[Sequence, int], Sequence[Sequence[Sample | str]]]


def _as_samples(name: str, problems: Sequence, produced: Sequence[Sequence[Sample | str]],
                num_samples: int) -> list[list[Sample]]:
    if len(produced) != len(problems):
        raise ValueError(f"benchmark {name!r}: the sampler returned {len(produced)} rows for "
                         f"{len(problems)} problems")
    rows = []
    for problem, row in zip(problems, produced):
        if len(row) != num_samples:
            raise ValueError(f"benchmark {name!r}, problem {problem.id}: {len(row)} samples, "
                             f"expected {num_samples}")
        rows.append([s if isinstance(s, Sample) else Sample(response=s) for s in row])
    return rows


def evaluate_benchmark(name: str, problems: Sequence, samples: Sequence[Sequence[Sample]], *,
                       grade: Grade = grade_answer, num_resamples: int = NUM_RESAMPLES,
                       seed: int = 0) -> tuple[dict, list]:
    """The result dict of one benchmark (``summarize`` plus ``by_subject``, ``by_level`` and
    usage) and the per-problem scores."""
    scores = [score_problem(s, p.answer, grade) for p, s in zip(problems, samples, strict=True)]
    result = summarize(scores, num_resamples=num_resamples, seed=seed)
    for field, key in (("subject", "by_subject"), ("level", "by_level")):
        result[key] = breakdown(scores, [p.meta.get(field) for p in problems],
                                num_resamples=num_resamples, seed=seed)
    result.update(usage(samples))
    result["name"] = name
    return result, scores


def evaluate_benchmarks(benchmarks: Mapping[str, Sequence], sample: SampleFn, eval_dir: str, *,
                        num_samples: int, step: int | None = None, history: bool = True,
                        grade: Grade = grade_answer, num_resamples: int = NUM_RESAMPLES,
                        seed: int = 0, write: bool = True) -> dict[str, dict]:
    """Samples ``num_samples`` responses per problem with ``sample(problems, num_samples)``,
    scores them and writes ``eval_dir``/<name>.json, <name>.samples.jsonl, summary.md,
    summary.png (and, when ``step`` is given and ``history``, history.jsonl / history.png;
    ``step`` is recorded in each result either way). Returns
    {name: result}. On several hosts every host calls this (the sampler is collective and
    returns every problem's samples) and only process 0 passes ``write=True``."""
    if num_samples < 1:
        raise UserError(f"num_samples must be >= 1, got {num_samples}")
    results = {}
    for name, problems in benchmarks.items():
        if not problems:
            raise UserError(f"benchmark {name!r} has no problems")
        logger.info("evaluating %s: %d problems x %d samples", name, len(problems), num_samples)
        samples = _as_samples(name, problems, sample(problems, num_samples), num_samples)
        result, scores = evaluate_benchmark(name, problems, samples, grade=grade,
                                            num_resamples=num_resamples, seed=seed)
        if step is not None:
            result["step"] = step
        if write:
            report.write_result(eval_dir, name, result)
            report.write_transcripts(eval_dir, name, problems, samples, scores)
        results[name] = result
        logger.info("%s: %s", name, ", ".join(f"{k}={v:.3f}"
                                                  for k, v in report.headline(result).items()))
    if not write:
        return results
    summary = os.path.join(eval_dir, "summary.md")
    report.atomic_write(summary, report.markdown_table(results))
    report.plot_summary(results, os.path.join(eval_dir, "summary.png"))
    if step is not None and history:
        report.append_history(eval_dir, step, results)
    return results
