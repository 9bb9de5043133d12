"""Which devices train and which sample: colocated (one mesh, the two take turns on it) or
disaggregated (the sampler gets devices of its own and the trainer the rest).

Disaggregated, the rollout engine's weights are a copy laid out on the sampler's mesh, moved
there from the trainer's after every update by `copy_across`, device to device (on GPUs and
TPUs over the interconnect, never through host memory). The sampler's mesh puts all its
devices on the "tensor" axis, as inference engines shard a model for decoding: heads, MLP and
vocabulary are split over them where they divide, everything else is replicated.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agentic_jax.errors import UserError
from agentic_jax.parallel.mesh import make_mesh


@dataclasses.dataclass(frozen=True)
class Placement:
    """The trainer's devices and the sampler's (empty: the sampler uses the trainer's)."""

    train: tuple[jax.Device, ...]
    rollout: tuple[jax.Device, ...] = ()

    @property
    def disaggregated(self) -> bool:
        return bool(self.rollout)

    def rollout_mesh(self) -> Mesh:
        """The sampler's mesh: (data, fsdp, tensor) = (1, 1, N) over its N devices."""
        if not self.rollout:
            raise ValueError("rollout_mesh: the placement is colocated (no rollout devices)")
        return make_mesh(1, 1, len(self.rollout), devices=self.rollout)


def split_devices(rollout_devices: int, devices: Sequence[jax.Device] | None = None,
                  processes: int | None = None) -> Placement:
    """The last ``rollout_devices`` of ``devices`` (default: all of this process's) sample,
    the others train; 0 keeps everything colocated on all of them."""
    devices = tuple(jax.devices() if devices is None else devices)
    processes = jax.process_count() if processes is None else processes
    if isinstance(rollout_devices, bool) or not isinstance(rollout_devices, int):
        raise UserError(f"mesh.rollout_devices: expected an int, got {rollout_devices!r}")
    if rollout_devices < 0:
        raise UserError(f"mesh.rollout_devices: expected a number >= 0, got {rollout_devices}")
    if rollout_devices == 0:
        return Placement(train=devices)
    if processes > 1:
        raise UserError(f"mesh.rollout_devices: expected 0 with {processes} processes (each "
                        f"host samples on its own devices), got {rollout_devices}")
    if rollout_devices >= len(devices):
        raise UserError(f"mesh.rollout_devices: expected fewer than the {len(devices)} "
                        f"devices (the trainer needs at least one), got {rollout_devices}")
    cut = len(devices) - rollout_devices
    return Placement(train=devices[:cut], rollout=devices[cut:])


def copy_across(tree: Any, shardings: Any) -> Any:
    """``tree``'s arrays laid out as ``shardings`` (NamedShardings over other devices of this
    process), copied device to device.

    `jax.device_put` between disjoint device sets goes through host memory unless a source
    buffer already holds each target shard's exact slice. So each target shard is first cut
    out of the source on the source's own devices (replicated there: a slice of 1/N of the
    array on every source device, for the moment of the copy), then copied to its device.
    """
    return jax.tree.map(_copy_leaf, tree, shardings)


def _copy_leaf(x: jax.Array, sharding: NamedSharding) -> jax.Array:
    sources = sorted(x.sharding.device_set, key=lambda d: d.id)
    replicated = NamedSharding(Mesh(np.array(sources), ("source",)), PartitionSpec())
    pieces = []
    for device, index in sharding.addressable_devices_indices_map(x.shape).items():
        bounds = tuple((s.indices(n)[0], s.indices(n)[1]) for s, n in zip(index, x.shape))
        pieces.append(jax.device_put(_cut(x, bounds, replicated), device))
    return jax.make_array_from_single_device_arrays(x.shape, sharding, pieces)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _cut(x: jax.Array, bounds: tuple[tuple[int, int], ...], out: NamedSharding) -> jax.Array:
    piece = jax.lax.slice(x, [lo for lo, _ in bounds], [hi for _, hi in bounds])
    return jax.lax.with_sharding_constraint(piece, out)
