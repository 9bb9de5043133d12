"""Transformer building blocks: RMSNorm, GQA attention (optional q/k norm), SwiGLU MLP, block.

Every parameter carries logical axis names in its `out_sharding` metadata; the mapping to mesh
axes lives in `agentic_jax.parallel`. Eager sharding is off so that layers never shard themselves.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from agentic_jax.models.attention import KVStore, attention
from agentic_jax.models.config import ModelConfig
from agentic_jax.models.lora import adapter_output, attach_adapters
from agentic_jax.models.rope import apply_rope, rope_attention_factor, rope_inverse_frequencies

__all__ = ["Attention", "Block", "MLP", "RMSNorm", "apply_rope", "dense", "fan_in_init",
           "logical_param", "rope_inverse_frequencies"]

Initializer = Callable[..., jax.Array]


def logical_param(
    rngs: nnx.Rngs, init: Initializer, shape: tuple[int, ...], axes: tuple[str | None, ...],
    dtype: jnp.dtype,
) -> nnx.Param:
    """A parameter annotated with logical axis names, one per dimension."""
    if len(axes) != len(shape):
        raise ValueError(f"logical axes {axes} do not match parameter shape {shape}")
    return nnx.Param(init(rngs.params(), shape, dtype), out_sharding=axes, eager_sharding=False)


def dense(x: jax.Array, kernel: jax.Array, *, in_dims: int = 1,
          preferred_element_type: jnp.dtype | None = None) -> jax.Array:
    """Contracts x's last `in_dims` dims with kernel's first `in_dims` dims: [..., I] x [I, O].

    Runs as one 2-D matmul over flattened rows: for a rank-3 dot_general XLA:CPU lays the weight
    gradient out through an explicit transpose that costs a quarter of a small model's train
    step; on GPU and TPU the reshapes are free. 16-bit operands accumulate in float32 and the
    result is cast back (what GPU and TPU matmuls do anyway): XLA:CPU has no bfloat16-output
    matmul and would otherwise convert both operands, the weight included, to float32 first.
    """
    lead, k_in, k_out = x.shape[: x.ndim - in_dims], kernel.shape[:in_dims], kernel.shape[in_dims:]
    if x.shape[x.ndim - in_dims :] != k_in:
        raise ValueError(f"dense: x {x.shape} does not contract with kernel {kernel.shape}")
    rows = x.reshape(-1, math.prod(k_in))
    result_dtype = preferred_element_type or jnp.result_type(x, kernel)
    if preferred_element_type is None and jnp.dtype(result_dtype).itemsize < 4 and \
            jnp.issubdtype(result_dtype, jnp.floating):
        preferred_element_type = jnp.float32
    out = jnp.dot(rows, kernel.reshape(math.prod(k_in), -1),
                  preferred_element_type=preferred_element_type)
    return out.reshape(*lead, *k_out).astype(result_dtype)


def fan_in_init(in_axis: int | tuple[int, ...], out_axis: int | tuple[int, ...]) -> Initializer:
    return nnx.initializers.variance_scaling(
        1.0, "fan_in", "truncated_normal", in_axis=in_axis, out_axis=out_axis
    )


class RMSNorm(nnx.Module):
    """x / rms(x) * scale, normalised in float32 and cast back (as the HF reference does)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, dim: int | None = None,
                 axis: str = "embed"):
        self.eps = cfg.rms_norm_eps
        self.scale = logical_param(
            rngs, nnx.initializers.ones, (dim or cfg.hidden_size,), (axis,), cfg.weight_dtype
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        """x [..., E] -> [..., E] in x's dtype."""
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return self.scale[...].astype(x.dtype) * normed.astype(x.dtype)


class Attention(nnx.Module):
    """Grouped-query self-attention with optional q/k/v bias, per-head q/k RMSNorm (Qwen3),
    LoRA adapters, over the current chunk or a `KVStore` (a KV cache)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        e, d, pd = cfg.hidden_size, cfg.head_dim, cfg.weight_dtype
        proj_init = fan_in_init(0, (1, 2))
        self.q_kernel = logical_param(rngs, proj_init, (e, cfg.num_heads, d),
                                      ("embed", "heads", "head_dim"), pd)
        self.k_kernel = logical_param(rngs, proj_init, (e, cfg.num_kv_heads, d),
                                      ("embed", "kv_heads", "head_dim"), pd)
        self.v_kernel = logical_param(rngs, proj_init, (e, cfg.num_kv_heads, d),
                                      ("embed", "kv_heads", "head_dim"), pd)
        self.o_kernel = logical_param(rngs, fan_in_init((0, 1), 2), (cfg.num_heads, d, e),
                                      ("heads", "head_dim", "embed"), pd)
        if cfg.qkv_bias:
            zeros = nnx.initializers.zeros
            self.q_bias = logical_param(rngs, zeros, (cfg.num_heads, d), ("heads", "head_dim"), pd)
            self.k_bias = logical_param(rngs, zeros, (cfg.num_kv_heads, d),
                                        ("kv_heads", "head_dim"), pd)
            self.v_bias = logical_param(rngs, zeros, (cfg.num_kv_heads, d),
                                        ("kv_heads", "head_dim"), pd)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg, rngs=rngs, dim=d, axis="head_dim")
            self.k_norm = RMSNorm(cfg, rngs=rngs, dim=d, axis="head_dim")
        attach_adapters(self, cfg, ("q_proj", "k_proj", "v_proj", "o_proj"), rngs)
        self.attention_factor = rope_attention_factor(cfg)

    def _project(self, x: jax.Array, name: str, adapters: bool = True) -> jax.Array:
        """x [B, T, E] -> [B, T, H, D] through `{name}_kernel` (+ bias, + adapter)."""
        dtype = self.cfg.compute_dtype
        out = dense(x, getattr(self, f"{name}_kernel")[...].astype(dtype))
        if self.cfg.qkv_bias:
            out = out + getattr(self, f"{name}_bias")[...].astype(dtype)
        if adapters:
            out = adapter_output(self, f"{name}_proj", x, out, self.cfg.lora_scale)
        return out

    def _rope(self, x: jax.Array, name: str, positions: jax.Array,
              inv_freq: jax.Array) -> jax.Array:
        if self.cfg.qk_norm:
            x = getattr(self, f"{name}_norm")(x)
        return apply_rope(x, positions, inv_freq, self.attention_factor)

    def qkv(self, x: jax.Array, positions: jax.Array, inv_freq: jax.Array,
            adapters: bool = True) -> tuple[jax.Array, jax.Array, jax.Array]:
        """x [B, T, E] -> q [B, T, Hq, D], k and v [B, T, Hkv, D]: projected, q/k normed (when
        the model has q/k norms) and rotated; what any attention backend consumes."""
        q = self._rope(self._project(x, "q", adapters), "q", positions, inv_freq)
        k = self._rope(self._project(x, "k", adapters), "k", positions, inv_freq)
        return q, k, self._project(x, "v", adapters)

    def project_out(self, out: jax.Array, adapters: bool = True) -> jax.Array:
        """Attention output [B, T, Hq, D] -> [B, T, E] through o_proj (+ adapter)."""
        projected = dense(out, self.o_kernel[...].astype(self.cfg.compute_dtype), in_dims=2)
        if not adapters:
            return projected
        flat = out.reshape(*out.shape[:2], -1)
        return adapter_output(self, "o_proj", flat, projected, self.cfg.lora_scale)

    def __call__(
        self,
        x: jax.Array,
        positions: jax.Array,
        inv_freq: jax.Array,
        *,
        segment_ids: jax.Array | None = None,
        kv_store: KVStore | None = None,
        adapters: bool = True,
    ) -> tuple[jax.Array, KVStore | None]:
        """x [B, T, E], positions int32 [B, T] -> ([B, T, E], the updated `kv_store`).

        Without a store, queries attend causally (in token order, within equal `segment_ids`)
        to the chunk's own keys and values; positions only drive RoPE. With one, the store
        writes them and attends (`KVStore.attend`). `adapters=False` runs the base weights
        alone (LoRA models).
        """
        q, k, v = self.qkv(x, positions, inv_freq, adapters)
        if kv_store is None:
            out = attention(q, k, v, impl=self.cfg.attention_impl, segment_ids=segment_ids)
        else:
            out, kv_store = kv_store.attend(q, k, v, positions)
        return self.project_out(out, adapters), kv_store


class MLP(nnx.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.dtype = cfg.compute_dtype
        e, m, pd = cfg.hidden_size, cfg.intermediate_size, cfg.weight_dtype
        self.gate_kernel = logical_param(rngs, fan_in_init(0, 1), (e, m), ("embed", "mlp"), pd)
        self.up_kernel = logical_param(rngs, fan_in_init(0, 1), (e, m), ("embed", "mlp"), pd)
        self.down_kernel = logical_param(rngs, fan_in_init(0, 1), (m, e), ("mlp", "embed"), pd)
        attach_adapters(self, cfg, ("gate_proj", "up_proj", "down_proj"), rngs)
        self.lora_scale = cfg.lora_scale

    def _project(self, x: jax.Array, name: str, adapters: bool) -> jax.Array:
        """x [..., in] -> [..., out] through `{name}_kernel` (+ adapter)."""
        out = dense(x, getattr(self, f"{name}_kernel")[...].astype(self.dtype))
        if adapters:
            out = adapter_output(self, f"{name}_proj", x, out, self.lora_scale)
        return out

    def __call__(self, x: jax.Array, adapters: bool = True) -> jax.Array:
        """x [B, T, E] -> [B, T, E]."""
        hidden = jax.nn.silu(self._project(x, "gate", adapters)) * self._project(x, "up", adapters)
        return self._project(hidden, "down", adapters)


class Block(nnx.Module):
    """Pre-norm decoder block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.attn_norm = RMSNorm(cfg, rngs=rngs)
        self.attn = Attention(cfg, rngs=rngs)
        self.mlp_norm = RMSNorm(cfg, rngs=rngs)
        self.mlp = MLP(cfg, rngs=rngs)

    def __call__(
        self,
        x: jax.Array,
        positions: jax.Array,
        inv_freq: jax.Array,
        *,
        segment_ids: jax.Array | None = None,
        kv_store: KVStore | None = None,
        adapters: bool = True,
    ) -> tuple[jax.Array, KVStore | None]:
        """Same contract as `Attention.__call__`; x [B, T, E]."""
        attn_out, kv_store = self.attn(
            self.attn_norm(x), positions, inv_freq, segment_ids=segment_ids, kv_store=kv_store,
            adapters=adapters,
        )
        x = x + attn_out
        return x + self.mlp(self.mlp_norm(x), adapters), kv_store
