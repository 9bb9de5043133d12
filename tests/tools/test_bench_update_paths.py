"""tools/bench_update_paths.py: its smoke run times the three update paths (or those asked
for) and prints their ratios and the FLOP floor; bad arguments are refused."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import bench_update_paths as bench  # noqa: E402


def test_smoke_run_prints_every_path(capsys):
    bench.main(["--smoke"])
    out = capsys.readouterr().out
    for path in bench.PATHS:
        assert f"  {path}: wall " in out and f"  {path}: " in out.split("FLOP floor")[1]
    assert "LM head on 16 columns a row" in out  # 10 scored of 64, in eighths of the row
    assert out.count(" vs before: ") == 2 and "GFLOP/s" in out


def test_one_path_alone_prints_no_ratio(capsys):
    bench.main(["--smoke", "--paths=default"])
    out = capsys.readouterr().out
    assert "  default: wall " in out and "  before: wall " not in out
    assert " vs before: " not in out and "  default: " in out.split("FLOP floor")[1]


@pytest.mark.parametrize("argv", [["--prompt", "300", "--response", "100"],
                                  ["--response", "10"], ["--rows", "0"], ["--paths=fast"],
                                  ["--paths=,"]])
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert "error" in capsys.readouterr().err
