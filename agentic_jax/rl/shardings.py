"""Where the train step's arguments live: parameters and optimizer state on the mesh (optimizer
moments next to their parameter, optionally offloaded to pinned host memory), batch rows split
over the ("data", "fsdp") axes and replicated over "tensor"."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from agentic_jax.parallel import param_shardings

BATCH_AXES = ("data", "fsdp")


class TrainShardings(NamedTuple):
    state: Any  # pytree of NamedSharding matching the model state
    opt_state: Any  # pytree of NamedSharding matching the optimizer state
    batch: NamedSharding  # applied to every batch field


def has_adapters(state: nnx.State) -> bool:
    """Whether the model state holds LoRA adapters (`nnx.LoRAParam`)."""
    return any(isinstance(v, nnx.LoRAParam)
               for v in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, nnx.Variable)))


def trainable_filter(state: nnx.State):
    """What the update trains: with LoRA adapters, the adapters and the value head (the base
    weights stay frozen); without, every `nnx.Param`."""
    if not has_adapters(state):
        return nnx.Param
    return nnx.Any(nnx.LoRAParam, nnx.PathContains("value_kernel"),
                   nnx.PathContains("value_bias"))


def params_and_rest(state: nnx.State) -> tuple[nnx.State, nnx.State]:
    """(trainable, everything else) of a model state (`trainable_filter`)."""
    return nnx.split_state(state, trainable_filter(state), ...)


def init_opt_state(optimizer: optax.GradientTransformation, state: nnx.State):
    """The optimizer state for the trainable (nnx.Param) part of a model state."""
    return optimizer.init(params_and_rest(state)[0])


def train_shardings(
    state: nnx.State,
    optimizer: optax.GradientTransformation,
    mesh: Mesh,
    state_shardings: Any = None,
    *,
    offload_opt_state: bool = False,
) -> TrainShardings:
    """Shardings of the step's arguments. `state` may be abstract (jax.eval_shape); by default
    the state's come from `agentic_jax.parallel.param_shardings`. Optimizer moments follow their
    parameter, counters and scalars are replicated.

    offload_opt_state: the optimizer state lives in pinned host memory (ZeRO-3 with CPU offload:
      each device's shard of the moments sits in its host's RAM); the step brings it to device
      memory for the update and writes it back.
    """
    if state_shardings is None:
        state_shardings = param_shardings(state, mesh)
    params, _ = params_and_rest(state)
    param_shardings_, _ = params_and_rest(state_shardings)
    abstract_opt = jax.eval_shape(optimizer.init, params)
    replicated = NamedSharding(mesh, P())
    opt_shardings = optax.tree_map_params(
        optimizer,
        lambda _, sharding: sharding,
        abstract_opt,
        param_shardings_,
        transform_non_params=lambda _: replicated,
        is_leaf=lambda x: isinstance(x, NamedSharding),
    )
    if offload_opt_state:
        opt_shardings = jax.tree.map(lambda s: s.with_memory_kind("pinned_host"), opt_shardings)
    return TrainShardings(state_shardings, opt_shardings, NamedSharding(mesh, P(BATCH_AXES)))


def in_device_memory(shardings: Any) -> Any | None:
    """The same shardings in device memory, or None when none of them is elsewhere."""
    leaves = jax.tree.leaves(shardings)
    if all(getattr(s, "memory_kind", None) in (None, "device") for s in leaves):
        return None
    return jax.tree.map(lambda s: s.with_memory_kind("device"), shardings)
