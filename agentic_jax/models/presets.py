"""Named model shapes: a ladder of tiny CPU models and the real Qwen2.5 / Llama 3 shapes."""

from __future__ import annotations

import dataclasses
from typing import Any

from agentic_jax.errors import UserError
from agentic_jax.models.config import ModelConfig


def _tiny(
    hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, mlp: int
) -> ModelConfig:
    # Qwen2.5-style blocks (q/k/v bias, tied embeddings); the names give the parameter count at
    # vocab_size=1024, the sizes a scaling-law sweep steps through.
    return ModelConfig(
        vocab_size=1024,
        hidden_size=hidden,
        intermediate_size=mlp,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        qkv_bias=True,
        tie_word_embeddings=True,
        family="qwen2",
    )


def _qwen25(vocab: int, hidden: int, mlp: int, layers: int, heads: int, kv_heads: int,
            tied: bool) -> ModelConfig:
    return ModelConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=mlp, num_layers=layers,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=hidden // heads, tie_word_embeddings=tied,
        rope_theta=1_000_000.0, rms_norm_eps=1e-6, qkv_bias=True, max_seq_len=32768,
        family="qwen2",
    )


def _llama3(hidden: int, mlp: int, layers: int, heads: int, kv_heads: int, tied: bool,
            rope_factor: float) -> ModelConfig:
    # Llama 3.1 / 3.2 extend context with "llama3" RoPE scaling from an 8192-token original.
    return ModelConfig(
        vocab_size=128256, hidden_size=hidden, intermediate_size=mlp, num_layers=layers,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=hidden // heads, tie_word_embeddings=tied,
        rope_theta=500_000.0, rms_norm_eps=1e-5, qkv_bias=False, max_seq_len=131072,
        family="llama", rope_type="llama3", rope_factor=rope_factor, rope_low_freq_factor=1.0,
        rope_high_freq_factor=4.0, rope_original_max_len=8192,
    )


PRESETS: dict[str, ModelConfig] = {
    "tiny-0.1m": _tiny(hidden=48, layers=2, heads=4, kv_heads=2, head_dim=12, mlp=128),
    "tiny-0.2m": _tiny(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, mlp=256),
    "tiny-1m": _tiny(hidden=128, layers=4, heads=4, kv_heads=2, head_dim=32, mlp=384),
    "tiny-4m": _tiny(hidden=256, layers=5, heads=8, kv_heads=4, head_dim=32, mlp=768),
    "tiny-16m": _tiny(hidden=384, layers=9, heads=6, kv_heads=2, head_dim=64, mlp=1152),
    "tiny-60m": _tiny(hidden=640, layers=12, heads=10, kv_heads=2, head_dim=64, mlp=2048),
    "qwen2.5-0.5b": _qwen25(151936, 896, 4864, 24, 14, 2, tied=True),
    "qwen2.5-1.5b": _qwen25(151936, 1536, 8960, 28, 12, 2, tied=True),
    "qwen2.5-7b": _qwen25(152064, 3584, 18944, 28, 28, 4, tied=False),
    "llama-3.2-1b": _llama3(2048, 8192, 16, 32, 8, tied=True, rope_factor=32.0),
    "llama-3.1-8b": _llama3(4096, 14336, 32, 32, 8, tied=False, rope_factor=8.0),
}


def get_preset(name: str, **overrides: Any) -> ModelConfig:
    """Returns the preset `name` with any ModelConfig fields replaced, e.g. `vocab_size=...`."""
    if name not in PRESETS:
        raise UserError(f"unknown model preset {name!r}; expected one of {sorted(PRESETS)}")
    return dataclasses.replace(PRESETS[name], **overrides)
