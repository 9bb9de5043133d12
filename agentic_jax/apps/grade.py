r"""Homework grading: each row's answer by the grader, the reference tests in the sandbox, the
student's code in the sandbox with its error diagnosed, and a correction hint from the policy.

    python -m agentic_jax.apps.grade --input=homework.csv --out=graded.csv [--workdir=RUN]

Without ``--workdir`` no hints are written (the grader and the sandbox need no model). The
command never stops at a row: a row that cannot be graded gets verdict "error" and its reason
in the output, every other row is graded and written, and each bad row is one line on stderr
("row N: reason", N counting data rows from 1). The exit status says which `outcome` it was:

    0  every row graded
    3  partial: the output holds every row, some of them with verdict "error"
    2  nothing graded: no readable row (each named on stderr), or an unreadable input file,
       output path or run; nothing is written

The server's ``POST /api/grade`` answers 200, 207 and 422 for the same three outcomes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from agentic_jax.apps.homework import HomeworkRow, read_homework, write_results_csv
from agentic_jax.errors import USER_ERRORS, UserError
from agentic_jax.reward import extract_answer, grade_answer

SANDBOX_CHUNK = 4  # snippets of one budgeted upload queued on the sandbox at a time
# Each `outcome` as the command's exit status and as the server's HTTP status.
EXIT_STATUS = {"graded": 0, "partial": 3, "unreadable": 2}
HTTP_STATUS = {"graded": 200, "partial": 207, "unreadable": 422}
HintFn = Callable[[Sequence["GradedRow"], Sequence[HomeworkRow]], list[str]]
_LINE = re.compile(r"\(line (\d+)\)")


@dataclasses.dataclass
class GradedRow:
    """One row's result (a CSV row of the output, in this field order).

    verdict: "correct", "incorrect" or "error" (the row could not be graded: ``error`` says
      why, e.g. a missing column or a broken CSV line).
    answer: the answer graded (the student's final answer, else their code's last line).
    reference_match: the grader's equivalence with the reference answer ("" without one).
    tests: "passed" / "failed" ("" without tests); failing_check: the test line that rejected it.
    code_*: the student's code run in the sandbox: ok, its last printed line, the error class
      and the taxonomy's diagnosis with the line it happened on.
    """

    row: int
    verdict: str = "error"
    answer: str = ""
    reference_match: str = ""
    tests: str = ""
    failing_check: str = ""
    code_ok: str = ""
    code_output: str = ""
    code_error: str = ""
    code_diagnosis: str = ""
    hint: str = ""
    error: str = ""


def grade_rows(rows: Sequence[HomeworkRow], sandbox: Any, hint_fn: HintFn | None = None,
               progress: Callable[[int, int], None] | None = None,
               time_budget_s: float | None = None) -> list[GradedRow]:
    """Grades every row; student code and reference tests run as two sandbox batches.

    ``sandbox``: an `agentic_jax.sandbox.Sandbox` (``run_batch``). ``hint_fn`` (optional) gets
    the incorrect rows and returns one hint each, in one call so that a policy writes them in
    batches. ``time_budget_s``: wall time this call may spend in the sandbox, and as much
    again in the grader (a shared server's budget per upload; None: no bound). Snippets then
    run in chunks of SANDBOX_CHUNK, and rows whose code, answer or tests were not reached in
    time get verdict "error" saying so (hints are budgeted by ``hint_fn`` itself).
    """
    deadline, over_budget = None, ""
    if time_budget_s is not None:
        deadline = time.monotonic() + time_budget_s
        over_budget = f"not graded: this upload's {time_budget_s:g} s budget ran out"
    out = [GradedRow(r.index, error=r.error) for r in rows]
    usable = [i for i, r in enumerate(rows) if not r.error]
    with_code = [i for i in usable if rows[i].student_code.strip()]
    codes = [rows[i].student_code for i in with_code]
    for i, result in zip(with_code, _run_within(sandbox, codes, deadline)):
        if result is None:
            out[i].error = over_budget
        else:
            _code_result(out[i], rows[i].student_code, result)
    usable = [i for i in usable if not out[i].error]
    grader_deadline = None if deadline is None else time.monotonic() + time_budget_s
    for done, i in enumerate(usable, 1):
        if grader_deadline is not None and time.monotonic() >= grader_deadline:
            out[i].error = over_budget
            continue
        out[i].answer = _answer(rows[i], out[i])
        if rows[i].reference_answer.strip():
            out[i].reference_match = str(grade_answer(out[i].answer, rows[i].reference_answer))
        if progress:
            progress(done, len(usable))
    usable = [i for i in usable if not out[i].error]
    with_tests = [i for i in usable if rows[i].tests.strip() and out[i].answer]
    codes = [f"ANSWER = {out[i].answer!r}\n{rows[i].tests}" for i in with_tests]
    for i, result in zip(with_tests, _run_within(sandbox, codes, deadline)):
        if result is None:
            out[i].error = over_budget
            continue
        out[i].tests = "passed" if result.ok else "failed"
        if not result.ok:
            out[i].failing_check = _failing_line(rows[i].tests, result.message, offset=1)
    usable = [i for i in usable if not out[i].error]
    for i in usable:
        _verdict(out[i], rows[i])
    wrong = [i for i in usable if out[i].verdict == "incorrect"]
    if hint_fn is not None and wrong:
        for i, hint in zip(wrong, hint_fn([out[i] for i in wrong], [rows[i] for i in wrong])):
            out[i].hint = hint
    return out


def _run_within(sandbox: Any, codes: list[str], deadline: float | None) -> list[Any]:
    """Each snippet's result, or None for those not started by ``deadline`` (chunks of
    SANDBOX_CHUNK, so one upload queues at most that many ahead of other requests)."""
    if deadline is None:
        return sandbox.run_batch(codes)
    results: list[Any] = []
    for start in range(0, len(codes), SANDBOX_CHUNK):
        if time.monotonic() >= deadline:
            return results + [None] * (len(codes) - len(results))
        results += sandbox.run_batch(codes[start:start + SANDBOX_CHUNK])
    return results


def _code_result(out: GradedRow, code: str, result: Any) -> None:
    out.code_ok = str(result.ok)
    lines = [line for line in result.stdout.strip().splitlines() if line.strip()]
    out.code_output = lines[-1].strip() if lines else ""
    if not result.ok:
        out.code_error = result.error or ""
        where = _failing_line(code, result.message, offset=0)
        out.code_diagnosis = result.message + (f" | at: {where}" if where else "")


def _answer(row: HomeworkRow, out: GradedRow) -> str:
    """The student's final answer: from their text (boxed or "answer is"), else the whole
    short text, else their code's last printed line."""
    text = row.student_answer.strip()
    if text:
        return extract_answer(text) or text
    return out.code_output


