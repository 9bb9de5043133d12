"""The policy a command serves: a run's newest checkpoint, or a config's model as built (a
Hugging Face directory with ``--config.model.path``, or the preset's initialisation), opened by
`agentic_jax.episodes.open.open_run`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, NamedTuple

import ml_collections

from agentic_jax.episodes.open import has_checkpoints, open_run
from agentic_jax.inference import InferencePolicy


class LoadedPolicy(NamedTuple):
    """``policy`` (published), the checkpoint ``step`` (None when the weights are not from a
    run) and a ``name`` for /v1/models."""

    policy: InferencePolicy
    step: int | None
    name: str


def load_policy(config: ml_collections.ConfigDict | None, workdir: str | None,
                overrides: Mapping[str, Any] | None = None) -> LoadedPolicy:
    """With ``workdir``: its recorded config (``overrides`` on top) and newest checkpoint
    (FileNotFoundError when it has none). Without: ``config`` as given, weights as built."""
    if workdir and not has_checkpoints(workdir):
        raise FileNotFoundError(f"--workdir={workdir!r}: no checkpoints/ directory to serve")
    policy = open_run(config, workdir, overrides)
    if workdir:
        return LoadedPolicy(policy, policy.step,
                            f"{os.path.basename(os.path.abspath(workdir))}@{policy.step}")
    # The name the user gave: the path's (a directory or .gguf file), else the preset.
    path = str(config.model.path).rstrip("/")
    name = os.path.basename(path).removesuffix(".gguf") if path else policy.cfg.model.preset
    return LoadedPolicy(policy, None, name)
