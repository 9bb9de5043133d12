"""Device mesh with axes ("data", "fsdp", "tensor") built from sizes or a config group."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import AxisType, Mesh

from agentic_jax.errors import UserError

MESH_AXES = ("data", "fsdp", "tensor")


def make_mesh(
    data: int = 1, fsdp: int = -1, tensor: int = 1, devices: Sequence[jax.Device] | None = None
) -> Mesh:
    """Mesh of shape (data, fsdp, tensor); one size may be -1 to take the remaining devices."""
    devices = list(jax.devices() if devices is None else devices)
    count = len(devices)
    sizes = {"data": data, "fsdp": fsdp, "tensor": tensor}
    fields = ", ".join(f"mesh.{k}={v}" for k, v in sizes.items())
    wildcards = [k for k, v in sizes.items() if v == -1]
    if len(wildcards) > 1 or any(v == 0 or v < -1 for v in sizes.values()):
        raise UserError(f"{fields}: sizes must be positive, with at most one -1")
    fixed = math.prod(v for v in sizes.values() if v != -1)
    if wildcards:
        if count % fixed:
            raise UserError(f"{fields}: the fixed sizes ({fixed}) do not divide {count} devices")
        sizes[wildcards[0]] = count // fixed
    elif fixed != count:
        raise UserError(f"{fields}: the product ({fixed}) must equal the {count} devices")
    shape = tuple(sizes[a] for a in MESH_AXES)
    # Auto axes: shardings are given at jit boundaries and XLA propagates them inside.
    return jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * 3, devices=devices)


def mesh_from_config(cfg_mesh: Any, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """Mesh from a config group with fields data, fsdp, tensor (ml_collections ConfigDict)."""
    missing = [f for f in MESH_AXES if f not in cfg_mesh]
    if missing:
        raise UserError(f"mesh config lacks field(s) {', '.join('mesh.' + f for f in missing)}")
    return make_mesh(int(cfg_mesh["data"]), int(cfg_mesh["fsdp"]), int(cfg_mesh["tensor"]),
                     devices=devices)
