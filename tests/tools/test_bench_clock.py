"""tools/bench_clock.py: interleaved timing, and ratios withheld when the machine was not
shared alike."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "tools"))

import bench_clock  # noqa: E402
from bench_clock import Run, Side  # noqa: E402


def _side(name, wall, cpu, others, n=3):
    return Side(name, tuple(Run(wall, cpu, others) for _ in range(n)))


@pytest.fixture(autouse=True)
def _two_cores(monkeypatch):
    monkeypatch.setattr(bench_clock, "cpu_count", lambda: 2)


def test_functions_run_in_turns_and_each_side_keeps_its_own_runs():
    order = []
    sides = bench_clock.interleaved({"a": lambda: order.append("a"),
                                     "b": lambda: order.append("b")}, repeats=3)
    assert order == ["a", "b"] + ["a", "b"] * 3  # warm-up, then ABAB
    assert [len(s.runs) for s in sides.values()] == [3, 3]
    assert all(r.wall >= 0 and r.cpu >= 0 for s in sides.values() for r in s.runs)


def test_the_ratio_is_by_wall_and_by_cpu_time_per_unit_of_work():
    base, ours = _side("HF", 4.0, 8.0, 0.0), _side("engine", 1.0, 1.0, 0.0)
    line = bench_clock.ratio_line(ours, base, 100, 50)
    assert "engine vs HF: 8.00x by wall time, 16.00x by CPU time per token" == line


def test_a_side_that_lost_cores_to_other_processes_gets_no_ratio():
    # Others took 0.8 of 2 cores (40%) while HF ran, nothing while the engine ran.
    base, ours = _side("HF", 1.0, 1.0, 0.8), _side("engine", 1.0, 1.0, 0.0)
    line = bench_clock.ratio_line(ours, base, 10, 10)
    assert "ratio withheld" in line and "40%" in line and "0%" in line
    assert "x by wall time" not in line
    # Within the margin the ratio is printed; a machine shared alike is marked indicative.
    near = bench_clock.ratio_line(_side("e", 1.0, 1.0, 0.65), base, 10, 10)  # 32% vs 40%
    assert "ratio withheld" not in near and "1.00x by wall time" in near
    alike = bench_clock.ratio_line(_side("e", 1.0, 1.0, 0.7), base, 10, 10)
    assert "1.00x by wall time" in alike and "indicative only" in alike


def test_the_table_has_a_row_a_side_and_ratios_against_each_baseline():
    sides = {"HF": _side("HF", 2.0, 4.0, 0.0), "CB": _side("CB", 1.0, 2.0, 0.0),
             "ours": _side("ours", 0.5, 0.5, 0.0)}
    lines = bench_clock.table(sides, {"HF": 100, "CB": 100, "ours": 100}, ["HF", "CB"])
    assert len(lines) == 1 + 3 + 2
    assert "ours vs HF: 4.00x by wall time, 8.00x by CPU time" in lines[4]
    assert "ours vs CB: 2.00x by wall time, 4.00x by CPU time" in lines[5]
    assert lines[3].split()[1:4] == ["100", "200.0", "5.00"]  # tokens, token/s, CPU-ms/token


def test_repeats_must_be_positive():
    with pytest.raises(ValueError, match="repeats"):
        bench_clock.interleaved({"a": lambda: None}, repeats=0)
