r"""Evaluates a run's newest checkpoint on a split, with tools and without.

    python -m agentic_jax.evaluate --workdir=DIR [--split=test] [--num_samples=4] [--limit=256]
        [--config=configs/math_ppo.py] [--config.data.eval_size=512 ...]

The run's own config (``DIR/config.json``) is used; ``--config.*`` flags override it. Writes
``DIR/eval_<split>.json``: accuracy with and without tools, pass@k (with ``--num_samples`` > 1),
code-use rate, tool calls, response length, overall and per stage.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Mapping

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "A config file (default: the run's recorded config.json).", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "The run directory (with checkpoints/).")
_SPLIT = flags.DEFINE_enum("split", "test", ["train", "test"], "Which problems to evaluate.")
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 1, "Samples per problem (pass@k when > 1).")
_LIMIT = flags.DEFINE_integer("limit", 0, "Evaluate at most this many problems (0: all).")


def evaluate_checkpoint(config, workdir: str, *, split: str = "test", num_samples: int = 1,
                        limit: int = 0, overrides: Mapping[str, Any] | None = None) -> dict:
    """Loads the newest checkpoint of ``workdir`` and evaluates it; returns the results.

    ``config`` may be None (the run's recorded config is used; ``overrides`` apply on top).
    Builds only the policy (no optimizer, no training state) and reads only its parameters.
    """
    from agentic_jax.rl import rundir
    from agentic_jax.rl.builders import build_policy, publish
    from agentic_jax.rl.config import read_config
    from agentic_jax.rl.evaluation import eval_config, evaluate
    from agentic_jax.rl.state import restore_params
    from agentic_jax.utils import write_json

    if not os.path.isdir(os.path.join(workdir, "checkpoints")):
        raise FileNotFoundError(f"--workdir={workdir!r}: no checkpoints/ directory to evaluate")
    config = rundir.with_record(config, workdir, overrides or {})
    cfg = read_config(config)
    rundir.check_same_model(config, workdir)
    policy, params = build_policy(cfg)
    try:
        try:
            params, step = restore_params(workdir, params, policy.state_shardings)
        except FileNotFoundError:
            raise FileNotFoundError(f"--workdir={workdir!r}: no restorable checkpoint") from None
        publish(policy, params)
        problems = policy.problems.test if split == "test" else policy.problems.train
        problems = problems[:limit] if limit else problems
        settings = eval_config(policy, num_samples)
        results = {
            "step": step,
            "split": split,
            "tools": evaluate(policy, problems, tools=True, cfg=settings),
            "direct": evaluate(policy, problems, tools=False, cfg=settings),
        }
    finally:
        policy.close()
    write_json(os.path.join(workdir, f"eval_{split}.json"), results)
    return results


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}", file=sys.stderr)
        return 2
    if not _WORKDIR.value:
        print("error: --workdir is required", file=sys.stderr)
        return 2
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("agentic_jax").setLevel(logging.INFO)
    overrides = config_flags.get_override_values(flags.FLAGS["config"]) if _CONFIG.value else {}
    try:
        results = evaluate_checkpoint(_CONFIG.value, _WORKDIR.value, split=_SPLIT.value,
                                      num_samples=_NUM_SAMPLES.value, limit=_LIMIT.value,
                                      overrides=overrides)
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
