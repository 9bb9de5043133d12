"""Pallas flash attention (forward + backward, causal, GQA, segment ids) and its reference."""

from agentic_jax.kernels.flash_attention import flash_attention
from agentic_jax.kernels.reference import reference_attention

__all__ = ["flash_attention", "reference_attention"]
