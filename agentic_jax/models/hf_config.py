"""Translation between Hugging Face `config.json` (qwen2 / qwen3 / llama) and ModelConfig.

Exports are read as the same model by transformers 4.x and 5.x: RoPE is written both as 5.x's
`rope_parameters` and as 4.x's `rope_scaling` + `rope_theta`, the dtype as `dtype` and
`torch_dtype`, and the special token ids as the source had them.
"""

from __future__ import annotations

from typing import Any

from agentic_jax.errors import UserError
from agentic_jax.models.config import ModelConfig
from agentic_jax.models.rope import yarn_mscale

ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "llama": "LlamaForCausalLM"}
TOKEN_ID_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id")
# transformers' Qwen3Config has an explicit head_dim whose default is not hidden / heads.
_QWEN3_HEAD_DIM = 128


def config_from_hf(
    hf: dict[str, Any], *, source: str = "config.json", **overrides: Any
) -> ModelConfig:
    """ModelConfig for an HF config dict; `overrides` replace ModelConfig fields (e.g. dtype).

    Raises ValueError naming the field for anything the model cannot represent exactly.
    """
    model_type = hf.get("model_type")
    if model_type not in ARCHITECTURES:
        raise UserError(
            f"{source}: model_type {model_type!r} is not supported; expected one of "
            f"{sorted(ARCHITECTURES)}"
        )
    _require(hf, "hidden_act", "silu", source)
    if model_type in ("qwen2", "qwen3"):
        _require(hf, "use_sliding_window", False, source)
    if model_type in ("qwen3", "llama"):
        _require(hf, "attention_bias", False, source)
    if model_type == "llama":
        _require(hf, "mlp_bias", False, source)
    for field in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                  "num_attention_heads"):
        if field not in hf:
            raise UserError(f"{source}: missing field {field!r}")
    heads = hf["num_attention_heads"]
    default_head_dim = _QWEN3_HEAD_DIM if model_type == "qwen3" else hf["hidden_size"] // heads
    fields: dict[str, Any] = dict(
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim") or default_head_dim,
        rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
        qkv_bias=model_type == "qwen2",  # Qwen2 attention always has q/k/v bias
        qk_norm=model_type == "qwen3",
        tie_word_embeddings=hf.get("tie_word_embeddings", False),
        max_seq_len=hf.get("max_position_embeddings", 2048),
        family=model_type,
        **{name: hf.get(name) for name in TOKEN_ID_FIELDS},
        **_rope_fields(hf, source),
    )
    return ModelConfig(**{**fields, **overrides})


def _require(hf: dict[str, Any], field: str, supported: Any, source: str) -> None:
    if hf.get(field, supported) != supported:
        raise UserError(
            f"{source}: {field}={hf[field]!r} is not supported (only {supported!r})"
        )


def _rope_fields(hf: dict[str, Any], source: str) -> dict[str, Any]:
    # transformers >= 5 writes `rope_parameters`; older files use rope_theta + rope_scaling.
    params = dict(hf.get("rope_scaling") or {})
    params.update(hf.get("rope_parameters") or {})
    theta = float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))
    rope_type = params.get("rope_type", params.get("type", "default"))
    original = int(params.get("original_max_position_embeddings")
                   or hf.get("max_position_embeddings", 2048))
    # "dynamic" NTK changes frequencies only past max_position_embeddings, where transformers
    # itself recomputes them per call; within the model's context it is plain RoPE.
    if rope_type in ("default", "dynamic"):
        return dict(rope_theta=theta)
    if rope_type == "linear":
        return dict(rope_theta=theta, rope_type="linear", rope_factor=float(params["factor"]))
    if rope_type == "llama3":
        return dict(
            rope_theta=theta, rope_type="llama3", rope_factor=float(params["factor"]),
            rope_low_freq_factor=float(params["low_freq_factor"]),
            rope_high_freq_factor=float(params["high_freq_factor"]),
            rope_original_max_len=original,
        )
    if rope_type == "yarn":
        return _yarn_fields(hf, params, theta, original)
    raise UserError(
        f"{source}: rope type {rope_type!r} is not supported; expected one of "
        "'default', 'linear', 'dynamic', 'llama3', 'yarn'"
    )


