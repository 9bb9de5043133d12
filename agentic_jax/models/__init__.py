"""The policy model: config + presets, NNX transformer, KV cache, attention, HF import/export."""

from agentic_jax.models.attention import attention
from agentic_jax.models.cache import KVCache, init_cache
from agentic_jax.models.config import ModelConfig
from agentic_jax.models.hf import from_pretrained, save_pretrained
from agentic_jax.models.presets import PRESETS, get_preset
from agentic_jax.models.transformer import ModelOutput, Transformer

__all__ = [
    "KVCache",
    "ModelConfig",
    "ModelOutput",
    "PRESETS",
    "Transformer",
    "attention",
    "from_pretrained",
    "get_preset",
    "init_cache",
    "save_pretrained",
]
