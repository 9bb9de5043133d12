"""Multi-host runtime: jax.distributed start-up, device summary, per-host data sharing.

JAX's own multi-controller runtime is the cluster layer: every host runs the same program, owns
its local devices, and jit-compiled steps run over one global mesh. This module decides how to
start that runtime (explicit flags, else the cluster environment jax knows how to read, else a
plain single process), logs the device summary line, and gives hosts the two data helpers they
need: which prompts are theirs, and how their local rows become one global array.

    info = initialize_distributed()          # or from --coordinator_address/... flags
    prompts = process_shard_of(all_prompts)  # this host's contiguous share
    batch = global_batch_from_local(local_batch, mesh, P(("data", "fsdp")))
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from importlib import util as importlib_util
from typing import Any, TypeVar

import jax
import numpy as np
from absl import flags, logging
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agentic_jax.errors import UserError

T = TypeVar("T")

# Variables whose presence means a launcher started this process as one of several. They mirror
# what jax.distributed's own cluster detection reads (jax/_src/clusters).
_SLURM_VARS = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID",
               "SLURM_LOCALID")
_OMPI_VAR = "OMPI_MCA_orte_hnp_uri"
_TPU_POD_VARS = ("TPU_WORKER_HOSTNAMES", "TPU_PROCESS_ADDRESSES", "MEGASCALE_COORDINATOR_ADDRESS")
_TPU_DEVICE_PATHS = ("/dev/accel0", "/dev/vfio/0")
# Vertex AI training jobs describe their worker pools in this JSON variable; jax does not read it.
_VERTEX_VAR = "CLUSTER_SPEC"


@dataclasses.dataclass(frozen=True)
class RuntimeInfo:
    """What `initialize_distributed` set up.

    `source` says how the process group was formed: "flags", "slurm", "ompi", "tpu", "vertex", or
    "single" when no distributed runtime was started.
    """

    process_id: int
    num_processes: int
    local_device_count: int
    global_device_count: int
    source: str
    coordinator_address: str | None = None

    @property
    def is_main(self) -> bool:
        return self.process_id == 0


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines --coordinator_address, --num_processes and --process_id (idempotent)."""
    if "coordinator_address" not in flag_values:
        flags.DEFINE_string(
            "coordinator_address", None,
            "HOST:PORT of process 0's coordinator; with --num_processes and --process_id.",
            flag_values=flag_values)
    if "num_processes" not in flag_values:
        flags.DEFINE_integer("num_processes", None, "Total number of processes in the job.",
                             flag_values=flag_values)
    if "process_id" not in flag_values:
        flags.DEFINE_integer("process_id", None, "This process's index in [0, num_processes).",
                             flag_values=flag_values)


def initialize_from_flags(flag_values: flags.FlagValues = flags.FLAGS) -> RuntimeInfo:
    """`initialize_distributed` with the values of the flags from `define_flags`."""
    return initialize_distributed(
        coordinator_address=flag_values.coordinator_address,
        num_processes=flag_values.num_processes,
        process_id=flag_values.process_id,
    )


def initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids: Sequence[int] | None = None,
    *,
    initialization_timeout_s: int = 300,
    environ: Mapping[str, str] | None = None,
) -> RuntimeInfo:
    """Starts jax.distributed when this process is one of several, then logs the device summary.

    Explicit arguments win; all three of `coordinator_address`, `num_processes` and `process_id`
    are given together or not at all. Without them, a cluster environment (SLURM step, Open MPI,
    Cloud TPU pod, Vertex AI worker pool) makes jax.distributed.initialize() read its own
    settings; with none, nothing is started and the process runs alone. Must run before any
    other JAX call touches the devices. Calling it again once initialised is a no-op.
    """
    environ = os.environ if environ is None else environ
    explicit = _validated_flags(coordinator_address, num_processes, process_id)
    source = "flags" if explicit else (detect_cluster(environ) or "single")
    if source == "vertex":
        coordinator_address, num_processes, process_id = vertex_cluster_args(environ)
    if source != "single" and not jax.distributed.is_initialized():
        # CPU devices of different processes talk through gloo (no effect on GPU / TPU).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        # Arguments left None are filled in by jax's own cluster detection.
        jax.distributed.initialize(
            coordinator_address=coordinator_address, num_processes=num_processes,
            process_id=process_id, local_device_ids=local_device_ids,
            initialization_timeout=initialization_timeout_s)
    info = RuntimeInfo(
        process_id=jax.process_index(), num_processes=jax.process_count(),
        local_device_count=jax.local_device_count(), global_device_count=jax.device_count(),
        source=source, coordinator_address=coordinator_address)
    logging.info(describe_devices())
    return info


