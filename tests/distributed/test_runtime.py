"""Start-up decisions, flag validation and per-host data helpers of the multi-host runtime."""

import json

import jax
import numpy as np
import pytest
from absl import flags
from jax.sharding import PartitionSpec as P

from agentic_jax.parallel import distributed as dist

_SLURM_ENV = {"SLURM_JOB_ID": "17", "SLURM_STEP_NODELIST": "gpu[01-02]", "SLURM_NTASKS": "16",
              "SLURM_PROCID": "3", "SLURM_LOCALID": "3"}
_VERTEX_ENV = {"CLUSTER_SPEC": json.dumps({
    "cluster": {"workerpool0": ["chief:2222"], "workerpool1": ["w0:2222", "w1:2222", "w2:2222"]},
    "task": {"type": "workerpool1", "index": 1}})}


@pytest.fixture
def initialize_calls(monkeypatch):
    """Records jax.distributed.initialize calls instead of starting a runtime."""
    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
    return calls


def test_single_process_without_flags_or_cluster_starts_nothing(initialize_calls):
    info = dist.initialize_distributed(environ={})
    assert initialize_calls == []
    assert info.source == "single" and info.is_main
    assert (info.process_id, info.num_processes) == (0, 1)
    assert info.global_device_count == info.local_device_count == jax.device_count()


def test_explicit_flags_win_over_cluster_environment(initialize_calls):
    info = dist.initialize_distributed("10.0.0.2:1234", 4, 2, environ=_SLURM_ENV)
    assert info.source == "flags"
    [call] = initialize_calls
    assert (call["coordinator_address"], call["num_processes"], call["process_id"]) == (
        "10.0.0.2:1234", 4, 2)


def test_slurm_environment_lets_jax_detect(initialize_calls):
    info = dist.initialize_distributed(environ=_SLURM_ENV)
    assert info.source == "slurm"
    [call] = initialize_calls
    assert call["coordinator_address"] is call["num_processes"] is call["process_id"] is None


def test_vertex_cluster_spec_becomes_explicit_arguments(initialize_calls):
    dist.initialize_distributed(environ=_VERTEX_ENV)
    [call] = initialize_calls
    assert (call["coordinator_address"], call["num_processes"], call["process_id"]) == (
        "chief:2222", 4, 2)


@pytest.mark.parametrize("environ, expected", [
    ({}, None),
    (_SLURM_ENV, "slurm"),
    ({**_SLURM_ENV, "SLURM_NTASKS": "1"}, None),
    ({"SLURM_JOB_ID": "17"}, None),  # an allocation shell, not a job step
    ({"OMPI_MCA_orte_hnp_uri": "1.0;tcp://10.0.0.1:1", "OMPI_COMM_WORLD_SIZE": "8"}, "ompi"),
    ({"OMPI_MCA_orte_hnp_uri": "1.0;tcp://10.0.0.1:1", "OMPI_COMM_WORLD_SIZE": "1"}, None),
    ({"TPU_WORKER_HOSTNAMES": "t0,t1"}, "tpu"),
    ({"MEGASCALE_COORDINATOR_ADDRESS": "t0:8080"}, "tpu"),
    (_VERTEX_ENV, "vertex"),
])
def test_detect_cluster(environ, expected):
    assert dist.detect_cluster(environ) == expected


@pytest.mark.parametrize("args, message", [
    (("10.0.0.2:1234", None, None), "given without --num_processes, --process_id"),
    ((None, 2, 0), "given without --coordinator_address"),
    (("10.0.0.2", 2, 0), "must be HOST:PORT"),
    (("10.0.0.2:http", 2, 0), "must be HOST:PORT"),
    ((":1234", 2, 0), "must be HOST:PORT"),
    (("10.0.0.2:70000", 2, 0), "must be HOST:PORT"),
    (("10.0.0.2:1234", 0, 0), "--num_processes must be >= 1"),
    (("10.0.0.2:1234", 2, 2), r"--process_id must be in \[0, 2\), got 2"),
    (("10.0.0.2:1234", 2, -1), r"--process_id must be in \[0, 2\)"),
])
def test_bad_flags_give_one_line_errors(initialize_calls, args, message):
    with pytest.raises(ValueError, match=message) as err:
        dist.initialize_distributed(*args, environ={})
    assert "\n" not in str(err.value)
    assert initialize_calls == []


