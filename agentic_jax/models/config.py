"""Model configuration: one frozen dataclass describing a decoder-only transformer's shapes."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
REMAT_POLICIES = ("none", "full", "dots")
ATTENTION_IMPLS = ("xla", "pallas", "cudnn", "auto")
FAMILIES = ("qwen2", "llama")
ROPE_TYPES = ("default", "llama3")

_POSITIVE_INT_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "max_seq_len",
    "scan_unroll",
)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shapes and numerics of a Qwen2/Llama-style decoder.

    `dtype` is the compute dtype, `param_dtype` the storage dtype of the parameters (e.g. bfloat16
    compute over float32 master weights). Logits and values are always returned in float32.
    `rope_type="llama3"` enables Llama 3.1's frequency-dependent RoPE scaling, parameterised by
    the `rope_factor`, `rope_low_freq_factor`, `rope_high_freq_factor` and
    `rope_original_max_len` fields (ignored for `"default"`). `scan_unroll` layers run per
    iteration of the loop over the stacked layers (`num_layers` unrolls it: faster steps for
    small models on CPU, longer compiles).
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    qkv_bias: bool = False
    tie_word_embeddings: bool = True
    value_head: bool = False
    dtype: str = "float32"
    param_dtype: str = "float32"
    remat: str = "none"
    attention_impl: str = "xla"
    scan_unroll: int = 1
    max_seq_len: int = 2048
    family: str = "qwen2"
    rope_type: str = "default"
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_len: int = 8192

    def __post_init__(self) -> None:
        for name in _POSITIVE_INT_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelConfig.num_heads ({self.num_heads}) must be a multiple of "
                f"ModelConfig.num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"ModelConfig.head_dim must be even for RoPE, got {self.head_dim}")
        _check_choice("dtype", self.dtype, tuple(DTYPES))
        _check_choice("param_dtype", self.param_dtype, tuple(DTYPES))
        _check_choice("remat", self.remat, REMAT_POLICIES)
        _check_choice("attention_impl", self.attention_impl, ATTENTION_IMPLS)
        _check_choice("family", self.family, FAMILIES)
        _check_choice("rope_type", self.rope_type, ROPE_TYPES)
        if self.rope_theta <= 0 or self.rms_norm_eps <= 0:
            raise ValueError(
                f"ModelConfig.rope_theta and rms_norm_eps must be > 0, got "
                f"{self.rope_theta} and {self.rms_norm_eps}"
            )

    @property
    def compute_dtype(self) -> Any:
        return DTYPES[self.dtype]

    @property
    def weight_dtype(self) -> Any:
        return DTYPES[self.param_dtype]

    def num_params(self) -> int:
        """Exact number of scalar parameters of `Transformer(self)`."""
        e, d = self.hidden_size, self.head_dim
        q_width, kv_width = self.num_heads * d, self.num_kv_heads * d
        attention = e * q_width + 2 * e * kv_width + q_width * e
        if self.qkv_bias:
            attention += q_width + 2 * kv_width
        mlp = 3 * e * self.intermediate_size
        per_layer = attention + mlp + 2 * e  # two RMSNorm scales
        total = self.vocab_size * e + self.num_layers * per_layer + e  # embedding, final norm
        if not self.tie_word_embeddings:
            total += e * self.vocab_size
        if self.value_head:
            total += e + 1
        return total


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"ModelConfig.{name} must be one of {choices}, got {value!r}")
