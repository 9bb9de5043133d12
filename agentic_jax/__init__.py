"""agentic_jax: reinforcement learning of tool-using language models on math, in JAX."""

__version__ = "0.1.0"