def _validated_flags(coordinator_address: str | None, num_processes: int | None,
                     process_id: int | None) -> bool:
    """Checks the explicit multi-host flags; True when they are given."""
    given = {"--coordinator_address": coordinator_address, "--num_processes": num_processes,
             "--process_id": process_id}
    present = [name for name, value in given.items() if value is not None]
    if not present:
        return False
    if len(present) < len(given):
        missing = ", ".join(name for name in given if name not in present)
        raise UserError(f"{', '.join(present)} given without {missing}: multi-host start needs "
                        "--coordinator_address, --num_processes and --process_id together")
    _check_host_port(coordinator_address)
    if num_processes < 1:
        raise UserError(f"--num_processes must be >= 1, got {num_processes}")
    if not 0 <= process_id < num_processes:
        raise UserError(f"--process_id must be in [0, {num_processes}), got {process_id}")
    return True


def _check_host_port(address: str) -> None:
    """Raises unless `address` is HOST:PORT (IPv6 hosts in brackets: [::1]:1234)."""
    host, sep, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    valid_port = port.isdigit() and 0 < int(port) < 65536
    if not sep or not host or not valid_port or any(c.isspace() for c in host):
        raise UserError(f"--coordinator_address must be HOST:PORT (e.g. 10.0.0.2:1234), "
                        f"got {address!r}")


def detect_cluster(environ: Mapping[str, str]) -> str | None:
    """Names the multi-process launcher this process runs under, or None when it runs alone.

    A single-task SLURM step or Open MPI run counts as alone: there is nobody to meet.
    """
    if all(var in environ for var in _SLURM_VARS):
        return "slurm" if int(environ["SLURM_NTASKS"]) > 1 else None
    if _OMPI_VAR in environ:
        return "ompi" if environ.get("OMPI_COMM_WORLD_SIZE") != "1" else None
    if _VERTEX_VAR in environ:
        return "vertex" if vertex_cluster_args(environ)[1] > 1 else None
    if any(var in environ for var in _TPU_POD_VARS) or _on_tpu_vm():
        return "tpu"
    return None


def _on_tpu_vm() -> bool:
    """True on a Cloud TPU VM: TPU device files exist and libtpu is installed."""
    has_device = any(os.path.exists(path) for path in _TPU_DEVICE_PATHS)
    return has_device and importlib_util.find_spec("libtpu") is not None


def vertex_cluster_args(environ: Mapping[str, str]) -> tuple[str, int, int]:
    """(coordinator_address, num_processes, process_id) from Vertex AI's CLUSTER_SPEC.

    Processes are numbered pool by pool (workerpool0 first, the chief), and the first host of
    workerpool0 serves as coordinator on the port Vertex assigned it.
    """
    try:
        spec = json.loads(environ[_VERTEX_VAR])
        pools = spec["cluster"]
        names = sorted(pools, key=lambda name: int(name.removeprefix("workerpool")))
        hosts = [(name, index) for name in names for index in range(len(pools[name]))]
        process_id = hosts.index((spec["task"]["type"], int(spec["task"]["index"])))
        return pools[names[0]][0], len(hosts), process_id
    except (KeyError, ValueError, IndexError, TypeError) as err:
        raise UserError(f"{_VERTEX_VAR} is not a Vertex AI cluster spec "
                        f"(cluster.workerpoolN lists and task.type/index): {err!r}") from err


def describe_devices() -> str:
    """The start-up summary line: `devices: N global (M local) across P processes`."""
    return (f"devices: {jax.device_count()} global ({jax.local_device_count()} local) "
            f"across {jax.process_count()} processes")


def is_main_process() -> bool:
    """True on process 0, the one that writes metrics, plots and logs."""
    return jax.process_index() == 0


def process_shard_of(items: Sequence[T], process_id: int | None = None,
                     num_processes: int | None = None) -> list[T]:
    """This process's contiguous share of `items`; shares differ in length by at most one.

    Contiguous blocks in process order match how `global_batch_from_local` lays rows out over a
    batch axis that spans processes, so the global batch keeps the order of `items`.
    """
    return list(items[process_slice(len(items), process_id, num_processes)])


def process_slice(n: int, process_id: int | None = None,
                  num_processes: int | None = None) -> slice:
    """The rows [start, stop) of `n` that are this process's share (see `process_shard_of`)."""
    process_id = jax.process_index() if process_id is None else process_id
    num_processes = jax.process_count() if num_processes is None else num_processes
    if not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must be in [0, {num_processes}), got {process_id}")
    base, extra = divmod(n, num_processes)
    start = process_id * base + min(process_id, extra)
    return slice(start, start + base + (process_id < extra))


