"""LoRA adapters on the block projections, with flax NNX's own `nnx.LoRA` / `nnx.LoRAParam`.

A targeted projection y = x W gains y += (alpha / r) * x A B with A [in, r] (he-uniform) and
B [r, out] (zeros), so a fresh adapter leaves the model unchanged. The adapters are
`nnx.LoRAParam` variables (a subclass of `nnx.Param`): `ADAPTERS` selects them for the
optimizer and checkpoints, `BASE` the frozen rest. `Transformer.forward(..., adapters=False)`
runs the base weights alone (the KL reference, no second copy); `merge_adapters` folds
W + (alpha / r) A B into plain kernels for export.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from agentic_jax.models.config import ModelConfig

ADAPTERS = nnx.LoRAParam
BASE = nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))
# Logical axes (in, out) of each projection, matching its base kernel's sharding.
_AXES = {"q_proj": ("embed", "heads"), "k_proj": ("embed", "kv_heads"),
         "v_proj": ("embed", "kv_heads"), "o_proj": ("heads", "embed"),
         "gate_proj": ("embed", "mlp"), "up_proj": ("embed", "mlp"), "down_proj": ("mlp", "embed")}
# Where each projection's base kernel lives inside a block.
KERNELS = {"q_proj": ("attn", "q_kernel"), "k_proj": ("attn", "k_kernel"),
           "v_proj": ("attn", "v_kernel"), "o_proj": ("attn", "o_kernel"),
           "gate_proj": ("mlp", "gate_kernel"), "up_proj": ("mlp", "up_kernel"),
           "down_proj": ("mlp", "down_kernel")}


def attach_adapters(module: nnx.Module, cfg: ModelConfig, names: tuple[str, ...],
                    rngs: nnx.Rngs) -> None:
    """Sets `module.{name}_lora` (an `nnx.LoRA`) for each of `names` that cfg targets."""
    if not cfg.lora_rank:
        return
    shapes = cfg.projection_shapes()
    for name in names:
        if name not in cfg.lora_targets:
            continue
        (in_width, out_width), (in_axis, out_axis) = shapes[name], _AXES[name]
        adapter = nnx.LoRA(
            in_width, cfg.lora_rank, out_width, dtype=cfg.compute_dtype,
            param_dtype=cfg.weight_dtype, rngs=rngs,
            a_metadata={"out_sharding": (in_axis, None), "eager_sharding": False},
            b_metadata={"out_sharding": (None, out_axis), "eager_sharding": False})
        setattr(module, f"{name}_lora", adapter)


def adapter_output(module: nnx.Module, name: str, x: jax.Array, out: jax.Array,
                   scale: float) -> jax.Array:
    """out + scale * x A B, reshaped to out's shape ([B, T, ...]); out itself without one."""
    adapter = getattr(module, f"{name}_lora", None)
    if adapter is None:
        return out
    return out + (scale * adapter(x)).reshape(out.shape).astype(out.dtype)


def trainable_filter(cfg: ModelConfig) -> Any:
    """What an optimizer updates: the adapters (and a value head) with LoRA, else every Param."""
    if not cfg.lora_rank:
        return nnx.Param
    return nnx.Any(ADAPTERS, nnx.PathContains("value_kernel"), nnx.PathContains("value_bias"))


def merge_state(cfg: ModelConfig, params: dict[str, Any]) -> dict[str, Any]:
    """A pure parameter dict (`nnx.to_pure_dict` of a LoRA model) with every adapter folded in.

    W [L, *kernel] += (alpha / r) * (A [L, in, r] @ B [L, r, out]).reshape(W.shape), computed
    in float32 and cast to W's dtype; the adapter entries are dropped. Jittable.
    """
    blocks = {part: dict(values) for part, values in params["blocks"].items()}
    for name in cfg.lora_targets if cfg.lora_rank else ():
        part, kernel_name = KERNELS[name]
        adapter = blocks[part].pop(f"{name}_lora")
        kernel = blocks[part][kernel_name]
        delta = jnp.einsum("lir,lro->lio", jnp.asarray(adapter["lora_a"], jnp.float32),
                           jnp.asarray(adapter["lora_b"], jnp.float32))
        merged = kernel.astype(jnp.float32) + cfg.lora_scale * delta.reshape(kernel.shape)
        blocks[part][kernel_name] = merged.astype(kernel.dtype)
    return {**params, "blocks": blocks}


def base_config(cfg: ModelConfig) -> ModelConfig:
    """The same model without adapters."""
    return dataclasses.replace(cfg, lora_rank=0)


def merge_adapters(model: nnx.Module) -> nnx.Module:
    """A model of the same class without adapters whose forward equals the LoRA model's."""
    cfg = model.cfg
    merged = merge_state(cfg, nnx.to_pure_dict(nnx.state(model)))
    plain_cfg = base_config(cfg)
    graphdef, state = nnx.split(nnx.eval_shape(lambda: type(model)(plain_cfg,
                                                                   rngs=nnx.Rngs(0))))
    nnx.replace_by_pure_dict(state, merged)
    return nnx.merge(graphdef, state)
