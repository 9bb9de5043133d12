"""configs/scaling_sweep.py and tools/run_sweep.py, with a stand-in trainer."""

import importlib.util
import json
import os
import shlex
import subprocess
import sys

import pytest

from agentic_jax.models import PRESETS

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))


def load_config_module():
    path = os.path.join(REPO, "configs", "scaling_sweep.py")
    spec = importlib.util.spec_from_file_location("scaling_sweep_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


scaling_sweep = load_config_module()


@pytest.mark.parametrize("variant", [None, "cpu", "smoke", "large"])
def test_sweep_spans_the_ladder(variant):
    c = scaling_sweep.get_config(variant)
    sizes = [PRESETS[p].num_params() for p in c.presets]
    assert len(set(sizes)) >= 4 and max(sizes) / min(sizes) >= 30
    assert sizes == sorted(sizes)
    assert len(set(c.seeds)) >= 2 and c.total_steps > 0
    assert c.base_config.split(":")[0] == "configs/math_ppo.py"


def test_unknown_sweep_variant():
    with pytest.raises(ValueError, match="unknown config variant 'huge'"):
        scaling_sweep.get_config("huge")


def run_sweep(sweep_dir, *flags, env=None):
    return subprocess.run(
        [
            sys.executable,
            "tools/run_sweep.py",
            "--config=configs/scaling_sweep.py",
            f"--sweep_dir={sweep_dir}",
            *flags,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_dry_run_prints_trainer_commands_and_skips_done_runs(tmp_path):
    done = tmp_path / "tiny-1m_seed1"
    done.mkdir()
    (done / "sweep_done.json").write_text(json.dumps({"total_steps": 60}))
    proc = run_sweep(tmp_path, "--dry_run", "--config.overrides=('training.batch_size=16',)")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 8 and lines[3] == f"# done: {done}"
    commands = [shlex.split(line) for line in lines if not line.startswith("#")]
    assert commands[0][1:] == [
        "-m",
        "agentic_jax.train",
        "--config=configs/math_ppo.py",
        f"--workdir={tmp_path / 'tiny-0.2m_seed0'}",
        "--config.model.preset=tiny-0.2m",
        "--config.seed=0",
        "--config.training.total_steps=60",
        "--config.training.batch_size=16",
    ]
    runs = {(c[5].split("=")[1], c[6].split("=")[1]) for c in commands}
    assert runs == {
        (p, s) for p in ("tiny-0.2m", "tiny-1m", "tiny-4m", "tiny-16m") for s in ("0", "1")
    } - {("tiny-1m", "1")}
    assert not (tmp_path / "tiny-0.2m_seed0").exists()  # a dry run writes nothing


def test_sweep_runs_each_once_then_fits(tmp_path):
    log = tmp_path / "calls.log"
    env = {
        "PYTHONPATH": os.pathsep.join([HERE, REPO]),
        "FAKE_TRAINER_LOG": str(log),
        "FAKE_TRAINER_FAIL": "tiny-4m",
    }
    flags = (
        "--config.trainer_module=fake_trainer",
        "--config.total_steps=12",
        "--config.fit.num_bootstrap=20",
    )
    proc = run_sweep(tmp_path / "sweep", *flags, env=env)
    assert proc.returncode == 1, proc.stderr
    assert "2 of 8 runs failed" in proc.stderr
    assert len(log.read_text().splitlines()) == 8
    fit = json.loads((tmp_path / "sweep" / "fit.json").read_text())
    assert fit["data"]["num_runs"] == 6 and fit["data"]["num_points"] == 72

    assert os.path.exists(tmp_path / "sweep" / "fit.png")

    # started again, the sweep trains only what is not done yet
    log.write_text("")
    proc = run_sweep(tmp_path / "sweep", *flags, "--skip_fit", env={**env, "FAKE_TRAINER_FAIL": ""})
    assert proc.returncode == 0, proc.stderr
    assert sorted(log.read_text().splitlines()) == [
        "tiny-4m 0 configs/math_ppo.py",
        "tiny-4m 1 configs/math_ppo.py",
    ]
    assert all(
        os.path.exists(tmp_path / "sweep" / f"{p}_seed{s}" / "sweep_done.json")
        for p in ("tiny-0.2m", "tiny-1m", "tiny-4m", "tiny-16m")
        for s in (0, 1)
    )
