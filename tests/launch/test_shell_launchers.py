"""launch/tpu_vm.sh --dry-run and launch/slurm_gpu.sbatch under a stand-in srun."""

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from agentic_jax.parallel.distributed import detect_cluster

_REPO = Path(__file__).resolve().parents[2]
_TPU_VM = _REPO / "launch" / "tpu_vm.sh"
_SLURM = _REPO / "launch" / "slurm_gpu.sbatch"
_REQUIRED = ["--name=rl-7b", "--zone=us-east5-a", "--accelerator-type=v5p-32",
             "--workdir=gs://bucket/runs/rl-7b"]

# Starts "$@" once per task with the variables a real srun step sets, one node after another.
_FAKE_SRUN = r"""#!/usr/bin/env bash
set -euo pipefail
nodes=1 per_node=1
while [[ "$1" == --* ]]; do
  case "$1" in
    --nodes=*) nodes="${1#*=}" ;;
    --ntasks-per-node=*) per_node="${1#*=}" ;;
  esac
  shift
done
for ((node = 0; node < nodes; node++)); do
  for ((local = 0; local < per_node; local++)); do
    SLURM_STEP_NODELIST="gpu[0-$((nodes - 1))]" SLURM_NTASKS=$((nodes * per_node)) \
    SLURM_PROCID=$((node * per_node + local)) SLURM_LOCALID=$local SLURM_NODEID=$node "$@"
  done
done
"""
# Prints what the trainer process would see: its arguments and the SLURM/JAX variables.
_FAKE_PYTHON = r"""#!/usr/bin/env python3
import json, os, sys
env = {k: v for k, v in os.environ.items() if k.startswith(("SLURM_", "JAX_", "XLA_"))}
print(json.dumps({"argv": sys.argv[1:], "env": env}))
"""


def _bash(script: Path, *args: str, env: dict[str, str] | None = None):
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


