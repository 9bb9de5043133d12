"""The main job's command line on bad input: one line naming the field, exit 2, workdir intact;
an error of the code itself keeps its traceback."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _train(workdir: Path, *flags: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    return subprocess.run(
        [sys.executable, "-m", "agentic_jax.train", "--config=configs/math_ppo.py:smoke",
         f"--workdir={workdir}", "--progress=false", *flags],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("flags, names", [
    (["--config.training.no_such_key=1"], ["unknown config field", "no_such_key"]),
    (["--config.training.lr=fast"], ["training.lr", "fast"]),
    (["--config.checkpoint.init_from=/nonexistent/run"], ["checkpoint.init_from",
                                                          "/nonexistent/run"]),
    (["--config.mesh.data=3"], ["mesh", "3"]),
    (["--config.training.warmup_steps=4"], ["training.warmup_steps", "4"]),
    (["--config.data.template=fancy"], ["data.template", "fancy"]),
    (["--config.model.preset=tiny-3b"], ["model.preset", "tiny-3b"]),
    (["--config.training.max_length=16"], ["training.max_length", "longest prompt"]),
])
def test_bad_input_is_one_line_and_leaves_the_workdir_alone(tmp_path, flags, names):
    workdir = tmp_path / "run"
    workdir.mkdir()
    keep = workdir / "notes.txt"
    keep.write_text("mine")
    result = _train(workdir, *flags)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    for name in names:
        assert name in errors[0], errors[0]
    assert sorted(os.listdir(workdir)) == ["notes.txt"] and keep.read_text() == "mine"


@pytest.mark.parametrize("command", ["agentic_jax.train", "agentic_jax.evaluate"])
def test_an_override_without_a_config_file_says_what_to_add(tmp_path, command):
    # On a run directory --config may be left out, but its --config.* flags exist only beside
    # one: the error names the flag and the fix, not absl's "unknown command line flag".
    from agentic_jax.episodes import rundir
    from configs.math_ppo import get_config

    workdir = tmp_path / "run"
    workdir.mkdir()
    rundir.record_config(str(workdir), get_config("smoke"), num_params=1)
    before = (workdir / "config.json").read_bytes()
    result = subprocess.run(
        [sys.executable, "-m", command, f"--workdir={workdir}", "--config.data.eval_size=9"],
        cwd=REPO, env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True, text=True,
        timeout=120)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: --config.data.eval_size needs --config=FILE beside it (on a run directory the "
        "run's recorded config stays the base and the flags apply on top, so the recipe it ran "
        "serves, e.g. --config=configs/math_ppo.py:smollm2-135m-gsm8k)"]
    assert (workdir / "config.json").read_bytes() == before
    assert sorted(os.listdir(workdir)) == ["config.json"]


def test_resuming_with_another_model_is_refused(tmp_path):
    from agentic_jax.episodes import rundir
    from configs.math_ppo import get_config

    workdir = tmp_path / "run"
    (workdir / "checkpoints").mkdir(parents=True)
    rundir.record_config(str(workdir), get_config("smoke"), num_params=1)
    before = (workdir / "config.json").read_bytes()
    result = _train(workdir, "--config.model.preset=tiny-1m")
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "model.preset" in errors[0] and "tiny-0.2m" in errors[0]
    assert (workdir / "config.json").read_bytes() == before
    assert os.listdir(workdir / "checkpoints") == []


# The run's config step replaced by one that fails as given (a bug, or bad input).
_FAILING_RUN = textwrap.dedent("""
    import sys
    from agentic_jax.errors import UserError
    from agentic_jax.episodes import rundir

    kind = sys.argv.pop()

    def with_record(*args, **kwargs):
        if kind == "user":
            raise UserError("data.source: expected a readable file, got 'x.jsonl'")
        return {"type": lambda: len(None), "key": lambda: {}["lr"]}[kind]()

    rundir.with_record = with_record
    from agentic_jax import train
    train.run()
""")


@pytest.mark.parametrize("kind, exception", [("type", "TypeError"), ("key", "KeyError"),
                                             ("user", None)])
def test_only_bad_input_becomes_one_line(tmp_path, kind, exception):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", _FAILING_RUN, "--config=configs/math_ppo.py:smoke",
         f"--workdir={tmp_path / 'run'}", "--progress=false", kind],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    if exception is None:
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert errors == ["error: data.source: expected a readable file, got 'x.jsonl'"]
    else:
        assert result.returncode not in (0, 2) and errors == [], result.stderr[-2000:]
        assert "Traceback" in result.stderr and f"{exception}:" in result.stderr
