"""Run utilities: orbax checkpoints, metrics writers, atomic JSON files.

Names load lazily, so tools that only read metrics do not import JAX and orbax.
"""

import importlib

_EXPORTS = {
    "Checkpointer": "agentic_jax.utils.checkpoint",
    "Restored": "agentic_jax.utils.checkpoint",
    "MetricsWriter": "agentic_jax.utils.metrics",
    "read_metrics": "agentic_jax.utils.metrics",
    "enable_compile_cache": "agentic_jax.utils.compile_cache",
    "read_json": "agentic_jax.utils.files",
    "round_up": "agentic_jax.utils.files",
    "write_json": "agentic_jax.utils.files",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'agentic_jax.utils' has no attribute {name!r}")
