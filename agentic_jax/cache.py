"""The package's cache directory: models converted from GGUF (``gguf/``), compiled XLA programs
(``xla/``) and native kernels (``kernels/``). A module of no imports of ours, so that the
leaf packages (`agentic_jax.kernels`, `agentic_jax.models`) may use it."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """``$AGENTIC_JAX_CACHE``, else ``$XDG_CACHE_HOME/agentic_jax``, else
    ``~/.cache/agentic_jax``."""
    if os.environ.get("AGENTIC_JAX_CACHE"):
        return Path(os.environ["AGENTIC_JAX_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agentic_jax"
