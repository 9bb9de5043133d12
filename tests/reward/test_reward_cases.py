"""The grader on the project's case set (answer pairs and responses in the formats of MATH,
GSM8K, AIME, AMC, Minerva and OlympiadBench), scored by tools/bench_grader.py."""

import importlib.util
import os
import sys

import pytest

_TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "bench_grader.py")
_spec = importlib.util.spec_from_file_location("bench_grader", _TOOL)
bench_grader = importlib.util.module_from_spec(_spec)
sys.modules["bench_grader"] = bench_grader  # dataclasses look their module up by name
_spec.loader.exec_module(bench_grader)


@pytest.fixture(scope="module")
def cases():
    return bench_grader.load_cases()


def test_case_set_covers_the_benchmark_formats(cases):
    assert len(cases) >= 600
    sources = {c["source"] for c in cases}
    assert {"math", "gsm8k", "aime", "amc", "minerva", "olympiadbench"} <= sources
    assert sum("response" in c for c in cases) >= 60
    assert sum(not c["equal"] for c in cases) >= 100


def test_accuracy_and_extraction_on_the_case_set(cases):
    score = bench_grader.score(bench_grader.ours(), cases)
    assert score.accuracy >= 0.97, score.failures
    assert score.extraction >= 0.95, score.failures


def test_malformed_case_file_is_a_clear_error(tmp_path):
    path = tmp_path / "cases.jsonl"
    path.write_text('{"reference": "1"}\n')
    with pytest.raises(ValueError, match="cases.jsonl:1"):
        bench_grader.load_cases(str(path))
