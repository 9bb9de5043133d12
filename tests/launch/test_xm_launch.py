"""The XManager launcher's --dry_run: jobs, hardware, pass-through overrides and sweeps."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]
_SCRIPT = _REPO / "launch" / "xm_launch.py"
_spec = importlib.util.spec_from_file_location("xm_launch", _SCRIPT)
xm_launch = sys.modules["xm_launch"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(xm_launch)

_SWEEP = '''
import ml_collections

def get_config(arg=None):
    c = ml_collections.ConfigDict()
    c.base_config = "configs/math_ppo.py:smoke" if arg == "smoke" else "configs/math_ppo.py"
    c.presets = ("tiny-1m", "tiny-4m", "tiny-16m")
    c.seeds = (0, 1)
    c.total_steps = 4 if arg == "smoke" else 60
    c.overrides = ("training.batch_size=16",)
    c.fit = ml_collections.ConfigDict({"l2": 0.0})
    return c
'''


def _dry_run(*args: str) -> tuple[int, list[dict], str]:
    proc = subprocess.run([sys.executable, str(_SCRIPT), "--dry_run", *args], cwd=_REPO,
                          capture_output=True, text=True, timeout=60)
    jobs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, jobs, proc.stderr


def test_dry_run_tpu_job_passes_overrides_through():
    rc, [job], _ = _dry_run("--executor=tpu", "--accelerator=v5p-32", "--workdir=gs://b/runs",
                            "--config=configs/math_ppo.py:qwen2.5-7b",
                            "--config.training.lr=1e-5", "--config.mesh.fsdp=16")
    assert rc == 0
    assert (job["kind"], job["hosts"], job["per_host"], job["topology"]) == ("v5p", 4, 4, "2x2x4")
    assert job["command"] == [
        "python", "-m", "agentic_jax.train", "--config=configs/math_ppo.py:qwen2.5-7b",
        "--workdir=gs://b/runs/run", "--config.training.lr=1e-5", "--config.mesh.fsdp=16"]


def test_dry_run_gpu_and_local():
    rc, [gpu], _ = _dry_run("--executor=gpu", "--accelerator=h100-32", "--workdir=/w")
    assert rc == 0 and (gpu["kind"], gpu["hosts"], gpu["per_host"]) == ("H100", 4, 8)
    rc, [local], _ = _dry_run("--workdir=/w", "--config=configs/math_ppo.py:smoke")
    assert rc == 0 and (local["executor"], local["kind"], local["hosts"]) == ("local", "cpu", 1)


def test_dry_run_sweep_runs_every_preset_and_seed(tmp_path):
    sweep = tmp_path / "sweep.py"
    sweep.write_text(_SWEEP)
    rc, jobs, err = _dry_run("--executor=tpu", "--accelerator=v6e-16", "--workdir=/w",
                             f"--sweep={sweep}:smoke", "--config.rl.group_size=8")
    assert rc == 0, err
    assert [job["name"] for job in jobs] == [
        f"tpu-tiny-{size}_seed{seed}" for size in ("1m", "4m", "16m") for seed in (0, 1)]
    assert jobs[-1]["command"][3:] == [
        "--config=configs/math_ppo.py:smoke", "--workdir=/w/tiny-16m_seed1",
        "--config.model.preset=tiny-16m", "--config.seed=1", "--config.training.batch_size=16",
        "--config.training.total_steps=4", "--config.rl.group_size=8"]


def test_sweep_without_presets_or_with_bad_override_is_rejected():
    with pytest.raises(ValueError, match="no presets"):
        xm_launch.sweep_points({"seeds": [0]}, "configs/math_ppo.py")
    with pytest.raises(ValueError, match="'lr' is not group.key=value"):
        xm_launch.sweep_points({"presets": ["tiny-1m"], "overrides": ["lr"]}, "c.py")


def test_project_sweep_config_builds_jobs():
    sweep = _REPO / "configs" / "scaling_sweep.py"
    if not sweep.exists():
        pytest.skip("configs/scaling_sweep.py not present")
    rc, jobs, err = _dry_run("--workdir=/w", f"--sweep={sweep}")
    assert rc == 0, err
    assert jobs and all(job["command"][2] == "agentic_jax.train" for job in jobs)


@pytest.mark.parametrize("args, message", [
    (["--executor=tpu"], "needs --accelerator"),
    (["--executor=tpu", "--accelerator=v5p-31"], "no v5p slice of that size"),
    (["--executor=tpu", "--accelerator=v9-8"], "is not a TPU slice"),
    (["--executor=gpu", "--accelerator=h100-12"], "do not fill nodes"),
    (["--executor=gpu", "--accelerator=k80-8"], "is not KIND-COUNT"),
    (["--accelerator=v5p-8"], "--accelerator is for --executor=tpu or gpu"),
    (["--sweep=/nonexistent/sweep.py"], "does not exist"),
    (["--bogus"], "Unknown command line flag 'bogus'"),
])
def test_bad_flags_fail_with_one_line(args, message):
    rc, jobs, err = _dry_run("--workdir=/w", *args)
    assert rc != 0 and not jobs
    assert message in err and len(err.strip().splitlines()) == 1


def test_missing_workdir_is_reported():
    proc = subprocess.run([sys.executable, str(_SCRIPT), "--dry_run"], cwd=_REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "--workdir" in proc.stderr


@pytest.mark.parametrize("name, expected", [
    ("v4-8", ("v4", 1, 4, "2x2x1")),
    ("v4-128", ("v4", 16, 4, "4x4x4")),
    ("v5p-256", ("v5p", 32, 4, "4x4x8")),
    ("v5e-1", ("v5e", 1, 1, "1x1")),
    ("v5litepod-8", ("v5e", 1, 8, "2x4")),
    ("v5litepod-16", ("v5e", 4, 4, "4x4")),
    ("v6e-256", ("v6e", 64, 4, "16x16")),
])
def test_tpu_slices(name, expected):
    hw = xm_launch.tpu_hardware(name)
    assert (hw.kind, hw.hosts, hw.per_host, hw.topology) == expected
