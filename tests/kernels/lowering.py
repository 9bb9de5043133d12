"""Lowering for an accelerator on a CPU-only machine.

A program is traced as if JAX's default backend were a GPU or a TPU (so every backend choice in
the code takes its accelerator branch) and lowered for that platform. Lowering runs the checks
that need no device: the Pallas backends' own (Triton's power-of-two array sizes, Mosaic's (8,
128) tile rule and its refusal to be partitioned outside a shard_map) and JAX's sharding checks.
What runs only when XLA compiles (Triton and Mosaic code generation, the SPMD partitioner)
needs the device itself.
"""

from __future__ import annotations

import contextlib

import jax
import pytest

# (default backend, lowering platform, the custom call a Pallas kernel lowers to)
ACCELERATORS = [
    pytest.param("gpu", "cuda", "__gpu$xla.gpu.triton", id="cuda"),
    pytest.param("tpu", "tpu", "tpu_custom_call", id="tpu"),
]


@contextlib.contextmanager
def traced_for(backend: str):
    """JAX's default backend reported as ``backend`` inside the block. The trace caches are
    cleared on the way in and out: a jit's cache does not key on the default backend, so a
    program traced for the CPU would otherwise be reused here, and one traced here later on
    the CPU."""
    real = jax.default_backend
    jax.clear_caches()
    jax.default_backend = lambda: backend
    try:
        yield
    finally:
        jax.default_backend = real
        jax.clear_caches()


def lowered_text(jitted, *args, platform: str, **kwargs) -> str:
    """The StableHLO of ``jitted`` (a `jax.jit` function) traced at ``args`` for ``platform``."""
    return jitted.trace(*args, **kwargs).lower(lowering_platforms=(platform,)).as_text()


def abstract(tree, shardings=None):
    """ShapeDtypeStructs of ``tree``'s leaves (arrays or structs), with ``shardings`` if given."""
    if shardings is None:
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                        tree, shardings)
