"""Which devices train and which sample: colocated (one mesh, the two take turns on it) or
disaggregated (the sampler gets devices of its own and the trainer the rest).

Disaggregated, the rollout engine's weights are a copy laid out on the sampler's mesh; after
every update `jax.device_put` moves them there from the trainer's mesh, device to device
(on GPUs and TPUs over the interconnect, never through host memory). The sampler's mesh puts
all its devices on the "tensor" axis, as inference engines shard a model for decoding: heads,
MLP and vocabulary are split over them where they divide, everything else is replicated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
from jax.sharding import Mesh

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
        raise ValueError(f"mesh.rollout_devices: expected an int, got {rollout_devices!r}")
    if rollout_devices < 0:
        raise ValueError(f"mesh.rollout_devices: expected a number >= 0, got {rollout_devices}")
    if rollout_devices == 0:
        return Placement(train=devices)
    if processes > 1:
        raise ValueError(f"mesh.rollout_devices: expected 0 with {processes} processes (each "
                         f"host samples on its own devices), got {rollout_devices}")
    if rollout_devices >= len(devices):
        raise ValueError(f"mesh.rollout_devices: expected fewer than the {len(devices)} "
                         f"devices (the trainer needs at least one), got {rollout_devices}")
    cut = len(devices) - rollout_devices
    return Placement(train=devices[:cut], rollout=devices[cut:])
