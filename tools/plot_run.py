"""Plots the training curves of one or more runs on shared axes.

  python tools/plot_run.py RUN_DIR [RUN_DIR ...] --out=curves.png

Accuracy (eval accuracy dashed, when logged), code-use rate, tool calls per episode, response
length, reward and code-execution success rate against step, one line per run, read from each
RUN_DIR/metrics.jsonl. Runs still being written are fine: a partial last line is skipped.
"""

import os
from typing import Any, Mapping

from absl import app, flags, logging

from agentic_jax.scaling import load_metrics, plot_run_curves

_OUT = flags.DEFINE_string("out", "run_curves.png", "The PNG to write.")
_TITLE = flags.DEFINE_string("title", None, "Figure title.")


def main(argv: list[str]) -> None:
    run_dirs = argv[1:]
    if not run_dirs:
        raise app.UsageError("give at least one RUN_DIR")
    runs = {}
    for run_dir in run_dirs:
        records, skipped = load_metrics(run_dir)
        if skipped:
            logging.info("%s: skipped %d unreadable metrics lines", run_dir, skipped)
        runs[_unique_name(run_dir, runs)] = records
    path = plot_run_curves(runs, _OUT.value, title=_TITLE.value)
    logging.info("wrote %s (%d runs)", path, len(runs))


def _unique_name(run_dir: str, taken: Mapping[str, Any]) -> str:
    """The run's directory name, or its path when two runs share a name."""
    name = os.path.basename(os.path.normpath(run_dir))
    return run_dir if name in taken else name


if __name__ == "__main__":
    app.run(main)
