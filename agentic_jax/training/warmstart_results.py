"""Saved warm-start results: a result's files (the parameters as one safetensors file, and
``warmstart.json`` with the recipe it was trained from and its metrics), finding the one whose
recipe a run has, and the config fields a recipe depends on.

The package ships the default recipe's results under ``assets/warmstart/`` (`SHIPPED_DIR`),
written by ``tools/build_warmstart.py``; `agentic_jax.training.warmstart` computes a run's
recipe and loads a matching result instead of training.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

SHIPPED_DIR = Path(__file__).resolve().parent / "assets" / "warmstart"
WEIGHTS_FILE = "params.safetensors"
INFO_FILE = "warmstart.json"

# The config groups and fields a warm start's result depends on, as recorded in config.json.
_RECIPE_GROUPS = ("model", "tokenizer", "data", "warmstart", "mesh")
_RECIPE_FIELDS = (("seed",), ("training", "max_length"), ("training", "max_grad_norm"),
                  ("training", "offload_optimizer"))
# Fields of those groups that only RL reads (the scheduler draws RL's problems, not the warm
# start's), and whether a run may load a saved result at all.
_NOT_RECIPE = {"data": ("scheduler_threshold", "scheduler_window", "scheduler_ahead"),
               "warmstart": ("shipped",)}


def config_differences(recorded: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """The recipe fields in which two configs (as plain dicts, e.g. a run's config.json) differ;
    RL-only fields of the recipe's groups (`_NOT_RECIPE`) are not among them."""
    out = []
    for group in _RECIPE_GROUPS:
        a, b = dict(recorded.get(group, {})), dict(config.get(group, {}))
        for key in _NOT_RECIPE.get(group, ()):
            a.pop(key, None)
            b.pop(key, None)
        out += [f"{group}.{k}" for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]
    for path in _RECIPE_FIELDS:
        a, b = recorded, config
        for part in path:
            a = a.get(part) if isinstance(a, dict) else None
            b = b.get(part) if isinstance(b, dict) else None
        if a != b:
            out.append(".".join(path))
    return out


def read_info(directory: str | os.PathLike) -> dict[str, Any]:
    """A saved warm start's ``warmstart.json``: its recipe, metrics and how it was made."""
    path = Path(directory) / INFO_FILE
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a readable warm-start record ({err})") from err
    if not isinstance(info, dict) or not {"recipe", "metrics"} <= info.keys():
        raise ValueError(f"{path}: expected the keys 'recipe' and 'metrics'")
    return info


def find_shipped(wanted: dict[str, Any], root: str | os.PathLike | None = None) -> Path | None:
    """The saved warm start under ``root`` (default `SHIPPED_DIR`) whose recipe is ``wanted``,
    or None."""
    root = Path(SHIPPED_DIR if root is None else root)
    if not root.is_dir():
        return None
    for directory in sorted(p for p in root.iterdir() if (p / INFO_FILE).is_file()):
        if read_info(directory)["recipe"] == wanted:
            return directory
    return None


def save_result(directory: str | os.PathLike, params: Any, wanted: dict[str, Any],
                metrics: dict[str, float], made_by: str) -> Path:
    """Writes a warm start's parameters (one safetensors file, the model state's paths as
    keys) and its record; each file goes under a temporary name first, so a failure leaves no
    half-written result."""
    import jax
    from flax import nnx
    from flax.traverse_util import flatten_dict
    from safetensors.numpy import save_file

    if jax.process_count() > 1:
        raise ValueError("save_result: a warm start is saved from one process")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {_key(k): np.asarray(v) for k, v in
               flatten_dict(jax.device_get(nnx.to_pure_dict(params))).items()}
    record = {"recipe": wanted, "metrics": metrics, "made_by": made_by}
    for name, write in ((WEIGHTS_FILE, lambda f: save_file(tensors, f)),
                        (INFO_FILE, lambda f: Path(f).write_text(
                            json.dumps(record, indent=1, sort_keys=True) + "\n"))):
        tmp = directory / f".{name}.tmp"
        write(str(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, directory / name)
    return directory


def load_result(directory: str | os.PathLike, like: Any, shardings: Any) -> Any:
    """The parameters `save_result` wrote, as a model state shaped like ``like`` and placed with
    ``shardings``; any missing, extra or differently shaped tensor is an error."""
    import jax
    from flax import nnx
    from flax.traverse_util import flatten_dict, unflatten_dict
    from safetensors.numpy import load_file

    path = Path(directory) / WEIGHTS_FILE
    loaded = load_file(str(path))
    expected = {_key(k): (k, v) for k, v in flatten_dict(nnx.to_pure_dict(like)).items()}
    if loaded.keys() != expected.keys():
        raise ValueError(f"{path}: tensors {sorted(loaded.keys() ^ expected.keys())} do not "
                         "match the model")
    for name, (_, value) in expected.items():
        got = loaded[name]
        if got.shape != value.shape or got.dtype != value.dtype:
            raise ValueError(f"{path}: {name} is {got.dtype}{list(got.shape)}, the model has "
                             f"{value.dtype}{list(value.shape)}")
    params = jax.tree.map(lambda x: x, like)
    nnx.replace_by_pure_dict(params, unflatten_dict({k: loaded[n]
                                                     for n, (k, _) in expected.items()}))
    return jax.device_put(params, shardings)


def _key(path: tuple[Any, ...]) -> str:
    return "/".join(str(part) for part in path)
