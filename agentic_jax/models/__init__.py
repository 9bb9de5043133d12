"""The policy model: config + presets, NNX transformer, KV cache, attention, HF import/export."""

from agentic_jax.models.attention import attention
from agentic_jax.models.cache import KVCache, init_cache
from agentic_jax.models.config import ModelConfig
from agentic_jax.models.hf import from_pretrained
from agentic_jax.models.hf_export import save_pretrained
from agentic_jax.models.lora import ADAPTERS, BASE, merge_adapters, merge_state, trainable_filter
from agentic_jax.models.presets import PRESETS, get_preset
from agentic_jax.models.transformer import ModelOutput, Transformer

__all__ = [
    "ADAPTERS",
    "BASE",
    "KVCache",
    "ModelConfig",
    "ModelOutput",
    "PRESETS",
    "Transformer",
    "attention",
    "from_pretrained",
    "get_preset",
    "init_cache",
    "merge_adapters",
    "merge_state",
    "save_pretrained",
    "trainable_filter",
]
