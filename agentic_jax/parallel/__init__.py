"""Sharding: device mesh, logical-axis rules, parameter/batch shardings, multi-host start."""

from agentic_jax.parallel.distributed import (
    RuntimeInfo,
    agree,
    describe_devices,
    gather_rows,
    gather_texts,
    global_batch_from_local,
    host_max,
    initialize_distributed,
    is_main_process,
    per_host_copy,
    process_shard_of,
    process_slice,
    put_rows,
)
from agentic_jax.parallel.mesh import MESH_AXES, make_mesh, mesh_from_config
from agentic_jax.parallel.placement import Placement, split_devices
from agentic_jax.parallel.rules import LOGICAL_AXIS_RULES, logical_to_mesh_spec
from agentic_jax.parallel.sharding import (
    batch_sharding,
    create_sharded_model,
    param_shardings,
    shard_batch,
    variable_sharding,
)

__all__ = [
    "LOGICAL_AXIS_RULES",
    "MESH_AXES",
    "Placement",
    "RuntimeInfo",
    "batch_sharding",
    "create_sharded_model",
    "agree",
    "describe_devices",
    "gather_rows",
    "gather_texts",
    "global_batch_from_local",
    "host_max",
    "initialize_distributed",
    "is_main_process",
    "logical_to_mesh_spec",
    "make_mesh",
    "mesh_from_config",
    "param_shardings",
    "per_host_copy",
    "process_shard_of",
    "process_slice",
    "put_rows",
    "shard_batch",
    "split_devices",
    "variable_sharding",
]
