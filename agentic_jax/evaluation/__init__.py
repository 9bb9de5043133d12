"""Evaluation on benchmarks: avg@k, unbiased pass@k, maj@k by grader-equivalence class,
bootstrap 95% intervals, per-subject / per-level breakdowns, and the result files
(``DIR/eval/<name>.json``, transcripts, one markdown table and one PNG). No JAX here: the
policy enters as a callable that samples responses.

The policy-sampling side lives in submodules that this package does not import (they need JAX
and the run's policy, `agentic_jax.episodes`; callers import them directly): `held_out` (the
run's held-out problems: accuracy with and without tools, pass@k, code use, per stage) and
`benchmarks` (the published policy's episodes as the `Sample`s scored here, for the evaluate
command and for ``eval.*`` during training)."""

from agentic_jax.evaluation.metrics import (
    ProblemScore,
    Sample,
    breakdown,
    majority_answer,
    pass_at_k,
    score_problem,
    summarize,
    usage,
)
from agentic_jax.evaluation.report import markdown_table, plot_summary, write_result
from agentic_jax.evaluation.run import evaluate_benchmark, evaluate_benchmarks

__all__ = [
    "ProblemScore",
    "Sample",
    "breakdown",
    "evaluate_benchmark",
    "evaluate_benchmarks",
    "majority_answer",
    "markdown_table",
    "pass_at_k",
    "plot_summary",
    "score_problem",
    "summarize",
    "usage",
    "write_result",
]
