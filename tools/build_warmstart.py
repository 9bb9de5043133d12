r"""Saves the warm start of a config's recipe where runs find it
(`agentic_jax.training.warmstart_results`).

    python tools/build_warmstart.py --config=configs/math_ppo.py \
        --out=agentic_jax/training/assets/warmstart/seed0
    python tools/build_warmstart.py --config=configs/math_ppo.py --config.seed=1 \
        --out=agentic_jax/training/assets/warmstart/seed1
    python tools/build_warmstart.py --config=configs/math_ppo.py --from_run=RUN --out=DIR

The first two train the warm start (about 13 minutes each on 2 CPU cores for the default
recipe). ``--from_run`` instead saves a finished run's step-0 checkpoint, which holds that run's
warm start, after checking that the run's recorded config has the same recipe fields. Either
way ``DIR/warmstart.json`` records the recipe (`warmstart.recipe`) that a run must have to load
the result, the warm start's metrics and how it was made.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file (+ ':variant').")
_OUT = flags.DEFINE_string("out", None, "Directory to write (params.safetensors, warmstart.json).")
_FROM_RUN = flags.DEFINE_string("from_run", None,
                                "A finished run directory whose step-0 checkpoint to save.")

def _from_run(run_dir: str, config_dict: dict, like, shardings):
    from agentic_jax.rl import state as state_lib
    from agentic_jax.training import warmstart_results

    with open(os.path.join(run_dir, "config.json")) as f:
        recorded = json.load(f)["config"]
    diff = warmstart_results.config_differences(recorded, config_dict)
    if diff:
        raise ValueError(f"{run_dir}: its warm start has another recipe ({', '.join(diff)})")
    with open(os.path.join(run_dir, "summary.json")) as f:
        metrics = json.load(f)["warmstart"]
    step0 = os.path.join(run_dir, "checkpoints", "0")
    if not os.path.isdir(step0):
        raise FileNotFoundError(f"{step0}: the run kept no step-0 checkpoint")
    with tempfile.TemporaryDirectory() as tmp:
        # restore_params reads the newest checkpoint of a directory: give it step 0 alone.
        shutil.copytree(step0, os.path.join(tmp, "0"))
        params, step = state_lib.restore_params(tmp, like, shardings)
    assert step == 0, step
    return params, {k: v for k, v in metrics.items() if k != "warmstart/shipped"}


def main(argv: list[str]) -> int:
    if len(argv) > 1 or _CONFIG.value is None or not _OUT.value:
        print("usage: build_warmstart.py --config=CONFIG --out=DIR [--from_run=RUN]",
              file=sys.stderr)
        return 2
    from agentic_jax.config import read_config
    from agentic_jax.training import warmstart, warmstart_results
    from agentic_jax.training.builders import build_run

    config = _CONFIG.value
    config.warmstart.shipped = False  # train (or read the run) even when a result exists
    cfg = read_config(config)
    run, state = build_run(cfg)
    try:
        wanted = warmstart.recipe(run)
        if _FROM_RUN.value:
            params, metrics = _from_run(_FROM_RUN.value, json.loads(config.to_json()),
                                        state.params, run.shardings.state)
            args = [a for a in sys.argv[1:] if not a.startswith("--from_run")]
            made_by = ("the step-0 checkpoint (its warm start) of a training run whose recorded "
                       "config agrees in every recipe field; to train it again: python "
                       f"tools/build_warmstart.py {' '.join(args)}")
        else:
            params, metrics = warmstart.warm_start(run, state.params)
            made_by = f"python tools/build_warmstart.py {' '.join(sys.argv[1:])}"
        out = warmstart_results.save_result(_OUT.value, params, wanted, metrics, made_by)
    finally:
        run.policy.close()
    print(f"wrote {out}: loss {metrics.get('warmstart/loss', float('nan')):.4f}")
    return 0


if __name__ == "__main__":
    app.run(lambda argv: sys.exit(main(argv)))