def _verdict(out: GradedRow, row: HomeworkRow) -> None:
    """Correct when every available check passed; no answer at all (the code failed or printed
    nothing) is incorrect, with the code's diagnosis."""
    if not out.answer:
        out.verdict = "incorrect"
        out.code_diagnosis = out.code_diagnosis or "the code printed nothing"
        return
    checks = [c for c in (out.reference_match, out.tests) if c]
    out.verdict = "correct" if all(c in ("True", "passed") for c in checks) else "incorrect"


def _failing_line(source: str, message: str, offset: int) -> str:
    """The source line an error message names ("... (line N)"), N counted in a program that
    ran ``offset`` lines before ``source``."""
    found = _LINE.findall(message or "")
    if not found:
        return ""
    number = int(found[-1]) - offset
    lines = source.splitlines()
    return lines[number - 1].strip() if 1 <= number <= len(lines) else ""


def summary(results: Sequence[GradedRow]) -> dict[str, int]:
    counts = {"rows": len(results), "correct": 0, "incorrect": 0, "error": 0}
    for r in results:
        counts[r.verdict] += 1
    return counts


def outcome(rows: Sequence[HomeworkRow], results: Sequence[GradedRow] = ()) -> str:
    """"unreadable" (no row could be read: nothing to grade), "partial" (some ``results``
    have verdict "error") or "graded" (every row was)."""
    if all(r.error for r in rows):  # an empty upload as well
        return "unreadable"
    return "partial" if any(r.verdict == "error" for r in results) else "graded"


