"""Model configuration: one frozen dataclass describing a decoder-only transformer's shapes."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
REMAT_POLICIES = ("none", "full", "dots")
ATTENTION_IMPLS = ("xla", "pallas", "cudnn", "auto")
FAMILIES = ("qwen2", "qwen3", "llama")
ROPE_TYPES = ("default", "linear", "llama3", "yarn")
# Projections that can carry LoRA adapters, by their Hugging Face module names.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
TokenIds = int | tuple[int, ...] | None

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
    RoPE scaling (`rope_type`, as transformers names it): "linear" divides every frequency by
    `rope_factor`; "llama3" is Llama 3.1's frequency-dependent scaling (`rope_factor`,
    `rope_low_freq_factor`, `rope_high_freq_factor`, `rope_original_max_len`); "yarn" blends
    interpolated and original frequencies over the band set by `rope_beta_fast` /
    `rope_beta_slow` (rotations within `rope_original_max_len`) and scales cos/sin by
    `rope_attention_factor` (None: 0.1 ln(factor) + 1). `qk_norm` adds Qwen3's per-head RMSNorm
    of queries and keys before RoPE. `scan_unroll` layers run per iteration of the loop over
    the stacked layers (`num_layers` unrolls it: faster steps for small models on CPU, longer
    compiles).

    `lora_rank` > 0 adds LoRA adapters (`nnx.LoRAParam`) to the `lora_targets` projections,
    scaled by `lora_alpha / lora_rank`. `bos_token_id` / `eos_token_id` / `pad_token_id` are
    carried from a Hugging Face config to its export unchanged (an id, a tuple of ids, or None).
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
    rope_beta_fast: float = 32.0
    rope_beta_slow: float = 1.0
    rope_attention_factor: float | None = None
    rope_truncate: bool = True
    qk_norm: bool = False
    lora_rank: int = 0
    lora_alpha: float = 16.0
    lora_targets: tuple[str, ...] = LORA_TARGETS
    bos_token_id: TokenIds = None
    eos_token_id: TokenIds = None
    pad_token_id: TokenIds = None

    def __post_init__(self) -> None:
        # Lists (from JSON) become tuples: the config is a static, hashable part of the model.
        for name in ("lora_targets", "bos_token_id", "eos_token_id", "pad_token_id"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
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
        if self.rope_type != "default" and self.rope_factor <= 0:
            raise ValueError(f"ModelConfig.rope_factor must be > 0, got {self.rope_factor}")
        self._check_lora()

    def _check_lora(self) -> None:
        if not isinstance(self.lora_rank, int) or isinstance(self.lora_rank, bool) \
                or self.lora_rank < 0:
            raise ValueError(f"ModelConfig.lora_rank must be an int >= 0, got {self.lora_rank!r}")
        if self.lora_rank and self.lora_alpha <= 0:
            raise ValueError(f"ModelConfig.lora_alpha must be > 0, got {self.lora_alpha}")
        unknown = [t for t in self.lora_targets if t not in LORA_TARGETS]
        if unknown or (self.lora_rank and not self.lora_targets):
            raise ValueError(f"ModelConfig.lora_targets must be a non-empty subset of "
                             f"{LORA_TARGETS}, got {self.lora_targets!r}")

    @property
    def compute_dtype(self) -> Any:
        return DTYPES[self.dtype]

    @property
    def weight_dtype(self) -> Any:
        return DTYPES[self.param_dtype]

    @property
    def lora_scale(self) -> float:
        """alpha / rank: the factor on every adapter's output."""
        return self.lora_alpha / self.lora_rank if self.lora_rank else 0.0

    def projection_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) widths of every linear projection of one block, by HF module name."""
        e, m = self.hidden_size, self.intermediate_size
        q_width, kv_width = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return {"q_proj": (e, q_width), "k_proj": (e, kv_width), "v_proj": (e, kv_width),
                "o_proj": (q_width, e), "gate_proj": (e, m), "up_proj": (e, m),
                "down_proj": (m, e)}

    def num_lora_params(self) -> int:
        """Scalar parameters of the LoRA adapters alone (0 without adapters)."""
        if not self.lora_rank:
            return 0
        shapes = self.projection_shapes()
        per_layer = sum(self.lora_rank * sum(shapes[t]) for t in self.lora_targets)
        return self.num_layers * per_layer

    def num_params(self) -> int:
        """Exact number of scalar parameters of `Transformer(self)`, adapters included."""
        e, d = self.hidden_size, self.head_dim
        q_width, kv_width = self.num_heads * d, self.num_kv_heads * d
        shapes = self.projection_shapes()
        attention = sum(i * o for i, o in (shapes[n] for n in ("q_proj", "k_proj", "v_proj",
                                                                "o_proj")))
        if self.qkv_bias:
            attention += q_width + 2 * kv_width
        if self.qk_norm:
            attention += 2 * d
        mlp = 3 * e * self.intermediate_size
        per_layer = attention + mlp + 2 * e  # two RMSNorm scales
        total = self.vocab_size * e + self.num_layers * per_layer + e  # embedding, final norm
        if not self.tie_word_embeddings:
            total += e * self.vocab_size
        if self.value_head:
            total += e + 1
        return total + self.num_lora_params()


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"ModelConfig.{name} must be one of {choices}, got {value!r}")
