"""Turn logical axis annotations into NamedShardings; build models and batches sharded."""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agentic_jax.models import ModelConfig, Transformer
from agentic_jax.models.partitioning import variable_sharding
from agentic_jax.parallel.distributed import global_batch_from_local
from agentic_jax.parallel.rules import LOGICAL_AXIS_RULES, Rules, logical_to_mesh_spec

BATCH_AXES = ("data", "fsdp")


def _is_variable(x: Any) -> bool:
    return isinstance(x, nnx.Variable)


def param_shardings(
    model_or_state: nnx.Module | nnx.State, mesh: Mesh, rules: Rules = LOGICAL_AXIS_RULES
) -> nnx.State:
    """State of NamedShardings mirroring `nnx.state(model)` (usable as jit in/out_shardings)."""
    state = model_or_state if isinstance(model_or_state, nnx.State) else nnx.state(model_or_state)
    return jax.tree.map(
        lambda var: var.replace(variable_sharding(var, mesh, rules)), state, is_leaf=_is_variable
    )


def create_sharded_model(
    cfg: ModelConfig, mesh: Mesh, seed: int = 0, rules: Rules = LOGICAL_AXIS_RULES
) -> Transformer:
    """Transformer whose parameters are initialised directly in their shards.

    The initialiser runs under jit with out_shardings, so each device only ever materialises its
    own slice; no full replica exists on any single device.
    """
    abstract = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(seed)))
    graphdef, abstract_state = nnx.split(abstract)
    shardings = param_shardings(abstract_state, mesh, rules)

    @functools.partial(jax.jit, out_shardings=shardings)
    def init() -> nnx.State:
        return nnx.state(Transformer(cfg, rngs=nnx.Rngs(seed)))

    return nnx.merge(graphdef, init())


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
    """Leading axis over ("data", "fsdp"), the rest replicated; scalars replicated."""
    return NamedSharding(mesh, PartitionSpec(BATCH_AXES) if ndim else PartitionSpec())


def shard_batch(array_tree: Any, mesh: Mesh) -> Any:
    """Places every array of a batch with its leading axis split over ("data", "fsdp").

    On several hosts each host passes its own rows; they become one global array.
    """
    shards = mesh.shape["data"] * mesh.shape["fsdp"]

    def put(x: Any) -> jax.Array:
        x = x if isinstance(x, jax.Array) else np.asarray(x)
        sharding = batch_sharding(mesh, x.ndim)
        if jax.process_count() > 1:
            return global_batch_from_local(np.asarray(x), mesh, sharding.spec)
        if x.ndim and x.shape[0] % shards:
            raise ValueError(
                f"shard_batch: leading dimension {x.shape[0]} of an array shaped {x.shape} must "
                f"be divisible by mesh.data * mesh.fsdp = {shards}"
            )
        return jax.device_put(x, sharding)

    return jax.tree.map(put, array_tree)

