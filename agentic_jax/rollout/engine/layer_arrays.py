"""`EngineConfig.layer_arrays` resolved for a model and a host: whether the engine holds each
layer's weights as its own arrays on CPU (`paged_model.engine_weights`)."""

from __future__ import annotations

import os

import jax
import numpy as np

from agentic_jax.models import ModelConfig

# `choose_layer_arrays`: blocks below this size gain less from per-layer arrays than their
# unrolled programs' longer compilations cost (decode steps of 16 rows on 2 CPU cores, stacked
# against layer arrays: tiny-0.2m 0.90x, tiny-4m 1.08x for +5 s compiling a program,
# SmolLM2-135M's 0.4 GB of blocks 1.10x) ...
LAYER_ARRAYS_MIN_BYTES = 64 << 20
# ... and their second copy must take at most this share of the memory available.
LAYER_ARRAYS_MAX_SHARE = 1 / 8


def _available_bytes() -> int | None:
    """The host memory available to new allocations (``MemAvailable``), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def choose_layer_arrays(setting: bool | str, model_cfg: ModelConfig,
                        available: int | None = None, backend: str | None = None
                        ) -> tuple[bool, str]:
    """`EngineConfig.layer_arrays` resolved for this model and host, and why.

    "auto": on CPU, on when the blocks take at least `LAYER_ARRAYS_MIN_BYTES` and a second copy
    of them at most `LAYER_ARRAYS_MAX_SHARE` of ``available`` bytes (default: the host's
    ``MemAvailable``); off on GPU / TPU, where the programs always scan the stacked blocks."""
    backend = backend or jax.default_backend()
    if backend != "cpu":
        return False, f"{backend}: the layers are always scanned"
    if isinstance(setting, bool):
        return setting, "set in the config"
    blocks = model_cfg.num_params() - model_cfg.vocab_size * model_cfg.hidden_size * (
        1 if model_cfg.tie_word_embeddings else 2)
    size = blocks * np.dtype(model_cfg.weight_dtype).itemsize
    mib = size / 2**20
    if size < LAYER_ARRAYS_MIN_BYTES:
        return False, (f"auto: blocks {mib:.0f} MiB, below {LAYER_ARRAYS_MIN_BYTES >> 20} MiB "
                       f"where the copies cost more than the unrolled programs' compiling")
    available = _available_bytes() if available is None else available
    if available is None or size > LAYER_ARRAYS_MAX_SHARE * available:
        left = "unknown" if available is None else f"{available / 2**30:.1f} GiB"
        share = round(1 / LAYER_ARRAYS_MAX_SHARE)
        return False, (f"auto: a second copy of the blocks ({mib:.0f} MiB) would take more "
                       f"than 1/{share} of the memory available ({left})")
    return True, (f"auto: blocks {mib:.0f} MiB, a second copy fits in "
                  f"{available / 2**30:.1f} GiB available")
