"""Two CPU processes (2 devices each) train the smoke preset together through the main job's
command line, and match one process with 4 devices."""

import json
import os
import sys
from pathlib import Path

import pytest

from test_two_process import _child_env, _free_port, run_together

_TIMEOUT_S = 400
_STEPS = 2
# Metrics that depend on the numbers of the update, not only on which tokens were sampled.
_UPDATE_KEYS = ("policy_loss", "value_loss", "grad_norm", "approx_kl", "clip_frac", "entropy",
                "tokens")


def _command(workdir: Path, *extra: str, steps: int = _STEPS) -> list[str]:
    return [sys.executable, "-m", "agentic_jax.train", "--config=configs/math_ppo.py:smoke",
            f"--workdir={workdir}", "--progress=false",
            f"--config.training.total_steps={steps}", "--config.training.warmup_steps=1",
            *extra]


def _env(devices: int) -> dict[str, str]:
    env = _child_env()
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return env


def _run(cmds: list[list[str]], devices: int) -> list[str]:
    return run_together(cmds, _env(devices), timeout_s=_TIMEOUT_S)


def _metrics(workdir: Path) -> list[dict]:
    with open(workdir / "metrics.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.slow  # two training processes; test_two_process.py checks the batch split by default
def test_two_processes_train_like_one_process_with_as_many_devices(tmp_path):
    single, multi = tmp_path / "single", tmp_path / "multi"
    address = f"127.0.0.1:{_free_port()}"
    outputs = _run([_command(multi, f"--coordinator_address={address}", "--num_processes=2",
                             f"--process_id={pid}") for pid in range(2)], devices=2)
    for out in outputs:
        assert "devices: 4 global (2 local) across 2 processes" in out
    _run([_command(single)], devices=4)

    # Only process 0 writes metrics and the summary; checkpoints are written together.
    assert sorted(os.listdir(multi)) == sorted(os.listdir(single))
    ref, got = _metrics(single), _metrics(multi)
    assert [r["step"] for r in got] == [r["step"] for r in ref] == list(range(1, _STEPS + 1))
    for r, g in zip(ref, got):
        for key in ("reward", "accuracy", "code_use_rate", "response_length", "tool_calls",
                    "kept_frac"):
            assert g[key] == r[key], (r["step"], key)
        assert set(_UPDATE_KEYS) - {"clip_frac"} <= r.keys()
        for key in _UPDATE_KEYS:
            if key in r:
                assert g[key] == pytest.approx(r[key], rel=1e-4, abs=1e-6), (r["step"], key)
    with open(single / "summary.json") as f_ref, open(multi / "summary.json") as f_got:
        s_ref, s_got = json.load(f_ref), json.load(f_got)
    assert s_got["steps"] == s_ref["steps"] == _STEPS
    for setting in ("tools", "direct"):
        for when in ("initial", "final"):
            assert s_got[when][setting]["accuracy"] == s_ref[when][setting]["accuracy"]
            assert s_got[when][setting]["response_length"] == pytest.approx(
                s_ref[when][setting]["response_length"])

    # The checkpoint the two processes wrote together resumes in one process.
    (out,) = _run([_command(multi, steps=_STEPS + 1)], devices=4)
    assert f"resuming from step {_STEPS}" in out
    assert [r["step"] for r in _metrics(multi)] == list(range(1, _STEPS + 2))
