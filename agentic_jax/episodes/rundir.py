"""The run directory remembers its config: ``DIR/config.json`` holds the resolved config of the
run (and its parameter count), so that `evaluate` and a rerun use the same values without every
override being repeated, and a rerun cannot silently train another model into the same
checkpoints.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import ml_collections

from agentic_jax.config import ConfigError
from agentic_jax.utils import read_json, write_json

CONFIG_FILE = "config.json"
# Fields that decide what the checkpoints hold: a rerun may not change them.
IDENTITY_FIELDS = ("model.preset", "model.path", "model.value_head", "tokenizer.path")


def config_path(workdir: str) -> str:
    return os.path.join(workdir, CONFIG_FILE)


def recorded_config(workdir: str) -> ml_collections.ConfigDict | None:
    """The config a run in ``workdir`` recorded, or None when there is none."""
    path = config_path(workdir)
    if not os.path.exists(path):
        return None
    try:
        record = read_json(path)
        return ml_collections.ConfigDict(_tuples(record["config"]))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"{path}: not a readable run config ({type(err).__name__}: "
                          f"{err})") from None


def record_config(workdir: str, config: ml_collections.ConfigDict, num_params: int) -> None:
    write_json(config_path(workdir), {"config": json.loads(config.to_json_best_effort()),
                                      "num_params": int(num_params)})


def with_record(config: ml_collections.ConfigDict | None, workdir: str,
                overrides: Mapping[str, Any]) -> ml_collections.ConfigDict:
    """The config a command on ``workdir`` runs with: the recorded one where there is one (on
    top of ``config``, which supplies fields the record predates), then ``overrides`` (the
    command line's ``--config.*`` flags, field path -> value)."""
    recorded = recorded_config(workdir)
    if recorded is None:
        if config is None:
            raise ConfigError(f"--workdir={workdir!r}: no {CONFIG_FILE} there; pass --config")
        return config
    base = ml_collections.ConfigDict(config.to_dict()) if config is not None else recorded
    if config is not None:
        _update(base, recorded, "")
        if "auto_defaults" in base.model and "auto_defaults" not in recorded.model:
            # A record from before pretrained defaults existed holds the values it ran with.
            base.model.auto_defaults = False
    for path, value in overrides.items():
        set_value(base, path, value)
    return base


def check_same_model(config: ml_collections.ConfigDict, workdir: str) -> None:
    """One clear error when ``config`` would resume ``workdir``'s checkpoints with another model
    or tokenizer than they were trained with (nothing in the directory is touched)."""
    recorded = recorded_config(workdir)
    if recorded is None or not os.path.isdir(os.path.join(workdir, "checkpoints")):
        return
    for field in IDENTITY_FIELDS:
        old, new = get_value(recorded, field), get_value(config, field)
        if old != new:
            raise ConfigError(f"{field}: the run in {workdir} was trained with {old!r}, got "
                              f"{new!r}; use a new --workdir for another model")


def _tuples(value: Any) -> Any:
    """JSON lists back to the tuples the config files use."""
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def _update(node: ml_collections.ConfigDict, recorded: ml_collections.ConfigDict,
            prefix: str) -> None:
    for key, value in recorded.items():
        if key not in node:
            continue  # a field this version no longer has
        if isinstance(value, ml_collections.ConfigDict):
            _update(node[key], value, f"{prefix}{key}.")
        else:
            _assign(node, key, value, f"{prefix}{key}")


def set_value(config: ml_collections.ConfigDict, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = config
    for part in parents:
        node = node[part]
    _assign(node, last, value, path)


def _assign(node: ml_collections.ConfigDict, key: str, value: Any, path: str) -> None:
    current = node[key] if key in node else None
    if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)  # JSON writes 1.0 as 1
    elif isinstance(current, str) and isinstance(value, bool):
        # An on / off field that has since gained "auto" (rollout.layer_arrays): a run recorded
        # before keeps what it ran with, in the words the field now reads.
        value = str(value).lower()
    try:
        node[key] = value
    except TypeError as err:
        raise ConfigError(f"{path}: {err}") from None


def get_value(config: ml_collections.ConfigDict, path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if part not in node:
            return None
        node = node[part]
    return node
