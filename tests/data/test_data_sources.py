"""Problem sources: curriculum, jsonl with malformed rows, tfds math_dataset (mocked)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
import tensorflow_datasets as tfds

from agentic_jax.data import SourceStats, load_source
from agentic_jax.data.gsm8k import normalise_gsm8k_answer


def test_curriculum_source_gives_disjoint_train_and_test():
    train = load_source("curriculum", split="train", seed=1, test_fraction=0.1)
    test = load_source("curriculum", split="test", seed=1, test_fraction=0.1, limit=50)
    assert len(train) > 17000 and len(test) == 50
    assert not {p.question for p in train} & {p.question for p in test}
    with pytest.raises(ValueError, match="split"):
        load_source("curriculum", split="validation")


def test_jsonl_rows_load_and_malformed_rows_are_counted(tmp_path, caplog):
    rows = [
        json.dumps({"question": "What is 2 + 2?", "answer": "4"}),
        "{not json",
        json.dumps({"question": "Only a question"}),
        json.dumps(["a", "list"]),
        "",
        json.dumps({"question": "Name a root of x**2 - 4.", "answer": "2",
                    "tests": "assert ANSWER in ('2', '-2')"}),
        json.dumps({"question": "  ", "answer": "1"}),
        json.dumps({"question": "How many?", "answer": 12}),
        json.dumps({"question": "Q", "answer": "1", "tests": 5}),
        json.dumps({"question": "Simplify sin(x)**2 + cos(x)**2.", "answer": "1 + 0*x'"}),
    ]
    path = tmp_path / "set.jsonl"
    path.write_text("\n".join(rows) + "\n")
    stats = SourceStats()
    with caplog.at_level(logging.WARNING):
        problems = load_source(f"jsonl:{path}", stats=stats)
    assert [p.question for p in problems] == ["What is 2 + 2?", "Name a root of x**2 - 4.",
                                              "How many?", "Simplify sin(x)**2 + cos(x)**2."]
    assert (stats.loaded, stats.skipped) == (4, 5)
    assert any("set.jsonl:2" in r for r in stats.reasons)
    assert any("field 'answer': missing" in r for r in stats.reasons)
    assert "skipped 5 malformed rows" in caplog.text
    assert problems[0].id == "jsonl:set.jsonl:1" and problems[0].stage == "external"
    assert problems[1].tests == "assert ANSWER in ('2', '-2')"
    assert problems[2].answer == "12" and "sympy.Rational('12')" in problems[2].tests
    assert problems[3].tests == ""  # not a plain number: graded by equivalence only


def test_bad_specs_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        load_source(f"jsonl:{tmp_path}/missing.jsonl")
    with pytest.raises(ValueError, match="expected 'curriculum'"):
        load_source("mnist")


def test_gsm8k_answer_normalisation():
    assert normalise_gsm8k_answer("She pays 2*3=<<2*3=6>>6.\n#### 1,234") == "1234"
    assert normalise_gsm8k_answer("#### $18.") == "18"
    assert normalise_gsm8k_answer("a #### b #### -0.5") == "-0.5"
    with pytest.raises(ValueError, match="####"):
        normalise_gsm8k_answer("no final answer")


def _fake_split(rows):
    def as_data_source(self, split, **kwargs):
        return rows[split]
    return as_data_source


def test_math_dataset_answers_are_normalised():
    rows = {"train": [
        {"question": b"b'Solve -3*k + 12 = 0 for k.\\n'", "answer": b"b'4\\n'"},
        {"question": "Let f(x) = x**2. What is f(3)?\n", "answer": "9\n"},
        {"question": "Empty answer", "answer": b"b''"},
    ]}
    stats = SourceStats()
    with tfds.testing.mock_data(as_data_source_fn=_fake_split(rows)):
        problems = load_source("math_dataset/algebra__linear_1d", split="train", stats=stats)
    assert [(p.question, p.answer) for p in problems] == [
        ("Solve -3*k + 12 = 0 for k.", "4"), ("Let f(x) = x**2. What is f(3)?", "9")]
    assert problems[0].kind == "math_dataset/algebra__linear_1d"
    assert stats.skipped == 1 and "empty" in stats.reasons[0]


def test_importing_the_package_loads_no_heavy_libraries():
    code = ("import sys, agentic_jax.data; heavy = [m for m in ('tensorflow_datasets', "
            "'tensorflow', 'transformers', 'jax') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _math_rows(n):
    return [{"problem": f"What is {i} + {2 * i + 1}?", "solution": f"$\\boxed{{{3 * i + 1}}}$",
             "level": f"Level {1 + i % 5}", "type": "Algebra"} for i in range(n)]


def test_file_source_reads_a_dataset_layout_and_splits_it(tmp_path):
    path = tmp_path / "math_train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _math_rows(20)))
    train = load_source(f"file:{path}", split="train", seed=3, test_fraction=0.25)
    test = load_source(f"file:{path}", split="test", seed=3, test_fraction=0.25)
    assert (len(train), len(test)) == (15, 5)
    assert not {p.id for p in train} & {p.id for p in test}
    assert all(p.stage == "external" and p.meta["layout"] == "math" for p in train + test)
    assert {p.question: p.answer for p in train + test}["What is 2 + 5?"] == "7"
    hard = load_source(f"file:{path}", split="train", test_fraction=0.25, levels=(4, 5))
    assert hard and {p.meta["level"] for p in hard} <= {4, 5}


def test_file_source_of_a_dataset_dict_trains_on_its_train_split(tmp_path):
    import datasets

    datasets.DatasetDict({"train": datasets.Dataset.from_list(_math_rows(10)),
                          "test": datasets.Dataset.from_list(_math_rows(3))}
                         ).save_to_disk(str(tmp_path / "dd"))
    problems = load_source(f"file:{tmp_path / 'dd'}", split="train", test_fraction=0.1)
    assert len(problems) == 9  # 10 train rows, one held out


def test_file_source_errors_are_one_line(tmp_path):
    with pytest.raises(ValueError, match="no such file or directory"):
        load_source(f"file:{tmp_path / 'missing.jsonl'}")
    path = tmp_path / "set.jsonl"
    path.write_text(json.dumps({"question": "What is 2 + 2?", "answer": "4"}) + "\n")
    with pytest.raises(ValueError, match="data.levels: applies to file: sources"):
        load_source(f"jsonl:{path}", levels=(3,))
    with pytest.raises(ValueError, match="split"):
        load_source(f"file:{path}", split="validation")
