"""Runs a scaling sweep sequentially on this machine, then fits the scaling law to it.

  python tools/run_sweep.py --config=configs/scaling_sweep.py[:smoke] --sweep_dir=DIR [--dry_run]

Run from the repository root (the base config path is relative to it). Each (preset, seed)
trains in DIR/<preset>_seed<S> through the trainer's command line; a run that exits cleanly gets
a DIR/<run>/sweep_done.json marker, and marked runs are skipped when the sweep is started again
(unless the sweep now asks for more steps: the trainer then resumes from its checkpoint).
Failed runs are reported and the sweep goes on; the exit status is 1 if any failed. Finally the
completed runs are fitted into DIR/fit.json and DIR/fit.png. --dry_run prints the commands.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import time

from absl import app, flags, logging
import ml_collections
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", "configs/scaling_sweep.py", "The sweep config file (see configs/scaling_sweep.py)."
)
_SWEEP_DIR = flags.DEFINE_string(
    "sweep_dir", None, "Directory holding one workdir per run.", required=True
)
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Print the runs' commands and exit.")
_SKIP_FIT = flags.DEFINE_bool("skip_fit", False, "Do not fit the law after the runs.")
_PYTHON = flags.DEFINE_string("python", sys.executable, "The interpreter that runs the trainer.")

DONE_FILE = "sweep_done.json"


@dataclasses.dataclass(frozen=True)
class Run:
    preset: str
    seed: int
    workdir: str
    command: list[str]


def plan_runs(config: ml_collections.ConfigDict, sweep_dir: str, python: str) -> list[Run]:
    """One run per (preset, seed), in the config's order: smaller models first."""
    if not config.presets or not config.seeds:
        raise ValueError("the sweep config needs at least one preset and one seed")
    if config.total_steps <= 0:
        raise ValueError(f"total_steps must be > 0, got {config.total_steps}")
    runs = []
    for preset in config.presets:
        for seed in config.seeds:
            workdir = os.path.join(sweep_dir, f"{preset}_seed{seed}")
            command = [
                python,
                "-m",
                config.trainer_module,
                f"--config={config.base_config}",
                f"--workdir={workdir}",
                f"--config.model.preset={preset}",
                f"--config.seed={seed}",
                f"--config.training.total_steps={config.total_steps}",
            ]
            command += [f"--config.{override}" for override in config.overrides]
            runs.append(Run(preset, int(seed), workdir, command))
    return runs


def is_done(run: Run, total_steps: int) -> bool:
    """True when the run finished before with at least `total_steps` steps."""
    try:
        with open(os.path.join(run.workdir, DONE_FILE), encoding="utf-8") as f:
            return json.load(f).get("total_steps", 0) >= total_steps
    except (OSError, json.JSONDecodeError, AttributeError):
        return False


def execute(run: Run, total_steps: int) -> bool:
    """Trains one run in a subprocess; marks it done on exit status 0. Returns success."""
    os.makedirs(run.workdir, exist_ok=True)
    start = time.monotonic()
    returncode = subprocess.run(run.command, check=False).returncode
    seconds = time.monotonic() - start
    if returncode != 0:
        logging.error(
            "%s: trainer exited with status %d after %.0f s", run.workdir, returncode, seconds
        )
        return False
    with open(os.path.join(run.workdir, DONE_FILE), "w", encoding="utf-8") as f:
        json.dump(
            {
                "preset": run.preset,
                "seed": run.seed,
                "total_steps": total_steps,
                "seconds": seconds,
                "command": run.command,
            },
            f,
            indent=2,
        )
    logging.info("%s: done in %.0f s", run.workdir, seconds)
    return True


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = _CONFIG.value
    sweep_dir = os.path.abspath(_SWEEP_DIR.value)
    runs = plan_runs(config, sweep_dir, _PYTHON.value)
    if _DRY_RUN.value:
        for run in runs:
            print(
                f"# done: {run.workdir}"
                if is_done(run, config.total_steps)
                else shlex.join(run.command)
            )
        return
    failed = []
    for i, run in enumerate(runs, 1):
        if is_done(run, config.total_steps):
            logging.info("[%d/%d] %s: already done, skipped", i, len(runs), run.workdir)
            continue
        logging.info("[%d/%d] %s seed %d: training", i, len(runs), run.preset, run.seed)
        if not execute(run, config.total_steps):
            failed.append(run.workdir)
    completed = [r.workdir for r in runs if is_done(r, config.total_steps)]
    if not _SKIP_FIT.value:
        _fit(completed, sweep_dir, config.fit)
    if failed:
        logging.error("%d of %d runs failed: %s", len(failed), len(runs), ", ".join(failed))
        sys.exit(1)


def _fit(run_dirs: list[str], sweep_dir: str, fit_config: ml_collections.ConfigDict) -> None:
    if len(run_dirs) < 2:
        logging.warning("only %d completed runs: not fitting the law", len(run_dirs))
        return
    # Imported here so that planning and --dry_run stay light: reading metrics pulls in JAX.
    from agentic_jax.scaling import fit_runs, format_summary

    result = fit_runs(run_dirs, sweep_dir, **fit_config.to_dict())
    logging.info("wrote %s/fit.json and fit.png\n%s", sweep_dir, format_summary(result))


if __name__ == "__main__":
    app.run(main)
