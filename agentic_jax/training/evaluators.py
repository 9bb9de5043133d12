"""How a run evaluates its policy: the evaluators the caller hands in (the train command passes
`agentic_jax.evaluation`'s; training imports nothing of evaluation), the held-out evaluation
with and without tools of the starting and the final policy, and the summary that ends the run
(``summary.json``, ``curves.png``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import NamedTuple

from agentic_jax.episodes.policy import Policy
from agentic_jax.parallel import is_main_process
from agentic_jax.training import transcripts
from agentic_jax.training.builders import Run
from agentic_jax.utils import read_metrics, write_json
from agentic_jax.utils.memory import peak_rss_mb

SUMMARY = "summary.json"


class Evaluators(NamedTuple):
    """How the run evaluates its policy, given by the caller (the train command passes
    `agentic_jax.evaluation`'s: training imports nothing of evaluation).

    held_out(policy, tools=bool) -> the held-out figures (accuracy, code use, ...) of the
    starting and the final policy (``initial_eval.json``, ``summary.json``);
    benchmarks(policy, workdir, step, total_steps) -> the step's "eval/<name>/<metric>"
    figures ({} at a step ``eval.every_steps`` does not evaluate)."""

    held_out: Callable[..., dict[str, float]]
    benchmarks: Callable[[Policy, str, int, int], dict[str, float]]


def evaluate_both(run: Run, held_out: Callable[..., dict[str, float]],
                  workdir: str | None = None, step: int = 0) -> dict[str, dict[str, float]]:
    """Held-out accuracy with and without tools (`Evaluators.held_out`); with ``workdir`` a few
    of the held-out episodes also go to its transcripts.jsonl."""
    out = {"tools": held_out(run.policy, tools=True),
           "direct": held_out(run.policy, tools=False)}
    if workdir is not None:
        transcripts.from_evaluation(run.policy, workdir, step)
    return out


def final_summary(run: Run, workdir: str, info: dict, num_params: int, steps: int,
                  began: float, held_out: Callable[..., dict[str, float]]) -> dict:
    """The final policy's held-out evaluation and the run's summary (``summary.json``, with
    ``curves.png`` when ``logging.plots``)."""
    final = evaluate_both(run, held_out, workdir, steps)
    records, _ = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    initial = info["initial"]
    summary = {
        "num_params": int(num_params),
        "steps": steps,
        "initial": initial,
        "final": final,
        "accuracy_gain_tools": final["tools"]["accuracy"] - initial["tools"]["accuracy"],
        "code_use_rate_start": initial["tools"]["code_use_rate"],
        "code_use_rate_end": final["tools"]["code_use_rate"],
        "warmstart": {k: v for k, v in info.items() if k.startswith("warmstart")},
        # This process's: a resumed run counts from its resumption.
        "wall_time_s": time.perf_counter() - began,
        "peak_rss_mb": max([peak_rss_mb()] + [r["peak_rss_mb"] for r in records
                                               if "peak_rss_mb" in r]),
        "peak_rss_mb_rl": max((r["peak_rss_mb_rl"] for r in records if "peak_rss_mb_rl" in r),
                              default=0.0),
    }
    if is_main_process():
        write_json(os.path.join(workdir, SUMMARY), summary)
        if run.cfg.logging.plots and records:
            from agentic_jax.scaling import plot_run_curves

            plot_run_curves({os.path.basename(workdir.rstrip("/")): records},
                            os.path.join(workdir, "curves.png"))
    return summary
