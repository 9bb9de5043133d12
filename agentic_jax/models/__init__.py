"""The policy model: config + presets, NNX transformer, attention, HF import/export."""

from agentic_jax.models.attention import attention
from agentic_jax.models.config import ModelConfig
from agentic_jax.models.hf import from_pretrained
from agentic_jax.models.hf_export import save_pretrained
from agentic_jax.models.lora import ADAPTERS, BASE, merge_adapters, merge_state, trainable_filter
from agentic_jax.models.presets import PRESETS, get_preset
from agentic_jax.models.transformer import ModelOutput, Transformer

__all__ = [
    "ADAPTERS",
    "BASE",
    "ModelConfig",
    "ModelOutput",
    "PRESETS",
    "Transformer",
    "attention",
    "from_pretrained",
    "get_preset",
    "merge_adapters",
    "merge_state",
    "save_pretrained",
    "trainable_filter",
]
