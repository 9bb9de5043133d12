"""Opening a run for inference: its recorded config and newest checkpoint, or a config's model
as built. Serving, evaluation and the apps open runs here and nowhere else."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import ml_collections

from agentic_jax.config import RunConfig, read_config
from agentic_jax.episodes import rundir
from agentic_jax.episodes.model_defaults import with_model_defaults
from agentic_jax.errors import UserError
from agentic_jax.inference.policy import InferencePolicy, build_inference, publish


def open_run(config: ml_collections.ConfigDict | None = None, workdir: str | None = None,
             overrides: Mapping[str, Any] | None = None) -> InferencePolicy:
    """The policy of ``workdir``'s newest checkpoint (its recorded config, ``config`` supplying
    fields the record lacks, ``overrides`` on top), or without ``workdir`` ``config``'s model
    as built (a pretrained model's defaults filled in). Builds no training data.

    ``overrides``: the command line's ``--config.*`` values (field path -> value)."""
    return open_config(run_config(config, workdir, overrides), workdir)


def run_config(config: ml_collections.ConfigDict | None, workdir: str | None,
               overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """The settings `open_run` builds with: the run's, without its periodic held-out evaluation
    (never run here) and sampling on the trainer's devices (nothing trains here for a sampler
    of its own to overlap with). FileNotFoundError: ``workdir`` has no checkpoints."""
    if workdir:
        if not has_checkpoints(workdir):
            raise FileNotFoundError(f"--workdir={workdir!r}: no checkpoints/ directory")
        config = rundir.with_record(config, workdir, overrides or {})
        rundir.check_same_model(config, workdir)
    elif config is None:
        raise UserError("--workdir or --config: expected a run directory or a config")
    else:
        config, chosen = with_model_defaults(config, overrides or {})
        for line in chosen:
            print(line, flush=True)
    cfg = read_config(config)
    return dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, every_steps=0),
                               rollout_devices=0)


def open_config(cfg: RunConfig, workdir: str | None = None,
                checkpoints: str | None = None) -> InferencePolicy:
    """``cfg``'s policy, with ``workdir``'s newest checkpoint published (its parameters only:
    no optimizer or training state is built or read) when one is given. ``checkpoints``:
    another directory of the run's checkpoints to take it from (``WORKDIR/warmstart``: the
    warm start's result)."""
    policy, params = build_inference(cfg)
    if not workdir:
        return policy
    from agentic_jax.rl.state import restore_params

    source = checkpoints or workdir
    try:
        params, step = restore_params(source, params, policy.state_shardings)
    except FileNotFoundError:
        policy.close()
        raise FileNotFoundError(f"{source!r}: no restorable checkpoint") from None
    publish(policy, params)
    return dataclasses.replace(policy, step=step)


def has_checkpoints(workdir: str) -> bool:
    return os.path.isdir(os.path.join(workdir, "checkpoints"))