def gather_rows(tree: Any) -> Any:
    """Every process's rows (axis 0 of each numpy leaf) concatenated in process order, on every
    process; shares may differ in size. The identity in a single process.

    For small per-episode records (grades, metrics inputs), not for model-sized data.
    """
    if jax.process_count() == 1:
        return tree
    from jax.experimental import multihost_utils

    leaves, treedef = jax.tree.flatten(tree)
    leaves = [np.asarray(x) for x in leaves]
    counts = {x.shape[0] for x in leaves}
    if len(counts) != 1:
        raise ValueError(f"gather_rows: leaves disagree on the number of rows {sorted(counts)}")
    n = counts.pop()
    sizes = np.asarray(multihost_utils.process_allgather(np.asarray([n], np.int32)))
    sizes = sizes.reshape(-1)
    most = int(sizes.max())
    # bool does not travel through every collective backend: as uint8 and back.
    padded = [np.concatenate([x.astype(np.uint8) if x.dtype == bool else x,
                              np.zeros((most - n, *x.shape[1:]),
                                       np.uint8 if x.dtype == bool else x.dtype)])
              for x in leaves]
    gathered = multihost_utils.process_allgather(padded)  # each [P, most, ...]
    out = [np.concatenate([np.asarray(g)[p, :sizes[p]] for p in range(len(sizes))]).astype(x.dtype)
           for g, x in zip(gathered, leaves)]
    return jax.tree.unflatten(treedef, out)


def gather_texts(texts: Sequence[str]) -> list[str]:
    """Every process's strings concatenated in process order, on every process."""
    if jax.process_count() == 1:
        return list(texts)
    data = [t.encode("utf-8") for t in texts]
    width = max(1, host_max(max((len(d) for d in data), default=0)))
    buf = np.zeros((len(data), width), np.uint8)
    for i, d in enumerate(data):
        buf[i, :len(d)] = np.frombuffer(d, np.uint8)
    rows = gather_rows({"bytes": buf, "length": np.asarray([len(d) for d in data], np.int32)})
    return [bytes(row[:n]).decode("utf-8") for row, n in zip(rows["bytes"], rows["length"])]


def agree(value: bool) -> bool:
    """Process 0's `value` on every process (for decisions read from local files)."""
    if jax.process_count() == 1:
        return bool(value)
    from jax.experimental import multihost_utils

    return bool(multihost_utils.broadcast_one_to_all(np.asarray(bool(value))))


def host_max(value: int) -> int:
    """The largest of every process's `value` (the value itself in a single process)."""
    return int(gather_rows(np.asarray([value], np.int64)).max())


def per_host_copy(tree: Any, local_shardings: Any) -> Any:
    """A copy of `tree`'s (multi-host sharded) arrays on each process's own devices, laid out as
    `local_shardings` (NamedShardings over one mesh of `jax.local_devices()`).

    The data moves device to device: the arrays are resharded to be replicated across processes
    and sharded within each like `local_shardings`, then every process keeps its own shards.
    Every process must call it.
    """
    count = jax.process_count()
    if count == 1:
        return jax.device_put(tree, local_shardings)
    local_mesh = jax.tree.leaves(local_shardings)[0].mesh
    rows = [[d for d in jax.devices() if d.process_index == p] for p in range(count)]
    if list(local_mesh.devices.flat) != rows[jax.process_index()]:
        raise ValueError("per_host_copy: the local mesh must list jax.local_devices() in order")
    grid = np.array(rows, dtype=object).reshape(count, *local_mesh.devices.shape)
    mesh = Mesh(grid, ("hosts", *local_mesh.axis_names))
    spread = jax.tree.map(lambda s: NamedSharding(mesh, s.spec), local_shardings)
    resharded = jax.jit(lambda t: t, out_shardings=spread)(tree)
    return jax.tree.map(
        lambda x, s: jax.make_array_from_single_device_arrays(
            x.shape, s, [shard.data for shard in x.addressable_shards]),
        resharded, local_shardings)


def put_rows(local_tree: Any, sharding: NamedSharding) -> Any:
    """Global arrays with `sharding` from each process's rows (`jax.device_put` when alone).

    Every process contributes the same number of rows and `sharding` splits axis 0 over all
    processes (the global batch has process_count() times the local rows; jax raises otherwise).
    """
    count = jax.process_count()
    if count == 1:
        return jax.device_put(local_tree, sharding)

    def put(leaf):
        leaf = np.asarray(leaf)
        global_shape = (leaf.shape[0] * count, *leaf.shape[1:])
        return jax.make_array_from_process_local_data(sharding, leaf, global_shape)

    return jax.tree.map(put, local_tree)


def global_batch_from_local(local_tree: Any, mesh: Mesh, pspec: PartitionSpec) -> Any:
    """Forms global arrays from each process's rows; no host ever holds the whole batch.

    `local_tree`: a pytree of arrays with this process's rows along axis 0, the same shapes on
    every process. Every leaf is laid out as NamedSharding(mesh, pspec), its global leading
    dimension being the sum of all processes' rows (process order).
    """
    sharding = NamedSharding(mesh, pspec)
    return jax.tree.map(
        lambda leaf: jax.make_array_from_process_local_data(sharding, leaf), local_tree)
