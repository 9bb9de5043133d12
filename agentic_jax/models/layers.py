"""Transformer building blocks: RMSNorm, rotary embeddings, GQA attention, SwiGLU MLP, block.

Every parameter carries logical axis names in its `out_sharding` metadata; the mapping to mesh
axes lives in `agentic_jax.parallel`. Eager sharding is off so that layers never shard themselves.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from agentic_jax.models import cache as kv_cache
from agentic_jax.models.attention import attention
from agentic_jax.models.config import ModelConfig

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
    step; on GPU and TPU the reshapes are free.
    """
    lead, k_in, k_out = x.shape[: x.ndim - in_dims], kernel.shape[:in_dims], kernel.shape[in_dims:]
    if x.shape[x.ndim - in_dims :] != k_in:
        raise ValueError(f"dense: x {x.shape} does not contract with kernel {kernel.shape}")
    rows = x.reshape(-1, math.prod(k_in))
    out = jnp.dot(rows, kernel.reshape(math.prod(k_in), -1),
                  preferred_element_type=preferred_element_type)
    return out.reshape(*lead, *k_out)


def fan_in_init(in_axis: int | tuple[int, ...], out_axis: int | tuple[int, ...]) -> Initializer:
    return nnx.initializers.variance_scaling(
        1.0, "fan_in", "truncated_normal", in_axis=in_axis, out_axis=out_axis
    )


class RMSNorm(nnx.Module):
    """x / rms(x) * scale, normalised in float32 and cast back (as the HF reference does)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.eps = cfg.rms_norm_eps
        self.scale = logical_param(
            rngs, nnx.initializers.ones, (cfg.hidden_size,), ("embed",), cfg.weight_dtype
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        """x [..., E] -> [..., E] in x's dtype."""
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return self.scale[...].astype(x.dtype) * normed.astype(x.dtype)


def rope_inverse_frequencies(cfg: ModelConfig) -> jax.Array:
    """Inverse frequencies [D/2] (float32), with Llama 3.1 scaling when cfg.rope_type='llama3'."""
    exponents = jnp.arange(0, cfg.head_dim, 2, dtype=jnp.float32) / cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta**exponents)
    if cfg.rope_type == "default":
        return inv_freq
    wavelength = 2 * math.pi / inv_freq
    low_freq_wavelength = cfg.rope_original_max_len / cfg.rope_low_freq_factor
    high_freq_wavelength = cfg.rope_original_max_len / cfg.rope_high_freq_factor
    scaled = jnp.where(wavelength > low_freq_wavelength, inv_freq / cfg.rope_factor, inv_freq)
    smooth = (cfg.rope_original_max_len / wavelength - cfg.rope_low_freq_factor) / (
        cfg.rope_high_freq_factor - cfg.rope_low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / cfg.rope_factor + smooth * scaled
    is_medium = (wavelength >= high_freq_wavelength) & (wavelength <= low_freq_wavelength)
    return jnp.where(is_medium, smoothed, scaled)


def apply_rope(x: jax.Array, positions: jax.Array, inv_freq: jax.Array) -> jax.Array:
    """Rotates x [B, T, H, D] by positions [B, T] (half-split layout, as in Qwen2/Llama)."""
    angles = positions.astype(jnp.float32)[:, :, None] * inv_freq[None, None, :]  # [B, T, D/2]
    cos = jnp.cos(angles)[:, :, None, :].astype(x.dtype)
    sin = jnp.sin(angles)[:, :, None, :].astype(x.dtype)
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


class Attention(nnx.Module):
    """Grouped-query self-attention with optional q/k/v bias and a KV cache."""

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

    def _project(self, x: jax.Array, name: str) -> jax.Array:
        """x [B, T, E] -> [B, T, H, D] through `{name}_kernel` (+ bias)."""
        dtype = self.cfg.compute_dtype
        out = dense(x, getattr(self, f"{name}_kernel")[...].astype(dtype))
        if self.cfg.qkv_bias:
            out = out + getattr(self, f"{name}_bias")[...].astype(dtype)
        return out

    def __call__(
        self,
        x: jax.Array,
        positions: jax.Array,
        inv_freq: jax.Array,
        *,
        segment_ids: jax.Array | None = None,
        cache: tuple[jax.Array, jax.Array, jax.Array] | None = None,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
        """x [B, T, E], positions int32 [B, T] -> ([B, T, E], updated (cache_k, cache_v)).

        `cache` is (cache_k, cache_v, layer) with cache_k/v [L, B, S, Hkv, D]; the new keys and
        values go to slots == positions and queries attend causally over the whole cache row.
        """
        q = apply_rope(self._project(x, "q"), positions, inv_freq)
        k = apply_rope(self._project(x, "k"), positions, inv_freq)
        v = self._project(x, "v")
        if cache is None:
            # Without a cache causality follows token order; positions only drive RoPE.
            out = attention(q, k, v, impl=self.cfg.attention_impl, segment_ids=segment_ids)
            new_cache = None
        else:
            cache_k, cache_v, layer = cache
            cache_k, cache_v = kv_cache.write_layer(cache_k, cache_v, layer, k, v, positions)
            layer_k = jax.lax.dynamic_index_in_dim(cache_k, layer, keepdims=False)
            layer_v = jax.lax.dynamic_index_in_dim(cache_v, layer, keepdims=False)
            out = attention(
                q, layer_k.astype(q.dtype), layer_v.astype(q.dtype), impl=self.cfg.attention_impl,
                q_positions=positions, kv_positions=jnp.arange(cache_k.shape[2]),
            )
            new_cache = (cache_k, cache_v)
        o_kernel = self.o_kernel[...].astype(self.cfg.compute_dtype)
        return dense(out, o_kernel, in_dims=2), new_cache


class MLP(nnx.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.dtype = cfg.compute_dtype
        e, m, pd = cfg.hidden_size, cfg.intermediate_size, cfg.weight_dtype
        self.gate_kernel = logical_param(rngs, fan_in_init(0, 1), (e, m), ("embed", "mlp"), pd)
        self.up_kernel = logical_param(rngs, fan_in_init(0, 1), (e, m), ("embed", "mlp"), pd)
        self.down_kernel = logical_param(rngs, fan_in_init(0, 1), (m, e), ("mlp", "embed"), pd)

    def __call__(self, x: jax.Array) -> jax.Array:
        """x [B, T, E] -> [B, T, E]."""
        gate = dense(x, self.gate_kernel[...].astype(self.dtype))
        up = dense(x, self.up_kernel[...].astype(self.dtype))
        return dense(jax.nn.silu(gate) * up, self.down_kernel[...].astype(self.dtype))


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
        cache: tuple[jax.Array, jax.Array, jax.Array] | None = None,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
        """Same contract as `Attention.__call__`; x [B, T, E]."""
        attn_out, new_cache = self.attn(
            self.attn_norm(x), positions, inv_freq, segment_ids=segment_ids, cache=cache
        )
        x = x + attn_out
        return x + self.mlp(self.mlp_norm(x)), new_cache