def row_problems(results: Sequence[GradedRow]) -> list[str]:
    """"row N: reason" for each row that could not be graded."""
    return [f"row {r.row}: {r.error}" for r in results if r.verdict == "error"]


def unread(rows: Sequence[HomeworkRow]) -> list[GradedRow]:
    """The results of rows that could not be read (without grading the others)."""
    return [GradedRow(r.index, error=r.error) for r in rows if r.error]


def first_problem(rows: Sequence[HomeworkRow]) -> str:
    """Why nothing of an "unreadable" upload can be graded, in one line."""
    if not rows:
        return "no rows"
    return f"no readable row ({len(rows)} rows); first: {row_problems(unread(rows[:1]))[0]}"


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m agentic_jax.apps.grade", description=__doc__.split("\n\n")[0],
        epilog="exit status: 0 every row graded; 3 some rows not (verdict \"error\" in the "
        "output, each named on stderr); 2 nothing graded (no readable row, or an unreadable "
        "input, output or run)")
    parser.add_argument("--input", required=True, help="homework rows: FILE.csv or FILE.jsonl")
    parser.add_argument("--out", required=True, help="graded rows: FILE.csv")
    parser.add_argument("--workdir", default=None, help="a run whose policy writes the hints")
    parser.add_argument("--hint_tokens", type=int, default=96, help="tokens per hint")
    args = parser.parse_args(argv)
    try:
        rows = read_homework(args.input)
    except UserError as err:
        print(f"error: --input: {err}", file=sys.stderr)
        return EXIT_STATUS["unreadable"]
    if outcome(rows) == "unreadable":
        _report(row_problems(unread(rows)))
        print(f"error: --input: {args.input}: {first_problem(rows)}; nothing written",
              file=sys.stderr)
        return EXIT_STATUS["unreadable"]
    from agentic_jax.apps.hints import hint_session
    from agentic_jax.apps.sandboxes import grading_sandbox

    with contextlib.ExitStack() as stack:
        sandbox = stack.enter_context(grading_sandbox())
        try:
            hints = stack.enter_context(hint_session(args.workdir, args.hint_tokens))
        except USER_ERRORS as err:  # no run, or no checkpoint in it
            print(f"error: --workdir: {err}", file=sys.stderr)
            return EXIT_STATUS["unreadable"]
        results = grade_rows(rows, sandbox, hints, progress=_progress)
    try:
        write_results_csv([dataclasses.asdict(r) for r in results], args.out)
    except OSError as err:
        print(f"error: --out: {err}", file=sys.stderr)
        return EXIT_STATUS["unreadable"]
    print(f"\n{summary(results)} -> {args.out}")
    result = outcome(rows, results)
    if result == "partial":
        problems = row_problems(results)
        _report(problems)
        print(f"error: {len(problems)} of {len(results)} rows could not be graded (verdict "
              f"\"error\" in {args.out}); first: {problems[0]}", file=sys.stderr)
    return EXIT_STATUS[result]


def _report(problems: Sequence[str]) -> None:
    for line in problems:
        print(line, file=sys.stderr)


def _progress(done: int, total: int) -> None:
    if done == total or done % 100 == 0:
        print(f"\rgraded {done}/{total}", end="\n" if done == total else "", file=sys.stderr,
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
