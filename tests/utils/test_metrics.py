"""MetricsWriter / read_metrics: jsonl records, TensorBoard events, resume truncation, partial lines."""

import json
import math
import os

import numpy as np

from agentic_jax.utils import MetricsWriter, read_metrics


def test_write_and_read(tmp_path):
    with MetricsWriter(str(tmp_path)) as w:
        w.write(1, {"reward": np.float32(0.5), "accuracy": 0.25, "kl": float("nan")})
        w.write(2, {"reward": 1.0, "accuracy": 0.5, "kl": 0.01})
    records, skipped = read_metrics(str(tmp_path / "metrics.jsonl"))
    assert skipped == 0
    assert [r["step"] for r in records] == [1, 2]
    assert records[0]["reward"] == 0.5 and records[0]["kl"] is None
    assert os.listdir(tmp_path / "tensorboard")


def test_partial_last_line_and_garbage(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text(json.dumps({"step": 1}) + "\nnot json\n" + '{"step": 2, "rew')
    records, skipped = read_metrics(str(p))
    assert [r["step"] for r in records] == [1]
    assert skipped == 2


def test_resume_moves_newer_records_aside(tmp_path):
    with MetricsWriter(str(tmp_path), tensorboard=False) as w:
        for s in range(1, 6):
            w.write(s, {"reward": s})
    with MetricsWriter(str(tmp_path), tensorboard=False, resume_step=3) as w:
        w.write(4, {"reward": 40})
    records, _ = read_metrics(str(tmp_path / "metrics.jsonl"))
    assert [(r["step"], r["reward"]) for r in records] == [(1, 1), (2, 2), (3, 3), (4, 40)]
    discarded, _ = read_metrics(str(tmp_path / "metrics.discarded.jsonl"))
    assert [r["step"] for r in discarded] == [4, 5]


def test_a_cut_last_line_is_moved_aside_before_the_next_record(tmp_path):
    # What a crash during a write leaves: step 3's record cut short, no newline.
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1}) + "\n" + json.dumps({"step": 2}) + "\n"
                    + '{"step": 3, "rew')
    with MetricsWriter(str(tmp_path), tensorboard=False, resume_step=2) as w:
        w.write(3, {"reward": 3.0})
    records, skipped = read_metrics(str(path))
    assert skipped == 0 and [r["step"] for r in records] == [1, 2, 3]
    assert records[2]["reward"] == 3.0
    assert (tmp_path / "metrics.discarded.jsonl").read_text() == '{"step": 3, "rew\n'


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1}) + "\n" + json.dumps({"step": 2}))
    with MetricsWriter(str(tmp_path), tensorboard=False, resume_step=2) as w:
        w.write(3, {})
    assert [r["step"] for r in read_metrics(str(path))[0]] == [1, 2, 3]
    assert not (tmp_path / "metrics.discarded.jsonl").exists()


def test_disabled_writer_writes_nothing(tmp_path):
    w = MetricsWriter(str(tmp_path / "run"), enabled=False)
    w.write(1, {"reward": 1.0})
    w.close()
    assert not os.path.exists(tmp_path / "run")


def test_infinite_values_are_json_safe(tmp_path):
    with MetricsWriter(str(tmp_path), tensorboard=False) as w:
        w.write(1, {"grad_norm": float("inf")})
    line = (tmp_path / "metrics.jsonl").read_text()
    assert math.isfinite(json.loads(line)["grad_norm"])
