"""Rotary position embeddings and their context-extension scalings (linear, llama3, yarn).

The frequencies follow transformers' `modeling_rope_utils` definitions, so a checkpoint's
`rope_parameters` mean the same thing here as there.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from agentic_jax.models.config import ModelConfig


def rope_inverse_frequencies(cfg: ModelConfig) -> jax.Array:
    """Inverse frequencies [D/2] (float32) of `cfg.rope_type`'s scaling.

    default: theta^(-2i/D); linear: default / factor; llama3: Llama 3.1's wavelength bands;
    yarn: a blend of default and default / factor ramped over the YaRN correction range.
    """
    exponents = jnp.arange(0, cfg.head_dim, 2, dtype=jnp.float32) / cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta**exponents)
    if cfg.rope_type == "linear":
        return inv_freq / cfg.rope_factor
    if cfg.rope_type == "llama3":
        return _llama3(cfg, inv_freq)
    if cfg.rope_type == "yarn":
        return _yarn(cfg, inv_freq)
    return inv_freq


def rope_attention_factor(cfg: ModelConfig) -> float:
    """The factor YaRN puts on cos and sin (1.0 for every other scaling)."""
    if cfg.rope_type != "yarn":
        return 1.0
    if cfg.rope_attention_factor is not None:
        return float(cfg.rope_attention_factor)
    return yarn_mscale(cfg.rope_factor)


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """0.1 * mscale * ln(factor) + 1 for factor > 1, else 1 (the YaRN paper's temperature)."""
    return 0.1 * mscale * math.log(factor) + 1.0 if factor > 1 else 1.0


def _llama3(cfg: ModelConfig, inv_freq: jax.Array) -> jax.Array:
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


def _yarn(cfg: ModelConfig, inv_freq: jax.Array) -> jax.Array:
    """Dimensions that turn more than beta_fast times within the original context keep their
    frequency, those under beta_slow turns are interpolated by 1/factor, a linear ramp between."""
    dim, base = cfg.head_dim, cfg.rope_theta

    def correction_dim(rotations: float) -> float:
        return dim * math.log(cfg.rope_original_max_len / (rotations * 2 * math.pi)) / (
            2 * math.log(base))

    low, high = correction_dim(cfg.rope_beta_fast), correction_dim(cfg.rope_beta_slow)
    if cfg.rope_truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # a zero-width ramp would divide by zero
    ramp = jnp.clip((jnp.arange(dim // 2, dtype=jnp.float32) - low) / (high - low), 0, 1)
    keep = 1 - ramp  # 1: extrapolate (original frequency), 0: interpolate
    return inv_freq / cfg.rope_factor * (1 - keep) + inv_freq * keep


def apply_rope(x: jax.Array, positions: jax.Array, inv_freq: jax.Array,
               attention_factor: float = 1.0) -> jax.Array:
    """Rotates x [B, T, H, D] by positions [B, T] (half-split layout, as in Qwen2/Llama).

    cos and sin are multiplied by `attention_factor` (YaRN) in float32 before the cast.
    """
    angles = positions.astype(jnp.float32)[:, :, None] * inv_freq[None, None, :]  # [B, T, D/2]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    if attention_factor != 1.0:
        cos, sin = cos * attention_factor, sin * attention_factor
    cos = cos[:, :, None, :].astype(x.dtype)
    sin = sin[:, :, None, :].astype(x.dtype)
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
