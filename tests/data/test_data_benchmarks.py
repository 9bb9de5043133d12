"""Benchmarks and training sets read from local files in their own layouts (fixtures written
here in each layout: jsonl, json, parquet, datasets directories)."""

from __future__ import annotations

import json

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentic_jax.data.benchmarks import (
    load_benchmark,
    load_benchmarks,
    parse_benchmark_specs,
    read_fields,
)
from agentic_jax.data.sources import SourceStats
from agentic_jax.reward import grade_answer

MATH500 = [
    {"problem": "Convert $(0,3)$ to polar coordinates.", "solution": "So $\\boxed{(3,\\frac{\\pi}{2})}$.",
     "answer": "\\left( 3, \\frac{\\pi}{2} \\right)", "subject": "Precalculus", "level": 2,
     "unique_id": "test/precalculus/807.json"},
    {"problem": "What is $1+1$?", "solution": "It is $\\boxed{2}$.", "answer": "2",
     "subject": "Prealgebra", "level": 1, "unique_id": "test/prealgebra/1.json"},
]
MATH_TRAIN = [
    {"problem": "Find $x$ if $2x = 6$.", "level": "Level 3", "type": "Algebra",
     "solution": "Divide: $x = \\boxed{3}$."},
    {"problem": "Compute $\\dbinom{5}{2}$.", "level": "Level 5", "type": "Counting & Probability",
     "solution": "$\\dbinom{5}{2} = \\boxed{10}$."},
    {"problem": "Easy one: $2+2$.", "level": "Level 1", "type": "Prealgebra",
     "solution": "$\\boxed{4}$"},
]
GSM8K = [
    {"question": "Natalia sold 48 clips in April and half as many in May. How many in all?",
     "answer": "In May she sold 48/2 = <<48/2=24>>24.\nIn all 48+24 = <<48+24=72>>72.\n#### 72"},
    {"question": "A shirt costs $1,200. What is it?", "answer": "It is 1,200.\n#### 1,200"},
]
AIME = [{"id": 60, "problem": "Find the remainder ...", "answer": "033", "url": "https://x",
         "solution": "..."},
        {"id": 61, "problem": "Find m+n.", "answer": "204", "url": "https://y", "solution": "..."}]
AMC = [{"id": 0, "problem": "What is the sum?", "answer": 142.0, "url": "u"},
       {"id": 1, "problem": "What is the ratio?", "answer": 0.5, "url": "v"}]
MINERVA = [{"problem": "Compute the wavelength.", "type": "Introduction to Astronomy",
            "idx": 0, "solution": "By Wien's law ... \\boxed{500} nm."},
           {"problem": "Find the period.", "type": "Physics", "idx": 1,
            "solution": "T = 2 s.\nFinal answer: The final answer is 2. I hope it is correct."}]
OLYMPIAD = [{"id": 1606, "question": "Find all pairs.", "final_answer": ["$(2,3)$", "$(3,2)$"],
             "solution": ["We check ..."], "subfield": "Number Theory", "unit": None,
             "is_multiple_answer": True, "answer_type": "Tuple", "error": None},
            {"id": 1607, "question": "Find x.", "final_answer": ["$\\frac{1}{2}$"],
             "solution": ["Solve ..."], "subfield": "Algebra", "unit": None,
             "is_multiple_answer": False, "answer_type": "Numerical", "error": None}]
DEEPSCALER = [{"problem": "Let $a+b=3$ ...", "answer": "\\frac{9}{4}", "solution": "... "}]
ORZ = [[{"from": "human", "value": "What is 3*4?"},
        {"from": "assistant", "ground_truth": {"value": "12"}}],
       [{"from": "human", "value": "Half of 9?"},
        {"from": "assistant", "ground_truth": {"value": "\\frac{9}{2}"}}]]
DAPO = [{"data_source": "math_dapo",
         "prompt": [{"role": "user", "content": (
             "Solve the following math problem step by step. The last line of your response "
             "should be of the form Answer: $Answer (without quotes) where $Answer is the answer "
             "to the problem.\n\nWhat is 6 times 7?\n\nRemember to put your answer on its own "
             "line after \"Answer:\"")}],
         "ability": "MATH", "reward_model": {"ground_truth": "42", "style": "rule-lighteval/MATH_v2"},
         "extra_info": {"index": "a1b2"}}]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def test_math500_jsonl(tmp_path):
    problems = load_benchmark(_jsonl(tmp_path / "math500.jsonl", MATH500))
    assert [p.id for p in problems] == ["math500:test/precalculus/807.json",
                                        "math500:test/prealgebra/1.json"]
    first = problems[0]
    assert first.answer == "\\left( 3, \\frac{\\pi}{2} \\right)" and first.kind == "math500"
    assert first.meta["subject"] == "Precalculus" and first.meta["level"] == 2
    assert first.meta["layout"] == "math" and first.difficulty == pytest.approx(0.4)
    assert first.stage == "external" and "\\boxed" in first.direct_solution


def test_math_train_json_answers_from_the_boxed_solution_and_level_filter(tmp_path):
    path = tmp_path / "math_train.json"
    path.write_text(json.dumps(MATH_TRAIN))
    problems = load_benchmark(str(path), name="math", levels=(3, 4, 5))
    assert [(p.answer, p.meta["level"], p.meta["subject"]) for p in problems] == [
        ("3", 3, "Algebra"), ("10", 5, "Counting & Probability")]
    assert problems[0].tests  # a plain number gets a value test for the sandbox


