"""tools/same_metrics.py: two runs are the same when every non-timing value of every step and of
the held-out summaries is equal; a changed value, a new key or a missing step is a difference."""

import importlib.util
import json
from pathlib import Path

_TOOL = Path(__file__).parents[2] / "tools" / "same_metrics.py"


def _tool():
    spec = importlib.util.spec_from_file_location("same_metrics", _TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(path: Path, steps: list[dict], summary: dict) -> str:
    path.mkdir()
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    (path / "summary.json").write_text(json.dumps(summary))
    return str(path)


STEPS = [{"step": 1, "loss": 0.5, "mismatch_kl": 1e-14, "time_update_s": 7.2,
          "tokens_per_sec": 94.0, "peak_rss_mb": 986.0},
         {"step": 2, "loss": 0.25, "mismatch_kl": 2e-14, "time_update_s": 7.9,
          "tokens_per_sec": 90.0, "peak_rss_mb": 990.0}]
SUMMARY = {"final": {"tools": {"accuracy": 0.5}}, "wall_time_s": 61.0,
           "warmstart": {"warmstart/loss": 5.4, "warmstart/time_s": 23.8}}


def test_timing_differs_values_equal_is_the_same(tmp_path, capsys):
    tool = _tool()
    a = _run(tmp_path / "a", STEPS, SUMMARY)
    slower = [{**r, "time_update_s": 9.0, "tokens_per_sec": 50.0, "peak_rss_mb": 1.0e3}
              for r in STEPS]
    b = _run(tmp_path / "b", slower, {**SUMMARY, "wall_time_s": 99.0,
                                      "warmstart": {"warmstart/loss": 5.4,
                                                    "warmstart/time_s": 30.0}})
    assert tool.main([a, b]) == 0
    assert capsys.readouterr().out.endswith(": 2 steps, 8 values compared: identical\n")


def test_a_changed_value_a_new_key_or_a_lost_step_differ(tmp_path, capsys):
    tool = _tool()
    a = _run(tmp_path / "a", STEPS, SUMMARY)
    changed = [STEPS[0], {**STEPS[1], "loss": 0.2500001, "is_weight_mean": 1.0}]
    b = _run(tmp_path / "b", changed, {**SUMMARY, "final": {"tools": {"accuracy": 0.25}}})
    assert tool.main([a, b]) == 1
    out = capsys.readouterr().out
    assert "metrics.jsonl:step 2: loss: 0.25 != 0.2500001" in out
    assert "metrics.jsonl:step 2: is_weight_mean: '<absent>' != 1.0" in out
    assert "summary.json: final.tools.accuracy: 0.5 != 0.25" in out
    c = _run(tmp_path / "c", STEPS[:1], SUMMARY)
    assert tool.main([a, c]) == 1
    assert "metrics.jsonl:step 2: only in the first run" in capsys.readouterr().out
