"""tools/accelerator_report.py --dry_run: every check runs at tiny shapes on CPU (Pallas in
interpret mode) and lands in the JSON and the markdown table."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # ~50 s: every check in a subprocess; each part has its own fast tests
def test_dry_run_writes_every_check(tmp_path):
    run = subprocess.run(
        [sys.executable, str(_REPO / "tools" / "accelerator_report.py"), "--dry_run", "--out",
         str(tmp_path)], cwd=_REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads((tmp_path / "accelerator_report.json").read_text())
    checks = [r["check"] for r in report["rows"]]
    assert checks == ["paged decode step", "flash attention fwd+bwd", "train step MFU"]
    assert all(r["value"] != "failed" for r in report["rows"]), report["rows"]
    assert "of 4800 GB/s HBM roofline" in report["rows"][0]["vs"]
    table = (tmp_path / "accelerator_report.md").read_text()
    assert table.count("\n| ") == 4 and "train step MFU" in table


def test_refuses_a_cpu_run_without_dry_run(tmp_path):
    run = subprocess.run(
        [sys.executable, str(_REPO / "tools" / "accelerator_report.py"), "--out", str(tmp_path)],
        cwd=_REPO, capture_output=True, text=True, timeout=300,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 2 and "--dry_run" in run.stderr
    assert not (tmp_path / "accelerator_report.json").exists()
