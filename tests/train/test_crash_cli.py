"""The train command under the faults a scheduler brings: a second run started on the same
directory is refused in one line, and SIGTERM (preemption) ends the run with 143 after saving
the step in flight, which a rerun resumes from."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, JAX_PLATFORMS="cpu")


def _train(workdir: Path) -> list[str]:
    return [sys.executable, "-m", "agentic_jax.train", "--config=configs/math_ppo.py:smoke",
            f"--workdir={workdir}", "--progress=false", "--config.training.total_steps=40"]


@pytest.mark.slow  # the command twice (about 3 minutes on 2 cores); test_train_run has both
def test_a_second_run_is_refused_and_sigterm_saves_and_exits(tmp_path):
    workdir = tmp_path / "run"
    first = subprocess.Popen(_train(workdir), cwd=REPO, env=ENV, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (workdir / "run.lock").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        second = subprocess.run(_train(workdir), cwd=REPO, env=ENV, capture_output=True,
                                text=True, timeout=300)
        assert second.returncode == 2
        errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in second.stderr, second.stderr[-2000:]
        assert errors[0].startswith(f"error: {workdir} is in use by pid {first.pid} on host ")
        lines = []
        for line in first.stdout:  # the first step done: the run is in its loop
            lines.append(line)
            if line.startswith("step 1 |"):
                break
        sent = time.monotonic()
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=120)
        exit_s = time.monotonic() - sent
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 143, err[-2000:]
    stopped = [line for line in out.splitlines() if line.startswith("stopped by SIGTERM")]
    assert len(stopped) == 1, out[-2000:]
    step = int(stopped[0].split()[5].rstrip(":"))
    assert step < 40 and str(step) in os.listdir(workdir / "checkpoints")
    assert "Traceback" not in err, err[-2000:]
    assert exit_s < 60, exit_s  # the rest of one smoke step and one save
    print(f"SIGTERM -> exit {exit_s:.1f} s, after step {step}")
    assert not (workdir / "run.lock").exists()
    resumed = subprocess.run(_train(workdir)[:-1] + [f"--config.training.total_steps={step + 1}"],
                             cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming from step {step} " in resumed.stdout
