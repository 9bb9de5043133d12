"""Tensor-level mapping between HF checkpoints (torch layout) and the NNX parameters.

HF stores Linear weights as [out, in] with heads merged ([Hq * D, E]); the NNX model keeps
[in, out] with heads split ([E, Hq, D]) and stacks layers on a leading axis. A `TensorMap` names
both sides and the two layout changes, so that reading a *region* of a parameter (one device's
shard) reads only the matching region of the checkpoint tensor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np

from agentic_jax.models.config import ModelConfig

LAYER_PREFIX = "model.layers.{layer}."


@dataclasses.dataclass(frozen=True)
class TensorMap:
    """One NNX parameter <-> one HF tensor (per layer when `stacked`).

    transpose: the HF tensor is the transpose of ours (torch Linear weights, 2-D only).
    split: our axis s, with s + 1, is one merged axis in HF (heads, head_dim) -> heads * head_dim.
    """

    path: tuple[str, ...]
    hf_name: str
    stacked: bool = False
    transpose: bool = False
    split: int | None = None

    def name(self, layer: int | None = None) -> str:
        return self.hf_name.format(layer=layer)

    def hf_shape(self, ours: tuple[int, ...]) -> tuple[int, ...]:
        """Per-tensor HF shape from our (per-layer) shape."""
        shape = list(ours)
        if self.split is not None:
            shape[self.split: self.split + 2] = [ours[self.split] * ours[self.split + 1]]
        return tuple(shape[::-1] if self.transpose else shape)


def tensor_maps(cfg: ModelConfig) -> list[TensorMap]:
    """Every base parameter of `Transformer(cfg)` with its HF tensor (adapters have none)."""
    maps = [TensorMap(("embed",), "model.embed_tokens.weight"),
            TensorMap(("final_norm", "scale"), "model.norm.weight")]
    if not cfg.tie_word_embeddings:
        maps.append(TensorMap(("lm_head",), "lm_head.weight", transpose=True))
    if cfg.value_head:
        maps += [TensorMap(("value_kernel",), "value_head.weight", transpose=True),
                 TensorMap(("value_bias",), "value_head.bias")]

    def layer(path: tuple[str, ...], name: str, **kw: Any) -> TensorMap:
        return TensorMap(("blocks", *path), LAYER_PREFIX + name, stacked=True, **kw)

    maps += [
        layer(("attn_norm", "scale"), "input_layernorm.weight"),
        layer(("mlp_norm", "scale"), "post_attention_layernorm.weight"),
        layer(("attn", "o_kernel"), "self_attn.o_proj.weight", transpose=True, split=0),
        layer(("mlp", "gate_kernel"), "mlp.gate_proj.weight", transpose=True),
        layer(("mlp", "up_kernel"), "mlp.up_proj.weight", transpose=True),
        layer(("mlp", "down_kernel"), "mlp.down_proj.weight", transpose=True),
    ]
    for proj in "qkv":
        maps.append(layer(("attn", f"{proj}_kernel"), f"self_attn.{proj}_proj.weight",
                          transpose=True, split=1))
        if cfg.qkv_bias:
            maps.append(layer(("attn", f"{proj}_bias"), f"self_attn.{proj}_proj.bias", split=0))
    if cfg.qk_norm:
        maps += [layer(("attn", "q_norm", "scale"), "self_attn.q_norm.weight"),
                 layer(("attn", "k_norm", "scale"), "self_attn.k_norm.weight")]
    return maps


def read_region(tensor_slice: Any, tmap: TensorMap, shape: tuple[int, ...],
                index: tuple[slice, ...]) -> np.ndarray:
    """Our-layout region `index` of a per-layer parameter of `shape`, read from HF storage.

    `tensor_slice` is a safetensors slice object (indexable with a tuple of slices).
    """
    bounds = [slice(*s.indices(n)[:2]) for s, n in zip(index, shape)]
    residual = None
    if tmap.split is not None:
        axis, width = tmap.split, shape[tmap.split + 1]
        heads, within = bounds[axis], bounds[axis + 1]
        # heads [h0, h1) are the contiguous HF rows [h0 * D, h1 * D); cut head_dim afterwards
        residual = (axis, heads.stop - heads.start, width, within)
        bounds[axis: axis + 2] = [slice(heads.start * width, heads.stop * width)]
    hf_bounds = bounds[::-1] if tmap.transpose else bounds
    region = np.asarray(tensor_slice[tuple(hf_bounds)])
    if tmap.transpose:
        region = region.T
    if residual is not None:
        axis, num_heads, width, within = residual
        region = region.reshape(region.shape[:axis] + (num_heads, width) + region.shape[axis + 1:])
        region = region[(slice(None),) * (axis + 1) + (within,)]
    return region


def export_tensors(tmap: TensorMap, value: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    """(HF name, HF-layout array) pairs for one of our parameters (one per layer if stacked)."""
    per_layer = list(enumerate(value)) if tmap.stacked else [(None, value)]
    for layer, x in per_layer:
        if tmap.split is not None:
            s = tmap.split
            x = x.reshape(x.shape[:s] + (x.shape[s] * x.shape[s + 1],) + x.shape[s + 2:])
        if tmap.transpose:
            x = x.T
        yield tmap.name(layer), np.ascontiguousarray(x)
