r"""The main job: RL of a tool-using math policy.

    python -m agentic_jax.train --config=configs/math_ppo.py [--workdir=DIR]
        [--config.training.lr=1e-5 ...] [--coordinator_address=H:P --num_processes=P
        --process_id=I]

With no workdir the run goes to ``runs/<timestamp>`` (printed first). Rerunning on the same
workdir resumes from its newest checkpoint with the run's recorded config (``DIR/config.json``;
``--config`` may then be left out; ``--config.*`` flags override it beside any ``--config``,
e.g. the recipe's, since the recorded config stays the base).
"""

from __future__ import annotations

import logging
import os
import sys
import time

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from agentic_jax.commands import variants_usage
from agentic_jax.config.command_line import parse_flags
from agentic_jax.errors import USER_ERRORS
from agentic_jax.parallel import distributed
from agentic_jax.utils.compile_cache import enable_compile_cache

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file (+ ':variant').",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (default: runs/<timestamp>).")
_PROGRESS = flags.DEFINE_boolean(
    "progress", True, "Show progress bars (also off with --config.logging.progress=False).")
distributed.define_flags()


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}", file=sys.stderr)
        return 2
    workdir = _WORKDIR.value or os.path.join("runs", time.strftime("%Y%m%d-%H%M%S"))
    if _CONFIG.value is None and not os.path.exists(os.path.join(workdir, "config.json")):
        print("error: --config is required (e.g. --config=configs/math_ppo.py)", file=sys.stderr)
        return 2
    print(f"workdir: {os.path.abspath(workdir)}", flush=True)
    # Libraries log at WARNING and above; this package's own messages at INFO.
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("agentic_jax").setLevel(logging.INFO)
    try:
        distributed.initialize_from_flags()
        enable_compile_cache()  # what this run compiles, the next one loads
        print(distributed.describe_devices(), flush=True)
        # After the runtime is initialised:
        from agentic_jax.episodes import rundir
        from agentic_jax.episodes.model_defaults import with_model_defaults
        from agentic_jax.evaluation.benchmarks import evaluate_in_training
        from agentic_jax.evaluation.held_out import evaluate
        from agentic_jax.training.evaluators import Evaluators
        from agentic_jax.training.run import train

        overrides = (config_flags.get_override_values(flags.FLAGS["config"])
                     if _CONFIG.value is not None else {})
        # A rerun on a run directory continues with the run's recorded config (flags on top).
        config = rundir.with_record(_CONFIG.value, workdir, overrides)
        config, chosen = with_model_defaults(config, overrides)
        for line in chosen:
            print(line, flush=True)
        progress = _PROGRESS.value and bool(config.logging.progress)
        summary = train(config, workdir, progress=progress, evaluators=Evaluators(
            held_out=evaluate, benchmarks=evaluate_in_training))
    except USER_ERRORS as err:  # bad input: one line, exit code 2; a bug keeps its traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    _print_summary(summary)
    return 0


def _print_summary(s: dict) -> None:
    i, f = s["initial"], s["final"]
    print(
        f"held-out accuracy with tools: {i['tools']['accuracy']:.3f} -> "
        f"{f['tools']['accuracy']:.3f} ({s['accuracy_gain_tools']:+.3f}); "
        f"without tools: {i['direct']['accuracy']:.3f} -> {f['direct']['accuracy']:.3f}; "
        f"code-use rate: {s['code_use_rate_start']:.3f} -> {s['code_use_rate_end']:.3f}",
        flush=True)


def run() -> None:
    app.run(lambda argv: sys.exit(main(argv)), flags_parser=parse_flags)


if __name__ == "__main__":
    __doc__ += variants_usage()  # absl's --help prints the main module's docstring
    run()