def test_gsm8k_parquet(tmp_path):
    problems = load_benchmark(_parquet(tmp_path / "gsm8k.parquet", GSM8K), name="gsm8k")
    assert [p.answer for p in problems] == ["72", "1200"]
    assert problems[0].meta["layout"] == "gsm8k" and "####" not in problems[0].direct_solution


def test_aime_parquet_and_amc_jsonl(tmp_path):
    aime = load_benchmark(_parquet(tmp_path / "aime.parquet", AIME), name="aime24")
    assert [(p.id, p.answer) for p in aime] == [("aime24:60", "033"), ("aime24:61", "204")]
    amc = load_benchmark(_jsonl(tmp_path / "amc.jsonl", AMC), name="amc23")
    assert [p.answer for p in amc] == ["142", "0.5"]
    assert grade_answer("\\textbf{(C) }142", amc[0].answer)


def test_minerva_answers_from_solutions(tmp_path):
    problems = load_benchmark(_jsonl(tmp_path / "minerva.jsonl", MINERVA), name="minerva")
    assert [p.answer for p in problems] == ["500", "2"]
    assert problems[0].meta["subject"] == "Introduction to Astronomy"


def test_olympiadbench_saved_dataset_directory(tmp_path):
    datasets.Dataset.from_list(OLYMPIAD).save_to_disk(str(tmp_path / "ob"))
    problems = load_benchmark(str(tmp_path / "ob"), name="olympiadbench")
    assert [p.answer for p in problems] == ["$(2,3)$, $(3,2)$", "$\\frac{1}{2}$"]
    assert problems[0].meta["subject"] == "Number Theory"
    assert grade_answer("(3,2), (2,3)", problems[0].answer)


def test_dataset_dict_directory_picks_the_split(tmp_path):
    datasets.DatasetDict({"train": datasets.Dataset.from_list(MATH500[:1]),
                          "test": datasets.Dataset.from_list(MATH500)}
                         ).save_to_disk(str(tmp_path / "dd"))
    assert len(load_benchmark(str(tmp_path / "dd"))) == 2
    assert len(load_benchmark(str(tmp_path / "dd"), split="train")) == 1
    with pytest.raises(ValueError, match="no split 'dev'"):
        load_benchmark(str(tmp_path / "dd"), split="dev")


def test_hub_snapshot_folder_of_parquet_files(tmp_path):
    (tmp_path / "snap" / "data").mkdir(parents=True)
    _parquet(tmp_path / "snap" / "data" / "test-00000-of-00001.parquet", AIME)
    assert [p.answer for p in load_benchmark(str(tmp_path / "snap"), name="aime25")] == [
        "033", "204"]


def test_training_sets_deepscaler_orz_dapo(tmp_path):
    deep = tmp_path / "deepscaler.json"
    deep.write_text(json.dumps(DEEPSCALER))
    assert load_benchmark(str(deep))[0].answer == "\\frac{9}{4}"
    orz = tmp_path / "orz_math_57k_collected.json"
    orz.write_text(json.dumps(ORZ))
    problems = load_benchmark(str(orz), name="orz")
    assert [(p.question, p.answer, p.meta["layout"]) for p in problems] == [
        ("What is 3*4?", "12", "orz"), ("Half of 9?", "\\frac{9}{2}", "orz")]
    dapo = load_benchmark(_parquet(tmp_path / "dapo.parquet", DAPO), name="dapo")
    assert dapo[0].question == "What is 6 times 7?" and dapo[0].answer == "42"
    assert dapo[0].id == "dapo:a1b2"


def test_unreadable_rows_are_skipped_counted_and_named(tmp_path, caplog):
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join([
        json.dumps(MATH500[1]),
        "{not json",
        json.dumps({"problem": "No answer anywhere", "solution": "nothing boxed"}),
        json.dumps({"question": "", "answer": "1"}),
        json.dumps([1, 2]),
        json.dumps({"answer": "5"}),
    ]) + "\n")
    stats = SourceStats()
    problems = load_benchmark(str(path), stats=stats)
    assert len(problems) == 1 and stats.loaded == 1 and stats.skipped == 5
    assert stats.reasons[0].startswith(f"{path}:2: not JSON")
    assert any("no question column" in r for r in stats.reasons)
    assert any("no final answer in the solution" in r for r in stats.reasons)
    assert "skipped 5 unreadable rows" in caplog.text


def test_bad_paths_and_specs_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        load_benchmark(str(tmp_path / "missing.jsonl"))
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="expected a .jsonl, .json or .parquet"):
        load_benchmark(str(tmp_path / "x.csv"))
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match="not a readable parquet file"):
        load_benchmark(str(tmp_path / "bad.parquet"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="neither a saved dataset"):
        load_benchmark(str(tmp_path / "empty"))
    assert parse_benchmark_specs("math500=/a, aime24=/b.parquet") == {
        "math500": "/a", "aime24": "/b.parquet"}
    for bad in ("math500", "=x", "a=1,a=2"):
        with pytest.raises(ValueError, match="--benchmarks"):
            parse_benchmark_specs(bad)
    (tmp_path / "none.jsonl").write_text("{bad\n")
    with pytest.raises(ValueError, match="no readable problems"):
        load_benchmarks({"none": str(tmp_path / "none.jsonl")})


def test_read_fields_rejects_non_text_answers():
    with pytest.raises(ValueError, match="field 'answer'"):
        read_fields({"problem": "q", "answer": True})
    with pytest.raises(ValueError, match="finite"):
        read_fields({"problem": "q", "answer": float("nan")})
