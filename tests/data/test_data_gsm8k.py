"""GSM8K: the reader (good and bad rows), the shipped files, calculator steps -> programs, the
benchmark name, and the recipe's disjoint warm-start / RL / test split."""

import hashlib
import json
import logging

import pytest

from agentic_jax.data.benchmarks import load_benchmark, parse_benchmark_specs
from agentic_jax.data.gsm8k import (SHIPPED_DIR, SIZES, calc_program, gsm8k_problem,
                                    load_gsm8k, reasoning_text)
from agentic_jax.data.sources import SourceStats, load_source
from agentic_jax.errors import UserError
from agentic_jax.sandbox import Sandbox, SandboxConfig
from agentic_jax.training.warmstart_data import build_examples, prints_answer

NATALIA = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
           "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72")
# The answer is reached by the second step; the third is a check the program leaves out.
EARLY = ("He pays 3*1,200 = <<3*1,200=3,600>>3,600 dollars.\nThat is 3600/2 = <<3600/2=1800>>1800 "
         "a half.\nSo 1800-1800 = <<1800-1800=0>>0 left.\n#### 1,800")

ROWS = [
    {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as "
                 "many clips in May. How many clips did Natalia sell altogether?",
     "answer": NATALIA},
    {"question": "  ", "answer": "1+1=<<1+1=2>>2\n#### 2"},                # empty question
    {"question": "How many?", "answer": "It is 5."},                        # no ####
    {"question": "Which colour?", "answer": "Red is <<1=1>>.\n#### red"},  # not a number
    {"question": "How much does he pay for three?", "answer": EARLY},
    {"question": "Written out only?", "answer": "Half of 10 is 5.\n#### 5"},
]


def _write(path, rows, extra_lines=()):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "".join(extra_lines))
    return path


def test_calc_steps_become_a_program_naming_earlier_results():
    assert calc_program(NATALIA) == "step1 = 48/2\nstep2 = 48+step1\nprint(step2)"
    # Thousands separators go; the step reaching the answer is printed, later steps left out.
    assert calc_program(EARLY) == "step1 = 3*1200\nstep2 = step1/2\nprint(step2)"
    leading = "a = <<05*2=10>>10, b = <<.5*10=5>>5\n#### 5"
    assert calc_program(leading) == "step1 = 5*2\nstep2 = 0.5*step1\nprint(step2)"


@pytest.mark.parametrize("solution", [
    "Half of 10 is 5.\n#### 5",                            # no calculator step
    "2*3 = <<2*3=6>>6\n#### 7",                            # no step reaches the answer
    "<<__import__('os')=6>>6\n#### 6",                     # not arithmetic
    "<<2*3>>6\n#### 6",                                    # no "=value"
    "<<2*3=6>>6 and no final answer",                      # no ####
    "<<2**3=8>>8\n#### eight",                             # answer not a number
])
def test_solutions_that_do_not_convert_give_none(solution):
    assert calc_program(solution) is None


def test_reader_skips_bad_rows_with_one_line_naming_file_and_row(tmp_path, caplog):
    path = _write(tmp_path / "train.jsonl", ROWS, ['{"question": "cut\n'])
    stats = SourceStats()
    with caplog.at_level(logging.WARNING):
        problems = load_gsm8k("train", path=tmp_path, stats=stats)
    assert [p.id for p in problems] == ["gsm8k-train:1", "gsm8k-train:5", "gsm8k-train:6"]
    assert (stats.loaded, stats.skipped) == (3, 4)
    for line, why in ((2, "question"), (3, "####"), (4, "not a number"), (7, "")):
        assert any(r.startswith(f"{path}:{line}:") and why in r for r in stats.reasons), line
    assert sum(f"{path}:" in r.getMessage() for r in caplog.records) >= 4
    natalia, early, written = problems
    assert (natalia.answer, early.answer, written.answer) == ("72", "1800", "5")
    assert natalia.direct_solution == ("Natalia sold 48/2 = 24 clips in May.\nNatalia sold "
                                       "48+24 = 72 clips altogether in April and May.")
    assert natalia.solution_code.endswith("print(step2)") and written.solution_code == ""
    assert natalia.stage == "external" and natalia.kind == "gsm8k" and natalia.tests
    # The same through data.source, with both splits.
    _write(tmp_path / "test.jsonl", ROWS[:1])
    assert [p.answer for p in load_source(f"gsm8k:{tmp_path}", split="test")] == ["72"]
    with pytest.raises(UserError, match="split"):
        load_source(f"gsm8k:{tmp_path}", split="validation")
    with pytest.raises(UserError, match="no train file"):
        load_gsm8k("train", path=tmp_path / "missing")


