"""One of two cooperating CPU processes: start the runtime, reduce a global array, print JSON.

Run as `python two_process_worker.py COORDINATOR_ADDRESS PROCESS_ID`; the parent test sets
XLA_FLAGS so that each process has two CPU devices, four in the global mesh.
"""

import json
import sys

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from agentic_jax.parallel.distributed import (  # noqa: E402
    describe_devices,
    gather_rows,
    global_batch_from_local,
    host_max,
    per_host_copy,
    initialize_distributed,
    is_main_process,
    process_shard_of,
)


def main(coordinator_address: str, process_id: int) -> None:
    info = initialize_distributed(coordinator_address, 2, process_id, initialization_timeout_s=60)
    mesh = jax.make_mesh((4,), ("data",))
    rows = process_shard_of(list(range(8)))  # [0..3] on process 0, [4..7] on process 1
    local = np.asarray(rows, np.float32).reshape(4, 1) * np.ones((1, 3), np.float32)
    batch = global_batch_from_local({"x": local}, mesh, P("data"))["x"]
    mean = jax.jit(jnp.mean, out_shardings=jax.NamedSharding(mesh, P()))(batch)
    psum = jax.jit(jax.shard_map(lambda x: jax.lax.psum(x.sum(), "data"), mesh=mesh,
                                 in_specs=P("data"), out_specs=P()))(batch)
    # A copy of the global array on this process's own two devices, moved device to device.
    from agentic_jax.parallel import make_mesh

    local_mesh = make_mesh(1, -1, 1, devices=jax.local_devices())
    copy = per_host_copy({"x": batch}, {"x": jax.NamedSharding(local_mesh, P("fsdp"))})["x"]
    # Uneven shares: process 0 has one row, process 1 two; bools survive the trip.
    uneven = gather_rows({"x": np.arange(process_id + 1, dtype=np.float32) + 10 * process_id,
                          "flag": np.arange(process_id + 1) % 2 == 0})
    print(json.dumps({
        "copy": np.asarray(copy)[:, 0].tolist(),
        "copy_local": {d.id for d in copy.devices()} == {d.id for d in jax.local_devices()},
        "gathered": uneven["x"].tolist(), "flags": uneven["flag"].tolist(),
        "flag_dtype": str(uneven["flag"].dtype), "host_max": host_max(3 + process_id),
        "process_id": info.process_id, "source": info.source, "summary": describe_devices(),
        "main": is_main_process(), "rows": rows, "global_shape": list(batch.shape),
        "mean": float(mean), "psum": float(psum),
    }), flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
