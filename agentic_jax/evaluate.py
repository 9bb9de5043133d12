r"""Evaluates a run's newest checkpoint on a split, with tools and without.

    python -m agentic_jax.evaluate --config=configs/math_ppo.py --workdir=DIR [--split=test]
        [--num_samples=4] [--limit=256]

Writes ``DIR/eval_<split>.json``: accuracy with and without tools, pass@k (with
``--num_samples`` > 1), code-use rate, tool calls, response length, overall and per stage.
"""

from __future__ import annotations

import json
import logging
import os
import sys

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "The run's config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "The run directory (with checkpoints/).")
_SPLIT = flags.DEFINE_enum("split", "test", ["train", "test"], "Which problems to evaluate.")
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 1, "Samples per problem (pass@k when > 1).")
_LIMIT = flags.DEFINE_integer("limit", 0, "Evaluate at most this many problems (0: all).")


def evaluate_checkpoint(config, workdir: str, *, split: str = "test", num_samples: int = 1,
                        limit: int = 0) -> dict:
    """Loads the newest checkpoint of ``workdir`` and evaluates it; returns the results."""
    from agentic_jax.rl.trainer import Trainer

    if not os.path.isdir(os.path.join(workdir, "checkpoints")):
        raise FileNotFoundError(f"--workdir={workdir!r}: no checkpoints/ directory to evaluate")
    trainer = Trainer(config, workdir)
    try:
        if not trainer.restore():
            raise FileNotFoundError(f"--workdir={workdir!r}: no restorable checkpoint")
        problems = trainer.test_problems if split == "test" else trainer.train_problems
        if limit:
            problems = problems[:limit]
        results = {
            "step": trainer.step,
            "split": split,
            "tools": trainer.evaluate(problems, tools=True, num_samples=num_samples),
            "direct": trainer.evaluate(problems, tools=False, num_samples=num_samples),
        }
    finally:
        trainer.close()
    path = os.path.join(workdir, f"eval_{split}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2, sort_keys=True)
    os.replace(path + ".tmp", path)
    return results


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}", file=sys.stderr)
        return 2
    if _CONFIG.value is None or not _WORKDIR.value:
        print("error: --config and --workdir are required", file=sys.stderr)
        return 2
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("agentic_jax").setLevel(logging.INFO)
    try:
        results = evaluate_checkpoint(_CONFIG.value, _WORKDIR.value, split=_SPLIT.value,
                                      num_samples=_NUM_SAMPLES.value, limit=_LIMIT.value)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for mode in ("tools", "direct"):
        r = results[mode]
        print(f"{mode}: accuracy {r['accuracy']:.3f}, code-use {r['code_use_rate']:.3f}, "
              f"tool calls {r['tool_calls']:.2f}, length {r['response_length']:.1f}")
    return 0


if __name__ == "__main__":
    app.run(lambda argv: sys.exit(main(argv)))
