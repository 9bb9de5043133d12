"""End to end: fit_scaling_law.py, plot_run.py and run_sweep.py on synthetic run directories."""

import json
import os
import subprocess
import sys

import pytest
from scaling_fixtures import PRESET_PARAMS, TRUTH, synthetic_records, write_synthetic_run

from agentic_jax.scaling import PUBLISHED_MATH_LAW, ScalingLaw, fit_runs, plot_run_curves

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_tool(*args, env=None):
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def assert_png(path):
    with open(path, "rb") as f:
        assert f.read(8) == PNG_MAGIC
    assert os.path.getsize(path) > 10_000


@pytest.fixture
def sweep_runs(tmp_path):
    """Eight finished-or-running runs over four sizes; one is still writing, one has garbage."""
    dirs = []
    for i, (preset, num_params) in enumerate(PRESET_PARAMS.items()):
        for seed in (0, 1):
            run_dir = str(tmp_path / f"{preset}_seed{seed}")
            write_synthetic_run(
                run_dir,
                num_params,
                seed,
                partial_tail=(i, seed) == (0, 0),
                garbage=(i, seed) == (1, 1),
            )
            dirs.append(run_dir)
    return dirs


def test_fit_tool_writes_fit_json_and_png(tmp_path, sweep_runs):
    empty = tmp_path / "just_started"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text('{"step": 0, "accur')
    (empty / "config.json").write_text(json.dumps({"num_params": 1e6}))
    out = tmp_path / "fit"
    proc = run_tool(
        "tools/fit_scaling_law.py",
        *sweep_runs,
        str(empty),
        f"--out_dir={out}",
        "--num_bootstrap=50",
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "fit.json").read_text())
    law = ScalingLaw.from_dict(result["law"])
    assert abs(law.alpha / TRUTH[0] - 1) < 0.1 and abs(law.gamma / TRUTH[2] - 1) < 0.3
    assert law.intervals.num_resamples + law.intervals.num_failed == 50
    assert law.goodness.pseudo_r2 > 0.8
    assert ScalingLaw.from_dict(result["reference"]["law"]) == PUBLISHED_MATH_LAW
    assert result["reference"]["goodness"]["deviance"] > law.goodness.deviance
    assert result["data"]["num_points"] == 240 and result["data"]["weighted_by_num_problems"]
    skipped = {os.path.basename(r["run_dir"]): r["skipped_lines"] for r in result["runs"]}
    assert skipped["tiny-0.2m_seed0"] == 1 and skipped["tiny-1m_seed1"] == 1
    assert result["skipped_runs"] == [{"run_dir": str(empty), "reason": "no usable records"}]
    assert_png(out / "fit.png")
    assert "alpha" in proc.stderr and "reference" in proc.stderr


def test_fit_tool_fails_clearly_on_a_missing_run(tmp_path, sweep_runs):
    with pytest.raises(FileNotFoundError, match="nowhere.*no metrics file"):
        fit_runs([*sweep_runs, str(tmp_path / "nowhere")], str(tmp_path / "out"))
    with pytest.raises(ValueError, match="no run directories"):
        fit_runs([], str(tmp_path / "out"))
    assert not (tmp_path / "out" / "fit.json").exists()


def test_fit_published_form_without_intervals(tmp_path, sweep_runs):
    result = fit_runs(sweep_runs, str(tmp_path), fix_bias_at_zero=True, num_bootstrap=0)
    assert result["law"]["bias"] == 0.0 and result["law"]["intervals"] is None
    assert result["options"]["fix_bias_at_zero"]


def test_plot_tool_overlays_runs(tmp_path, sweep_runs):
    out = tmp_path / "curves.png"
    proc = run_tool("tools/plot_run.py", *sweep_runs[:3], f"--out={out}")
    assert proc.returncode == 0, proc.stderr
    assert_png(out)
    assert "skipped 1 unreadable metrics lines" in proc.stderr


def test_plot_run_curves_for_the_trainer(tmp_path):
    records = synthetic_records(1e6, seed=0, steps=5)
    records[2] = {"step": 3, "accuracy": None}  # a step with missing metrics
    records.append({"step": 6, "eval_accuracy": 0.4})  # an evaluation-only record
    path = plot_run_curves(records, tmp_path / "sub" / "run.png", title="tiny-1m")
    assert_png(path)
    assert_png(plot_run_curves({"a": records, "b": records[:2]}, tmp_path / "two.png"))