@pytest.mark.parametrize("address", ["localhost:1", "node-7.cluster:65535", "[::1]:8476"])
def test_host_port_forms_accepted(initialize_calls, address):
    dist.initialize_distributed(address, 2, 1, environ={})
    assert initialize_calls[0]["coordinator_address"] == address


def test_bad_vertex_spec_is_named():
    with pytest.raises(ValueError, match="CLUSTER_SPEC is not a Vertex AI cluster spec"):
        dist.vertex_cluster_args({"CLUSTER_SPEC": '{"task": {}}'})


def test_describe_devices_format():
    n = jax.device_count()
    assert dist.describe_devices() == f"devices: {n} global ({n} local) across 1 processes"
    assert dist.is_main_process()


def test_define_flags_is_reusable():
    values = flags.FlagValues()
    dist.define_flags(values)
    dist.define_flags(values)  # a second caller must not collide
    values(["prog", "--coordinator_address=h:1", "--num_processes=2", "--process_id=1"])
    assert (values.coordinator_address, values.num_processes, values.process_id) == ("h:1", 2, 1)


@pytest.mark.parametrize("n_items, n_procs", [(8, 2), (10, 3), (2, 4), (0, 2)])
def test_process_shards_cover_items_in_order(n_items, n_procs):
    items = [f"prompt {i}" for i in range(n_items)]
    shards = [dist.process_shard_of(items, pid, n_procs) for pid in range(n_procs)]
    assert sum(shards, []) == items
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_process_shard_defaults_to_this_process_and_checks_range():
    assert dist.process_shard_of([1, 2, 3]) == [1, 2, 3]
    with pytest.raises(ValueError, match=r"process_id must be in \[0, 2\)"):
        dist.process_shard_of([1, 2], process_id=2, num_processes=2)


def test_global_batch_from_local_single_process():
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    local = {"tokens": np.arange(16, dtype=np.int32).reshape(8, 2),
             "mask": np.ones((8,), np.float32)}
    batch = dist.global_batch_from_local(local, mesh, P("data"))
    assert batch["tokens"].shape == (8, 2)
    assert batch["tokens"].sharding.spec == P("data")
    np.testing.assert_array_equal(np.asarray(batch["tokens"]), local["tokens"])


def test_second_call_does_not_restart_the_runtime(initialize_calls, monkeypatch):
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: True)
    info = dist.initialize_distributed("10.0.0.2:1234", 2, 0, environ={})
    assert initialize_calls == [] and info.source == "flags"


def test_single_process_data_helpers():
    assert dist.process_slice(10, 1, 3) == slice(4, 7)
    assert dist.process_slice(10) == slice(0, 10)
    rows = {"a": np.arange(3), "b": np.ones((3, 2), bool)}
    assert dist.gather_rows(rows) is rows
    assert dist.host_max(7) == 7
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    sharding = jax.sharding.NamedSharding(mesh, P("data"))
    put = dist.put_rows({"x": np.arange(16.0).reshape(8, 2)}, sharding)["x"]
    assert put.sharding == sharding
    np.testing.assert_array_equal(np.asarray(put), np.arange(16.0).reshape(8, 2))
    local = jax.sharding.NamedSharding(mesh, P())
    copy = dist.per_host_copy({"x": put}, {"x": local})["x"]
    assert copy.sharding == local
    np.testing.assert_array_equal(np.asarray(copy), np.arange(16.0).reshape(8, 2))
