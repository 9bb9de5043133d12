"""Pallas flash attention (forward + backward, causal, GQA, segment ids), its reference, and
attention over a paged KV cache (decode kernel + XLA gather path; on CPU a native decode kernel,
`agentic_jax.kernels.cpu_native`, imported where used: it compiles on first use)."""

from agentic_jax.kernels.flash_attention import flash_attention
from agentic_jax.kernels.paged_attention import paged_attention_xla, paged_decode_attention
from agentic_jax.kernels.reference import reference_attention

__all__ = ["flash_attention", "paged_attention_xla", "paged_decode_attention",
           "reference_attention"]