def _commands(stdout: str) -> list[list[str]]:
    return [shlex.split(line) for line in stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("script", [_TPU_VM, _SLURM])
def test_scripts_parse(script):
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    assert "set -euo pipefail" in script.read_text()


def test_tpu_vm_dry_run_queued_spot_copy():
    proc = _bash(_TPU_VM, *_REQUIRED, "--spot", "--queued", "--project=proj",
                 "--config=configs/math_ppo.py:qwen2.5-7b", "--dry-run",
                 "--", "--config.training.lr=1e-5", "--config.data.source=jsonl:/d/a b.jsonl")
    assert proc.returncode == 0, proc.stderr
    create, describe, tar, scp, install, train = _commands(proc.stdout)
    assert create[:5] == ["gcloud", "compute", "tpus", "queued-resources", "create"]
    assert {"rl-7b", "--zone=us-east5-a", "--project=proj", "--node-id=rl-7b",
            "--accelerator-type=v5p-32", "--runtime-version=v2-alpha-tpuv5", "--spot"} <= set(
                create)
    assert describe[3:5] == ["queued-resources", "describe"]
    assert tar[0] == "tar" and tar[-2:] == [str(_REPO), "."]
    assert scp[3:5] == ["tpu-vm", "scp"] and "--worker=all" in scp
    for ssh in (install, train):
        assert ssh[3:6] == ["tpu-vm", "ssh", "rl-7b"] and "--worker=all" in ssh
    assert "pip install -e" in install[-1]
    remote = train[-1].removeprefix("--command=")
    assert shlex.split(remote)[3:11] == [
        "python", "-m", "agentic_jax.train", "--config=configs/math_ppo.py:qwen2.5-7b",
        "--workdir=gs://bucket/runs/rl-7b", "--config.training.lr=1e-5",
        "--config.data.source=jsonl:/d/a b.jsonl", "2>&1"]


def test_tpu_vm_dry_run_direct_create_pip_and_delete():
    args = [arg.replace("v5p-32", "v6e-16") for arg in _REQUIRED]
    proc = _bash(_TPU_VM, *args, "--pip=agentic_jax[tpu]==0.1.0", "--delete", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    create, tar, _, install, _, delete = _commands(proc.stdout)
    assert create[3:5] == ["tpu-vm", "create"] and "--version=v2-alpha-tpuv6e" in create
    assert "--spot" not in create
    assert tar[-1] == "configs"
    assert "pip install --upgrade" in install[-1] and "0.1.0" in install[-1]
    assert delete[3:6] == ["tpu-vm", "delete", "rl-7b"]


@pytest.mark.parametrize("args, message", [
    (_REQUIRED[1:], "--name is required"),
    ([a for a in _REQUIRED if not a.startswith("--workdir")], "--workdir is required"),
    ([*_REQUIRED[:2], "--accelerator-type=a100-8", _REQUIRED[3]], "must look like v5p-32"),
    ([*_REQUIRED, "--bogus"], "unknown argument '--bogus'"),
])
def test_tpu_vm_bad_arguments_print_usage(args, message):
    proc = _bash(_TPU_VM, *args, "--dry-run")
    assert proc.returncode == 2 and not proc.stdout
    assert message in proc.stderr and "usage: launch/tpu_vm.sh" in proc.stderr


@pytest.fixture
def fake_slurm(tmp_path):
    """PATH with a stand-in srun, PYTHON a stand-in trainer, and sbatch's job variables."""
    for name, text in (("srun", _FAKE_SRUN), ("python", _FAKE_PYTHON)):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    return {"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
            "PYTHON": str(tmp_path / "python"), "SLURM_JOB_ID": "4242",
            "SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "4"}


def _tasks(proc) -> list[dict]:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


_TRAIN_ARGS = ["--config=configs/math_ppo.py:qwen2.5-7b", "--workdir=/shared/runs/x",
               "--config.training.lr=1e-5"]


def test_slurm_one_process_per_gpu_reaches_jax_cluster_detection(fake_slurm):
    tasks = _tasks(_bash(_SLURM, *_TRAIN_ARGS, env=fake_slurm))
    assert len(tasks) == 2 * 4
    assert sorted(int(t["env"]["SLURM_PROCID"]) for t in tasks) == list(range(8))
    for task in tasks:
        assert task["argv"] == ["-m", "agentic_jax.train", *_TRAIN_ARGS]
        assert detect_cluster(task["env"]) == "slurm"
        assert task["env"]["SLURM_NTASKS"] == "8"
        assert "JAX_LOCAL_DEVICE_IDS" not in task["env"]


def test_slurm_one_process_per_node_sees_all_gpus(fake_slurm):
    env = {**fake_slurm, "PROCESS_PER": "node", "JAX_LOCAL_DEVICE_IDS": "7"}
    tasks = _tasks(_bash(_SLURM, *_TRAIN_ARGS, env=env))
    assert [t["env"]["SLURM_PROCID"] for t in tasks] == ["0", "1"]
    assert all(t["env"]["JAX_LOCAL_DEVICE_IDS"] == "0,1,2,3" for t in tasks)
    assert all(detect_cluster(t["env"]) == "slurm" for t in tasks)


def test_slurm_dry_run_prints_srun(fake_slurm):
    proc = _bash(_SLURM, *_TRAIN_ARGS, env={**fake_slurm, "DRY_RUN": "1"})
    assert proc.returncode == 0, proc.stderr
    [srun] = _commands(proc.stdout)
    assert srun[:3] == ["srun", "--nodes=2", "--ntasks-per-node=4"]
    assert srun[-4:] == ["agentic_jax.train", *_TRAIN_ARGS]


@pytest.mark.parametrize("args, env", [
    (["--workdir=/w"], {}),
    (_TRAIN_ARGS, {"PROCESS_PER": "socket"}),
    (_TRAIN_ARGS, {"GPUS_PER_NODE": "0"}),
])
def test_slurm_bad_arguments_print_usage(fake_slurm, args, env):
    proc = _bash(_SLURM, *args, env={**fake_slurm, **env})
    assert proc.returncode == 2 and not proc.stdout
    assert "usage:" in proc.stderr
