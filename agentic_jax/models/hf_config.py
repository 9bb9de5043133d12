"""Translation between Hugging Face `config.json` (qwen2 / llama) and ModelConfig."""

from __future__ import annotations

from typing import Any

from agentic_jax.models.config import ModelConfig

_ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}


def config_from_hf(
    hf: dict[str, Any], *, source: str = "config.json", **overrides: Any
) -> ModelConfig:
    """ModelConfig for an HF config dict; `overrides` replace ModelConfig fields (e.g. dtype).

    Raises ValueError naming the field for anything the model cannot represent exactly.
    """
    model_type = hf.get("model_type")
    if model_type not in _ARCHITECTURES:
        raise ValueError(
            f"{source}: model_type {model_type!r} is not supported; expected one of "
            f"{sorted(_ARCHITECTURES)}"
        )
    _require(hf, "hidden_act", "silu", source)
    if model_type == "qwen2":
        _require(hf, "use_sliding_window", False, source)
    else:
        _require(hf, "attention_bias", False, source)
        _require(hf, "mlp_bias", False, source)
    for field in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                  "num_attention_heads"):
        if field not in hf:
            raise ValueError(f"{source}: missing field {field!r}")
    heads = hf["num_attention_heads"]
    fields: dict[str, Any] = dict(
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
        rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
        qkv_bias=model_type == "qwen2",  # Qwen2 attention always has q/k/v bias
        tie_word_embeddings=hf.get("tie_word_embeddings", False),
        max_seq_len=hf.get("max_position_embeddings", 2048),
        family=model_type,
        **_rope_fields(hf, source),
    )
    return ModelConfig(**{**fields, **overrides})


def _require(hf: dict[str, Any], field: str, supported: Any, source: str) -> None:
    if hf.get(field, supported) != supported:
        raise ValueError(
            f"{source}: {field}={hf[field]!r} is not supported (only {supported!r})"
        )


def _rope_fields(hf: dict[str, Any], source: str) -> dict[str, Any]:
    # transformers >= 5 writes `rope_parameters`; older files use rope_theta + rope_scaling.
    params = dict(hf.get("rope_scaling") or {})
    params.update(hf.get("rope_parameters") or {})
    theta = params.get("rope_theta", hf.get("rope_theta", 10000.0))
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        return dict(rope_theta=float(theta))
    if rope_type != "llama3":
        raise ValueError(
            f"{source}: rope type {rope_type!r} is not supported; expected 'default' or 'llama3'"
        )
    return dict(
        rope_theta=float(theta),
        rope_type="llama3",
        rope_factor=float(params["factor"]),
        rope_low_freq_factor=float(params["low_freq_factor"]),
        rope_high_freq_factor=float(params["high_freq_factor"]),
        rope_original_max_len=int(params["original_max_position_embeddings"]),
    )


def config_to_hf(cfg: ModelConfig) -> dict[str, Any]:
    """config.json contents that transformers loads as Qwen2ForCausalLM / LlamaForCausalLM."""
    if cfg.family == "llama" and cfg.qkv_bias:
        raise ValueError(
            "ModelConfig.qkv_bias=True with family='llama' has no Hugging Face equivalent "
            "(Llama's attention_bias also biases o_proj); use family='qwen2'"
        )
    rope: dict[str, Any] = {"rope_type": cfg.rope_type, "rope_theta": cfg.rope_theta}
    if cfg.rope_type == "llama3":
        rope.update(
            factor=cfg.rope_factor,
            low_freq_factor=cfg.rope_low_freq_factor,
            high_freq_factor=cfg.rope_high_freq_factor,
            original_max_position_embeddings=cfg.rope_original_max_len,
        )
    hf: dict[str, Any] = dict(
        architectures=[_ARCHITECTURES[cfg.family]],
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
        rope_parameters=rope,
        dtype=cfg.param_dtype,
    )
    if cfg.family == "llama":
        hf.update(attention_bias=False, mlp_bias=False)
    else:
        hf.update(use_sliding_window=False)
    return hf