def test_a_bad_row_object_is_a_user_error():
    with pytest.raises(UserError, match="JSON object"):
        gsm8k_problem("x", ["not", "a", "row"])
    with pytest.raises(UserError, match="answer"):
        gsm8k_problem("x", {"question": "q", "answer": 5})


def test_the_shipped_files_are_the_official_splits():
    digests = {"train": "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",
               "test": "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"}
    for split, digest in digests.items():
        data = (SHIPPED_DIR / f"{split}.jsonl").read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest
        assert data.count(b"\n") == SIZES[split]
    assert "MIT License" in (SHIPPED_DIR / "LICENSE").read_text()
    stats = SourceStats()
    test = load_source("gsm8k", split="test", stats=stats)
    assert (len(test), stats.skipped) == (SIZES["test"], 0)
    assert test[0].answer == "18" and test[0].id == "gsm8k-test:1"


def test_a_benchmark_named_gsm8k_alone_is_the_shipped_test_set():
    specs = parse_benchmark_specs("gsm8k,mine=/d/mine.jsonl")
    assert specs == {"gsm8k": str(SHIPPED_DIR / "test.jsonl"), "mine": "/d/mine.jsonl"}
    problems = load_benchmark(specs["gsm8k"], name="gsm8k", limit=3)
    assert [p.answer for p in problems] == ["18", "3", "70000"]
    with pytest.raises(UserError, match="name=PATH or one of"):
        parse_benchmark_specs("math500")


def test_programs_run_in_the_sandbox_and_only_those_printing_the_answer_are_kept():
    problems = [gsm8k_problem(f"p{i}", row) for i, row in enumerate(ROWS) if i in (0, 4, 5)]
    # A program printing the wrong number stands in for a bad conversion.
    wrong = gsm8k_problem("wrong", {"question": "q?", "answer": "<<2*3=6>>6\n#### 6"})
    wrong = type(wrong)(**{**wrong.__dict__, "solution_code": "print(7)"})
    problems.append(wrong)
    with Sandbox(SandboxConfig(num_workers=1)) as sandbox:
        results = sandbox.run_batch([p.solution_code for p in problems if p.solution_code])
    assert [r.stdout for r in results] == ["72.0\n", "1800.0\n", "7\n"]
    assert [prints_answer(p, r.stdout) for p, r in
            zip([p for p in problems if p.solution_code], results)] == [True, True, False]

    printed = {p.solution_code: r.stdout if r.ok else None
               for p, r in zip([p for p in problems if p.solution_code], results)}

    def run_code(codes):
        return [printed[c] for c in codes]

    class Tok:
        def encode(self, text, add_special_tokens=False):
            return list(text.encode())

    stats = {}
    examples = build_examples(problems, make_prompt=lambda p: [0], tokenizer=Tok(),
                              run_code=run_code, tool_fraction=1.0, max_length=10_000, seed=0,
                              stats=stats)
    # Every problem is chosen; the one without a program and the wrong one fall back to prose.
    assert stats == {"tool_chosen": 4, "tool_ran": 3, "tool_kept": 2, "examples": 4}
    assert [e.uses_tool for e in examples] == [True, True, False, False]


def test_reasoning_text_drops_annotations_and_the_final_line():
    assert reasoning_text(EARLY).startswith("He pays 3*1,200 = 3,600 dollars.")
    assert "####" not in reasoning_text(EARLY) and "<<" not in reasoning_text(EARLY)
