"""Hugging Face checkpoints: `from_pretrained` (streaming, sharded placement), `save_pretrained`."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import safetensors.numpy
from flax import nnx
from safetensors import safe_open

from agentic_jax.models.config import ModelConfig
from agentic_jax.models.hf_config import config_from_hf, config_to_hf
from agentic_jax.models.hf_weights import (
    LAYER_PREFIX,
    TensorMap,
    export_tensors,
    read_region,
    tensor_maps,
)
from agentic_jax.models.transformer import Transformer

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


class CheckpointReader(contextlib.ExitStack):
    """Lazily opened safetensors files of one HF directory (single file or index + shards)."""

    def __init__(self, directory: Path):
        super().__init__()
        self.directory = directory
        if (directory / INDEX_FILE).exists():
            self.files = _read_json(directory / INDEX_FILE)["weight_map"]
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
    **overrides: Any,
) -> Transformer:
    """Loads an HF Qwen2 / Llama directory (config.json + safetensors) into a Transformer.

    Tensors stream one region at a time straight into their target placement: with a `mesh`,
    each device reads only its own shard (rules from `agentic_jax.parallel`); without one, the
    default device. `param_dtype` defaults to `dtype`; `overrides` set other ModelConfig fields.
    A value head is read from `value_head.*` tensors when present, else starts at zero.
    """
    directory = Path(path)
    cfg = config_from_hf(
        _read_json(directory / "config.json"), source=str(directory / "config.json"),
        dtype=dtype, param_dtype=param_dtype or dtype, value_head=value_head, **overrides,
    )
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
    placement = _placement(mesh)
    loaded = {}
    with CheckpointReader(directory) as reader:
        maps = tensor_maps(cfg)
        if "value_head.weight" not in reader:
            maps = [m for m in maps if not m.hf_name.startswith("value_head.")]
        variables = dict(nnx.to_flat_state(abstract))
        _check_tensors(reader, maps, variables, cfg.num_layers)
        for path_parts, var in variables.items():
            tmap = next((m for m in maps if m.path == path_parts), None)
            loaded[path_parts] = var.replace(_load_array(reader, tmap, var, placement(var)))
    return nnx.merge(graphdef, nnx.from_flat_state(loaded))


def _placement(mesh: jax.sharding.Mesh | None) -> Callable[[nnx.Variable], jax.sharding.Sharding]:
    if mesh is None:
        device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        return lambda var: device
    # The logical-axis rules live in agentic_jax.parallel, which itself builds on this package.
    from agentic_jax.parallel import variable_sharding

    return lambda var: variable_sharding(var, mesh)


def _check_tensors(reader: CheckpointReader, maps: list[TensorMap],
                   variables: dict[tuple[str, ...], nnx.Variable], num_layers: int) -> None:
    """One clear error for the first missing tensor or shape mismatch, before reading data."""
    for tmap in maps:
        shape = variables[tmap.path].get_value().shape
        expected = tmap.hf_shape(shape[1:] if tmap.stacked else shape)
        for layer in range(num_layers) if tmap.stacked else [None]:
            name = tmap.name(layer)
            if name not in reader:
                raise ValueError(f"{reader.directory}: tensor {name!r} is missing")
            found = tuple(reader.tensor(name).get_shape())
            if found != expected:
                raise ValueError(
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


def save_pretrained(model: Transformer, path: str | os.PathLike,
                    max_shard_bytes: int = 4 * 2**30) -> None:
    """Writes config.json and safetensors (sharded with an index past `max_shard_bytes`).

    transformers loads the directory as Qwen2ForCausalLM / LlamaForCausalLM. A value head is
    kept as extra `value_head.*` tensors, which transformers ignores. Files are written under
    temporary names and renamed, so a failure never leaves a half-written checkpoint behind.
    """
    cfg = model.cfg
    hf_config = config_to_hf(cfg)
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    variables = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    # Shards are flushed as they fill (host memory stays near one shard) under temporary names,
    # and renamed once their count, part of the final names, is known.
    pending: list[tuple[Path, list[str]]] = []
    shard: dict[str, np.ndarray] = {}

    def flush() -> None:
        tmp = directory / f".shard-{len(pending)}.safetensors.tmp"
        safetensors.numpy.save_file(shard, str(tmp), metadata={"format": "pt"})
        pending.append((tmp, list(shard)))
        shard.clear()

    for name, tensor in _hf_tensors(cfg, variables):
        if shard and sum(t.nbytes for t in shard.values()) + tensor.nbytes > max_shard_bytes:
            flush()
        shard[name] = tensor
    flush()
    if len(pending) == 1:
        os.replace(pending[0][0], directory / SINGLE_FILE)
        (directory / INDEX_FILE).unlink(missing_ok=True)
    else:
        weight_map = {}
        for i, (tmp, names) in enumerate(pending):
            file = f"model-{i + 1:05d}-of-{len(pending):05d}.safetensors"
            os.replace(tmp, directory / file)
            weight_map.update(dict.fromkeys(names, file))
        _write_json(directory / INDEX_FILE, {"metadata": {}, "weight_map": weight_map})
        (directory / SINGLE_FILE).unlink(missing_ok=True)
    _write_json(directory / "config.json", hf_config)


def _hf_tensors(cfg: ModelConfig, variables: dict[tuple[str, ...], nnx.Variable]
                ) -> Iterator[tuple[str, np.ndarray]]:
    """(name, array) in HF layout, one parameter on the host at a time."""
    for tmap in tensor_maps(cfg):
        value = np.asarray(jax.device_get(variables[tmap.path].get_value()))
        yield from export_tensors(tmap, value)
    if cfg.family == "qwen2" and not cfg.qkv_bias:
        # Qwen2ForCausalLM always has q/k/v biases; zeros reproduce a bias-free model exactly.
        dtype = jnp.dtype(cfg.weight_dtype)
        widths = {"q": cfg.num_heads * cfg.head_dim, "k": cfg.num_kv_heads * cfg.head_dim,
                  "v": cfg.num_kv_heads * cfg.head_dim}
        for layer in range(cfg.num_layers):
            for proj, width in widths.items():
                name = (LAYER_PREFIX + f"self_attn.{proj}_proj.bias").format(layer=layer)
                yield name, np.zeros(width, dtype)


def _write_json(target: Path, payload: dict[str, Any]) -> None:
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    os.replace(tmp, target)


def _read_json(file: Path) -> dict[str, Any]:
    try:
        return json.loads(file.read_text())
    except FileNotFoundError as err:
        raise FileNotFoundError(
            f"{file}: not found (expected a Hugging Face model directory)"
        ) from err
    except json.JSONDecodeError as err:
        raise ValueError(f"{file}: not valid JSON ({err})") from err
