"""Hugging Face checkpoints: `from_pretrained` (streaming, sharded placement)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import safe_open

from agentic_jax.errors import UserError
from agentic_jax.models.config import ModelConfig
from agentic_jax.models.hf_config import config_from_hf
from agentic_jax.models.hf_weights import TensorMap, read_region, tensor_maps
from agentic_jax.models.partitioning import LOGICAL_AXIS_RULES, Rules, variable_sharding
from agentic_jax.models.transformer import Transformer

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


class CheckpointReader(contextlib.ExitStack):
    """Lazily opened safetensors files of one HF directory (single file or index + shards)."""

    def __init__(self, directory: Path):
        super().__init__()
        self.directory = directory
        if (directory / INDEX_FILE).exists():
            self.files = read_json(directory / INDEX_FILE)["weight_map"]
        elif (directory / SINGLE_FILE).exists():
            with safe_open(directory / SINGLE_FILE, framework="flax") as f:
                self.files = {name: SINGLE_FILE for name in f.keys()}
        else:
            raise FileNotFoundError(f"{directory}: neither {SINGLE_FILE} nor {INDEX_FILE} found")
        self._handles: dict[str, Any] = {}
        # Slices are materialised on the host CPU backend, whatever the default device is.
        self._host = jax.local_devices(backend="cpu")[0]

    def __contains__(self, name: str) -> bool:
        return name in self.files

    def tensor(self, name: str) -> Any:
        file = self.files[name]
        if file not in self._handles:
            handle = safe_open(self.directory / file, framework="flax")
            self._handles[file] = self.enter_context(handle)
        return self._handles[file].get_slice(name)

    def read(self, tmap: TensorMap, layer: int | None, shape: tuple[int, ...],
             index: tuple[slice, ...]) -> np.ndarray:
        with jax.default_device(self._host):
            return read_region(self.tensor(tmap.name(layer)), tmap, shape, index)


def from_pretrained(
    path: str | os.PathLike,
    dtype: str = "float32",
    *,
    mesh: jax.sharding.Mesh | None = None,
    value_head: bool = False,
    param_dtype: str | None = None,
    rules: Rules = LOGICAL_AXIS_RULES,
    seed: int = 0,
    **overrides: Any,
) -> Transformer:
    """Loads an HF Qwen2 / Qwen3 / Llama directory (config.json + safetensors).

    Tensors stream one region at a time straight into their target placement: with a `mesh`,
    each device reads only its own shard (logical axes mapped by `rules`); without one, the
    default device. `param_dtype` defaults to `dtype`; `overrides` set other ModelConfig fields
    (e.g. `lora_rank=16`: fresh adapters drawn from `seed`, so the model starts as the
    checkpoint). A value head is read from `value_head.*` tensors when present, else starts
    at zero.
    """
    directory = Path(path)
    cfg = config_from_hf(
        read_json(directory / "config.json"), source=str(directory / "config.json"),
        dtype=dtype, param_dtype=param_dtype or dtype, value_head=value_head, **overrides,
    )
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
    placement = _placement(mesh, rules)
    loaded = _fresh_adapters(cfg, abstract, placement, seed)
    with CheckpointReader(directory) as reader:
        maps = tensor_maps(cfg)
        if "value_head.weight" not in reader:
            maps = [m for m in maps if not m.hf_name.startswith("value_head.")]
        variables = dict(nnx.to_flat_state(abstract))
        _check_tensors(reader, maps, variables, cfg.num_layers)
        for path_parts, var in variables.items():
            if path_parts in loaded:
                continue
            tmap = next((m for m in maps if m.path == path_parts), None)
            loaded[path_parts] = var.replace(_load_array(reader, tmap, var, placement(var)))
    return nnx.merge(graphdef, nnx.from_flat_state(loaded))


Placement = Callable[[nnx.Variable], jax.sharding.Sharding]


def _placement(mesh: jax.sharding.Mesh | None, rules: Rules) -> Placement:
    if mesh is None:
        device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        return lambda var: device
    return lambda var: variable_sharding(var, mesh, rules)


def _fresh_adapters(cfg: ModelConfig, abstract: nnx.State, placement: Placement,
                    seed: int) -> dict[tuple[str, ...], nnx.Variable]:
    """Newly initialised LoRA adapters, made under jit in their shards (XLA drops the unused
    base initialisers); none without `lora_rank`."""
    if not cfg.lora_rank:
        return {}
    adapters = nnx.filter_state(abstract, nnx.LoRAParam)
    shardings = jax.tree.map(lambda var: var.replace(placement(var)), adapters,
                             is_leaf=lambda x: isinstance(x, nnx.Variable))

    @functools.partial(jax.jit, out_shardings=shardings)
    def init() -> nnx.State:
        return nnx.state(Transformer(cfg, rngs=nnx.Rngs(seed)), nnx.LoRAParam)

    return dict(nnx.to_flat_state(init()))


def _check_tensors(reader: CheckpointReader, maps: list[TensorMap],
                   variables: dict[tuple[str, ...], nnx.Variable], num_layers: int) -> None:
    """One clear error for the first missing tensor or shape mismatch, before reading data."""
    for tmap in maps:
        shape = variables[tmap.path].get_value().shape
        expected = tmap.hf_shape(shape[1:] if tmap.stacked else shape)
        for layer in range(num_layers) if tmap.stacked else [None]:
            name = tmap.name(layer)
            if name not in reader:
                raise UserError(f"{reader.directory}: tensor {name!r} is missing")
            found = tuple(reader.tensor(name).get_shape())
            if found != expected:
                raise UserError(
                    f"{reader.directory}: tensor {name!r} has shape {found}, expected {expected}"
                )


def _load_array(reader: CheckpointReader, tmap: TensorMap | None, var: nnx.Variable,
                sharding: jax.sharding.Sharding) -> jax.Array:
    shape, dtype = var.get_value().shape, jnp.dtype(var.get_value().dtype)

    def region(index: tuple[slice, ...]) -> np.ndarray:
        if tmap is None:  # a value head absent from the checkpoint starts at zero
            return np.zeros([len(range(*s.indices(n))) for s, n in zip(index, shape)], dtype)
        if not tmap.stacked:
            return reader.read(tmap, None, shape, index).astype(dtype)
        layers = range(*index[0].indices(shape[0]))
        parts = [reader.read(tmap, layer, shape[1:], index[1:]) for layer in layers]
        return np.stack(parts).astype(dtype)

    return jax.make_array_from_callback(shape, sharding, region)


def read_json(file: Path) -> dict[str, Any]:
    try:
        return json.loads(file.read_text())
    except FileNotFoundError as err:
        raise FileNotFoundError(
            f"{file}: not found (expected a Hugging Face model directory)"
        ) from err
    except json.JSONDecodeError as err:
        raise UserError(f"{file}: not valid JSON ({err})") from err
