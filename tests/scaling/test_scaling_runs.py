"""Reading scaling-law points from run directories, including runs still being written."""

import json

import numpy as np
import pytest
from scaling_fixtures import write_synthetic_run

from agentic_jax.scaling import load_metrics, load_run, read_num_params


def test_reads_points_skipping_partial_and_garbage_lines(tmp_path):
    run_dir = str(tmp_path / "run")
    write_synthetic_run(run_dir, 4e6, seed=0, steps=10, partial_tail=True, garbage=True)
    run = load_run(run_dir)
    assert run.skipped_lines == 2 and run.dropped_records == 0
    assert run.step.tolist() == list(range(1, 11))
    assert run.num_params == 4e6 and np.all(run.N == 4e-3)
    np.testing.assert_allclose(run.T, np.arange(1, 11) / 1e6)
    assert np.all(run.num_problems == 64)
    assert run.name == "run"


def test_drops_records_without_usable_values(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"num_params": 1e6}))
    records = [
        {"step": 1, "accuracy": 0.5, "response_length": 20.0},
        {"step": 2, "accuracy": None, "response_length": 20.0},  # NaN as the writer logs it
        {"step": 3, "accuracy": 1.5, "response_length": 20.0},
        {"step": 4, "response_length": 20.0},
        {"step": 5, "accuracy": 0.5, "response_length": -1.0},
        {"accuracy": 0.5, "response_length": 20.0},
        {"step": True, "accuracy": 0.5, "response_length": 20.0},
        {"step": 8, "accuracy": 0.75, "response_length": 30.0, "num_problems": 16},
    ]
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records) + "[1, 2]\n"
    )
    run = load_run(str(run_dir))
    assert run.step.tolist() == [1, 8] and run.success.tolist() == [0.5, 0.75]
    assert run.dropped_records == 6 and run.skipped_lines == 1
    assert run.num_problems is None  # not every kept record says how many problems it saw


def test_success_key_selects_the_metric(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(
        json.dumps(
            {
                "step": 3,
                "accuracy": 0.2,
                "eval_accuracy": 0.4,
                "response_length": 9,
                "num_params": 2e5,
            }
        )
        + "\n"
    )
    assert load_run(str(run_dir), success_key="eval_accuracy").success.tolist() == [0.4]


@pytest.mark.parametrize("params_in", ["config", "model", "metrics"])
def test_num_params_lookup(tmp_path, params_in):
    write_synthetic_run(str(tmp_path), 16e6, seed=1, steps=3, params_in=params_in)
    records, _ = load_metrics(str(tmp_path))
    assert read_num_params(str(tmp_path), records) == 16e6


def test_config_num_params_wins_over_metrics(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"num_params": 5, "model": {"num_params": 6}}))
    assert read_num_params(str(tmp_path), [{"num_params": 7}]) == 5
    (tmp_path / "config.json").write_text(json.dumps({"model": {"num_params": 6}}))
    assert read_num_params(str(tmp_path), [{"num_params": 7}]) == 6


def test_missing_num_params_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model": {"preset": "tiny-1m"}}))
    with pytest.raises(ValueError, match="no parameter count.*num_params"):
        read_num_params(str(tmp_path), [{"step": 1}])


@pytest.mark.parametrize("value", [-3, 0, "1M", True])
def test_bad_num_params(tmp_path, value):
    (tmp_path / "config.json").write_text(json.dumps({"num_params": value}))
    with pytest.raises(ValueError, match="num_params must be a positive number"):
        read_num_params(str(tmp_path), [])


def test_unreadable_config_names_the_file(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json: not a readable JSON config"):
        read_num_params(str(tmp_path), [])


def test_missing_metrics_names_the_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="no metrics file"):
        load_run(str(tmp_path / "nowhere"))


def test_unreadable_metrics_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "metrics.jsonl").write_text("{}\n")

    def refuse(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr("agentic_jax.scaling.runs.read_metrics", refuse)
    with pytest.raises(OSError, match="metrics.jsonl: cannot read metrics \\(Permission denied"):
        load_metrics(str(tmp_path))


def test_trainer_episode_counts_weigh_the_points(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"num_params": 1e6}))
    records = [
        {"step": 1, "accuracy": 0.5, "response_length": 20.0, "num_episodes": 64.0,
         "num_problems": 3},
        {"step": 2, "accuracy": 0.6, "response_length": 21.0, "num_episodes": 32.0},
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert load_run(str(run_dir)).num_problems.tolist() == [64.0, 32.0]
    assert load_run(str(run_dir), weight_key="num_problems").num_problems is None
