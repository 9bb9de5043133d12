"""`save_pretrained`: a Hugging Face directory that transformers 4.x and 5.x load as our model.

Besides config.json and the safetensors, the directory gets a generation_config.json (the
source's own when the model came from one, else the special token ids) and the tokenizer files
of the directory the model or its tokenizer came from.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import safetensors.numpy
from flax import nnx

from agentic_jax.models.config import ModelConfig
from agentic_jax.models.hf import INDEX_FILE, SINGLE_FILE
from agentic_jax.models.hf_config import TOKEN_ID_FIELDS, config_to_hf
from agentic_jax.models.hf_weights import LAYER_PREFIX, export_tensors, tensor_maps
from agentic_jax.models.lora import merge_adapters
from agentic_jax.models.transformer import Transformer

GENERATION_CONFIG = "generation_config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model",
                   "chat_template.jinja", "chat_template.json")


def save_pretrained(model: Transformer, path: str | os.PathLike,
                    max_shard_bytes: int = 4 * 2**30, *,
                    source_dir: str | os.PathLike | None = None,
                    tokenizer_dir: str | os.PathLike | None = None) -> None:
    """Writes config.json, safetensors (sharded with an index past `max_shard_bytes`) and
    generation_config.json; copies the tokenizer files of `tokenizer_dir` (default
    `source_dir`, the HF directory the weights came from).

    transformers loads the directory as Qwen2/Qwen3/LlamaForCausalLM. LoRA adapters are merged
    into the kernels. A value head is kept as extra `value_head.*` tensors, which transformers
    ignores. Files are written under temporary names and renamed, so a failure never leaves a
    half-written checkpoint behind.
    """
    if model.cfg.lora_rank:
        model = merge_adapters(model)
    cfg = model.cfg
    hf_config = config_to_hf(cfg)
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    _write_weights(cfg, dict(nnx.to_flat_state(nnx.state(model, nnx.Param))), directory,
                   max_shard_bytes)
    source = Path(source_dir) if source_dir is not None else None
    if source is not None and (source / GENERATION_CONFIG).is_file():
        _copy(source / GENERATION_CONFIG, directory)
    else:
        write_json(directory / GENERATION_CONFIG, generation_config(cfg))
    tokenizer = Path(tokenizer_dir) if tokenizer_dir is not None else source
    if tokenizer is not None:
        for name in TOKENIZER_FILES:
            if (tokenizer / name).is_file():
                _copy(tokenizer / name, directory)
    write_json(directory / "config.json", hf_config)


def generation_config(cfg: ModelConfig) -> dict[str, Any]:
    """generation_config.json for a model without one: its special token ids."""
    ids = {name: getattr(cfg, name) for name in TOKEN_ID_FIELDS if getattr(cfg, name) is not None}
    return {**ids, "_from_model_config": True}


def _write_weights(cfg: ModelConfig, variables: dict[tuple[str, ...], nnx.Variable],
                   directory: Path, max_shard_bytes: int) -> None:
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
        return
    weight_map = {}
    for i, (tmp, names) in enumerate(pending):
        file = f"model-{i + 1:05d}-of-{len(pending):05d}.safetensors"
        os.replace(tmp, directory / file)
        weight_map.update(dict.fromkeys(names, file))
    write_json(directory / INDEX_FILE, {"metadata": {}, "weight_map": weight_map})
    (directory / SINGLE_FILE).unlink(missing_ok=True)


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


def _copy(file: Path, directory: Path) -> None:
    if file.resolve() != (directory / file.name).resolve():
        tmp = directory / (file.name + ".tmp")
        shutil.copyfile(file, tmp)
        os.replace(tmp, directory / file.name)


def write_json(target: Path, payload: dict[str, Any]) -> None:
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    os.replace(tmp, target)
