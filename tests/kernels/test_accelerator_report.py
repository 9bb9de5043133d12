"""tools/accelerator_report.py --dry_run: every check runs at tiny shapes on CPU (Pallas in
interpret mode) and lands in the JSON and the markdown table; the model checks run on a CPU
too, and a model that cannot be loaded is a row that says so."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # ~60 s: every check in a subprocess; each part has its own fast tests
def test_dry_run_writes_every_check(tmp_path):
    run = subprocess.run(
        [sys.executable, str(_REPO / "tools" / "accelerator_report.py"), "--dry_run", "--out",
         str(tmp_path)], cwd=_REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads((tmp_path / "accelerator_report.json").read_text())
    checks = [r["check"] for r in report["rows"]]
    assert checks == ["paged decode step", "flash attention fwd+bwd", "train step MFU",
                      "speculative decoding", "serving latency, prefill calls",
                      "serving latency, mixed_prefill=256"]
    assert all(r["value"] != "failed" for r in report["rows"]), report["rows"]
    assert "of 4800 GB/s HBM roofline" in report["rows"][0]["vs"]
    speculative, serving, mixed = report["rows"][3:]
    assert "the same tokens in 4 of 4 requests" in speculative["value"]
    assert "x plain decoding" in speculative["vs"]
    assert "p99" in serving["value"] and "x alone" in serving["vs"]
    assert "x the p99 with prefill calls" in mixed["vs"]
    table = (tmp_path / "accelerator_report.md").read_text()
    assert table.count("\n| ") == 7 and "serving latency" in table


def test_refuses_a_cpu_run_without_dry_run(tmp_path):
    run = subprocess.run(
        [sys.executable, str(_REPO / "tools" / "accelerator_report.py"), "--out", str(tmp_path)],
        cwd=_REPO, capture_output=True, text=True, timeout=300,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 2 and "--dry_run" in run.stderr
    assert not (tmp_path / "accelerator_report.json").exists()


def test_model_checks_run_on_a_cpu_and_report_a_model_they_cannot_load(tmp_path):
    run = subprocess.run(
        [sys.executable, str(_REPO / "tools" / "accelerator_report.py"), "--out", str(tmp_path),
         "--checks=speculative,serving", f"--model={tmp_path / 'missing.gguf'}"],
        cwd=_REPO, capture_output=True, text=True, timeout=300,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr[-2000:]
    rows = json.loads((tmp_path / "accelerator_report.json").read_text())["rows"]
    assert [r["check"] for r in rows] == ["speculative", "serving"]
    assert all(r["value"] == "failed" and "missing.gguf" in r["vs"] for r in rows), rows


@pytest.mark.parametrize("flag, message", [("--checks=speculative,nope", "unknown ['nope']"),
                                           ("--speculative_tokens=0", "must be >= 1"),
                                           ("--clients=0", "must be >= 1"),
                                           ("--mixed_prefill=0", "must be >= 1")])
def test_bad_flags_are_refused(monkeypatch, capsys, flag, message):
    monkeypatch.syspath_prepend(str(_REPO / "tools"))
    import accelerator_report

    with pytest.raises(SystemExit) as exit_:
        accelerator_report.parse_args(["--dry_run", flag])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert accelerator_report.parse_args(["--checks=serving"]).checks == "serving"
