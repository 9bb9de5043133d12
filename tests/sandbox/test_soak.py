"""Sustained load (tools/bench_sandbox.py --soak): mixed snippets from many concurrent
rollouts with worker kills injected; nothing lost or misattributed, memory and processes flat."""

import importlib.util
import pathlib

import pytest

_TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "bench_sandbox.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_sandbox", _TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check(figures: dict, workers: int) -> None:
    assert figures["lost"] == 0 and figures["misattributed"] == 0, figures["odd"]
    assert figures["kills"] >= 1 and figures["restarts"] <= figures["kills"]
    # A kill takes at most the one snippet in flight on that worker with it.
    assert figures["benign_system_errors"] <= 2 * figures["kills"]
    assert figures["executions"] > 50
    # Per worker: outer, server, template, the running child, two prepared ones, and for a
    # moment the previous one while the server reaps it.
    assert figures["procs_max"] <= 7 * workers
    assert figures["host_mb_last"] - figures["host_mb_first"] < 32
    assert figures["worker_mb_last"] - figures["worker_mb_first"] < 32 * workers


def test_short_soak():
    _check(_bench().soak(seconds=12, rollouts=64, workers=2, kill_every=3, timeout_ms=2000), 2)


@pytest.mark.slow
def test_long_soak_256_rollouts():
    _check(_bench().soak(seconds=180, rollouts=256, workers=2, kill_every=10,
                         timeout_ms=2000), 2)
