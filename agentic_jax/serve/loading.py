"""The policy a command serves: a run's newest checkpoint, or a config's model as built (a
Hugging Face directory with ``--config.model.path``, or the preset's initialisation)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, NamedTuple

import ml_collections

from agentic_jax.errors import UserError


class LoadedPolicy(NamedTuple):
    """``policy`` (published, an `agentic_jax.rl.builders.Policy`), the checkpoint ``step``
    (None when the weights are not from a run) and a ``name`` for /v1/models."""

    policy: Any
    step: int | None
    name: str


def load_policy(config: ml_collections.ConfigDict | None, workdir: str | None,
                overrides: Mapping[str, Any] | None = None) -> LoadedPolicy:
    """With ``workdir``: its recorded config (``overrides`` on top) and newest checkpoint
    (FileNotFoundError when it has none). Without: ``config`` as given, weights as built."""
    from agentic_jax.rl import rundir
    from agentic_jax.rl.builders import build_policy, restored_policy
    from agentic_jax.rl.config import read_config

    if not workdir:
        if config is None:
            raise UserError("--workdir or --config: expected a run directory or a config")
        from agentic_jax.rl.model_defaults import with_model_defaults

        config, chosen = with_model_defaults(config, overrides or {})
        for line in chosen:
            print(line, flush=True)
        cfg = _inference_config(read_config(config))
        policy, _ = build_policy(cfg)
        # The name the user gave: the path's (a directory or .gguf file), else the preset.
        path = str(config.model.path).rstrip("/")
        name = os.path.basename(path).removesuffix(".gguf") if path else cfg.model.preset
        return LoadedPolicy(policy, None, name)
    if not os.path.isdir(os.path.join(workdir, "checkpoints")):
        raise FileNotFoundError(f"--workdir={workdir!r}: no checkpoints/ directory to serve")
    config = rundir.with_record(config, workdir, overrides or {})
    rundir.check_same_model(config, workdir)
    policy, step = restored_policy(_inference_config(read_config(config)), workdir)
    return LoadedPolicy(policy, step, f"{os.path.basename(os.path.abspath(workdir))}@{step}")


def _inference_config(cfg: Any) -> Any:
    """The run's settings without its periodic held-out evaluation (never run here), sampling
    on the trainer's devices (nothing trains here for a sampler of its own to overlap with)."""
    return dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, every_steps=0),
                               rollout_devices=0)
