"""Two CPU processes on one machine form one 4-device runtime through jax.distributed."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

_WORKER = Path(__file__).with_name("two_process_worker.py")
_REPO = Path(__file__).resolve().parents[2]
_TIMEOUT_S = 150


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO), env.get("PYTHONPATH")]))
    for var in ("SLURM_JOB_ID", "OMPI_MCA_orte_hnp_uri", "CLUSTER_SPEC", "TPU_WORKER_HOSTNAMES"):
        env.pop(var, None)
    return env


def run_together(commands: list[list[str]], env: dict[str, str],
                 timeout_s: float = _TIMEOUT_S) -> list[str]:
    """Starts every command at once and returns their outputs (stdout and stderr together);
    fails the test if one exits non-zero or they do not all finish in time."""
    procs = [subprocess.Popen(cmd, env=env, cwd=_REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for cmd in commands]
    outputs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=timeout_s)
            assert proc.returncode == 0, f"process exited {proc.returncode}:\n{out[-4000:]}"
            outputs.append(out)
    except subprocess.TimeoutExpired:
        pytest.fail(f"processes did not finish within {timeout_s} s")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return outputs


def _workers(script: Path) -> list[dict]:
    """Runs `script ADDRESS PID` as processes 0 and 1; each prints a JSON line last."""
    address = f"127.0.0.1:{_free_port()}"
    outs = run_together([[sys.executable, str(script), address, str(pid)] for pid in range(2)],
                        _child_env())
    return [json.loads(out.strip().splitlines()[-1]) for out in outs]


def test_two_processes_reduce_one_global_array():
    outputs = _workers(_WORKER)
    first, second = outputs
    assert [o["process_id"] for o in outputs] == [0, 1]
    assert [o["main"] for o in outputs] == [True, False]
    assert first["rows"] == [0, 1, 2, 3] and second["rows"] == [4, 5, 6, 7]
    for out in outputs:
        assert out["source"] == "flags"
        assert out["summary"] == "devices: 4 global (2 local) across 2 processes"
        assert out["global_shape"] == [8, 3]
        assert out["mean"] == pytest.approx(3.5)
        assert out["psum"] == pytest.approx(3 * sum(range(8)))
        assert out["copy"] == list(range(8)) and out["copy_local"]
        assert out["gathered"] == [0.0, 10.0, 11.0]
        assert out["flags"] == [True, True, False] and out["flag_dtype"] == "bool"
        assert out["host_max"] == 4
    assert first["mean"] == second["mean"] and first["psum"] == second["psum"]


_BATCH_WORKER = Path(__file__).with_name("two_process_batch_worker.py")


@pytest.mark.slow  # the two-process reduction above runs by default
def test_hosts_keeping_different_row_counts_form_one_batch():
    outputs = _workers(_BATCH_WORKER)
    first, second = outputs
    assert first == second  # one global batch, seen alike from both hosts
    # Process 0 kept 2 rows and padded to process 1's 4 with masked repeats; the width is the
    # longest kept episode of either host (28 tokens) rounded up to 32.
    assert first["shape"] == [8, 32]
    assert first["mask_per_row"] == [12.0, 20.0, 0.0, 0.0, 6.0, 9.0, 12.0, 24.0]
    assert first["kept_frac"] == pytest.approx(6 / 8)
    assert np.isfinite(first["adv_sum"])
