"""Run utilities: orbax checkpoints and metrics writers."""

from agentic_jax.utils.checkpoint import Checkpointer, Restored
from agentic_jax.utils.metrics import MetricsWriter, read_metrics

__all__ = ["Checkpointer", "Restored", "MetricsWriter", "read_metrics"]