def _yarn_fields(hf: dict[str, Any], params: dict[str, Any], theta: float,
                 original: int) -> dict[str, Any]:
    factor = params.get("factor")
    if factor is None:  # as transformers: the ratio of the extended to the original context
        factor = hf.get("max_position_embeddings", original) / original
    attention_factor = params.get("attention_factor")
    mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
    if attention_factor is None and mscale and mscale_all_dim:
        attention_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
    return dict(
        rope_theta=theta, rope_type="yarn", rope_factor=float(factor),
        rope_original_max_len=original,
        rope_beta_fast=float(params.get("beta_fast") or 32.0),
        rope_beta_slow=float(params.get("beta_slow") or 1.0),
        rope_attention_factor=None if attention_factor is None else float(attention_factor),
        rope_truncate=bool(params.get("truncate", True)),
    )


def rope_scaling_to_hf(cfg: ModelConfig) -> dict[str, Any] | None:
    """The scaling part of RoPE in transformers' keys (None for plain RoPE)."""
    if cfg.rope_type == "default":
        return None
    scaling: dict[str, Any] = {"rope_type": cfg.rope_type, "factor": cfg.rope_factor}
    if cfg.rope_type == "llama3":
        scaling.update(low_freq_factor=cfg.rope_low_freq_factor,
                       high_freq_factor=cfg.rope_high_freq_factor,
                       original_max_position_embeddings=cfg.rope_original_max_len)
    if cfg.rope_type == "yarn":
        scaling.update(original_max_position_embeddings=cfg.rope_original_max_len,
                       beta_fast=cfg.rope_beta_fast, beta_slow=cfg.rope_beta_slow)
        if cfg.rope_attention_factor is not None:
            scaling["attention_factor"] = cfg.rope_attention_factor
        if not cfg.rope_truncate:
            scaling["truncate"] = False
    return scaling


def config_to_hf(cfg: ModelConfig) -> dict[str, Any]:
    """config.json contents that transformers loads as Qwen2/Qwen3/LlamaForCausalLM."""
    if cfg.family != "qwen2" and cfg.qkv_bias:
        raise UserError(
            f"ModelConfig.qkv_bias=True with family={cfg.family!r} has no Hugging Face "
            "equivalent (its attention_bias also biases o_proj); use family='qwen2'"
        )
    if cfg.qk_norm != (cfg.family == "qwen3"):
        raise UserError(
            f"ModelConfig.qk_norm={cfg.qk_norm} with family={cfg.family!r}: Hugging Face has "
            "q/k norms exactly in family='qwen3'"
        )
    scaling = rope_scaling_to_hf(cfg)
    hf: dict[str, Any] = dict(
        architectures=[ARCHITECTURES[cfg.family]],
        model_type=cfg.family,
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        hidden_act="silu",
        max_position_embeddings=cfg.max_seq_len,
        rms_norm_eps=cfg.rms_norm_eps,
        tie_word_embeddings=cfg.tie_word_embeddings,
        rope_theta=cfg.rope_theta,
        rope_scaling=scaling,
        rope_parameters={"rope_type": cfg.rope_type, "rope_theta": cfg.rope_theta,
                         **(scaling or {})},
        dtype=cfg.param_dtype,
        torch_dtype=cfg.param_dtype,
    )
    hf.update({name: getattr(cfg, name) for name in TOKEN_ID_FIELDS
               if getattr(cfg, name) is not None})
    if cfg.family in ("qwen3", "llama"):
        hf.update(attention_bias=False)
    if cfg.family == "llama":
        hf.update(mlp_bias=False)
    else:
        hf.update(use_sliding_window=False)
    return hf
