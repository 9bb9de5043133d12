"""Table files: a line no reader could parse (nested past any recursion limit) is one bad row,
reported with where it is; the rows around it are read. One field cleaner and one JSON-lines
reader serve every source."""

import json

import pytest

from agentic_jax.data.benchmarks import load_benchmark
from agentic_jax.data.sources import SourceStats
from agentic_jax.data.table_files import field_text, read_rows
from agentic_jax.errors import UserError

DEEP = "[" * 100_000 + "]" * 100_000


def test_a_deeply_nested_jsonl_line_is_one_bad_row(tmp_path):
    path = tmp_path / "bench.jsonl"
    rows = [{"problem": "1+1", "answer": "2"}, {"problem": "2+2", "answer": "4"}]
    path.write_text(f"{json.dumps(rows[0])}\n{DEEP}\nnot json\n{json.dumps(rows[1])}\n")
    bad = []
    read = list(read_rows(str(path), on_error=lambda where, why: bad.append((where, why))))
    assert [r.data for r in read] == rows
    assert [r.where for r in read] == [f"{path}:1", f"{path}:4"]
    assert bad[0] == (f"{path}:2", "JSON nested deeper than 32 levels")
    assert bad[1][0] == f"{path}:3" and bad[1][1].startswith("not JSON")
    stats = SourceStats()
    problems = load_benchmark(str(path), stats=stats)
    assert [p.answer for p in problems] == ["2", "4"]
    assert (stats.loaded, stats.skipped) == (2, 2)
    assert stats.reasons[0] == f"{path}:2: JSON nested deeper than 32 levels"


def test_a_deeply_nested_json_file_is_one_clear_error(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(DEEP)
    with pytest.raises(UserError, match="bench.json: JSON nested too deep to read"):
        list(read_rows(str(path)))


def test_a_deeply_nested_line_of_a_jsonl_source_is_one_skipped_row(tmp_path):
    from agentic_jax.data.sources import load_source

    path = tmp_path / "train.jsonl"
    path.write_text(f'{json.dumps({"question": "1+1", "answer": "2"})}\n{DEEP}\n')
    stats = SourceStats()
    problems = load_source(f"jsonl:{path}", stats=stats)
    assert [p.answer for p in problems] == ["2"]
    assert stats.reasons == [f"{path}:2: JSON nested deeper than 32 levels"]


def test_field_text_cleans_every_source_s_fields_the_same_way():
    assert field_text(b"b'Solve -3*k + 12 = 0 for k.\\n'", "question") == (
        "Solve -3*k + 12 = 0 for k.")
    assert field_text(142.0, "answer") == "142" and field_text(12, "answer") == "12"
    assert field_text(["3", " 4 "], "final_answer") == "3, 4"
    for bad, why in ((None, "missing"), ("  ", "empty"), (True, "boolean"),
                     (float("inf"), "finite"), ({"a": 1}, "expected text")):
        with pytest.raises(UserError, match=f"field 'answer': .*{why}"):
            field_text(bad, "answer")


def test_a_jsonl_source_reads_json_lines_whatever_the_file_s_name(tmp_path):
    from agentic_jax.data.sources import load_source

    path = tmp_path / "train.txt"
    path.write_text(f'{json.dumps({"question": "1+1", "answer": 2.0})}\n\n{{cut\n')
    stats = SourceStats()
    problems = load_source(f"jsonl:{path}", stats=stats)
    assert [(p.id, p.answer) for p in problems] == [("jsonl:train.txt:1", "2")]
    assert stats.reasons[0].startswith(f"{path}:3: not JSON")
