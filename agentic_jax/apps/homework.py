"""Homework files: CSV or JSONL rows of (question, reference answer or tests, student answer,
optional student code) in, graded rows out as CSV.

Reading never fails because of one row: a row that cannot be used becomes a `HomeworkRow` with
``error`` set, and grading reports it as that row's result. Only a file that cannot be read at
all (missing, not UTF-8, too large, an unknown format) is an error (ValueError).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import re
from collections.abc import Iterable, Sequence

from agentic_jax.errors import UserError
from agentic_jax.utils.files import loads_bounded

MAX_ROWS = 10_000
MAX_FIELD_CHARS = 20_000
MAX_FILE_BYTES = 32 << 20
_FORMULA_STARTS = frozenset("=+-@\t\r")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\Z")
# Accepted column names of each field (case-insensitive), first the canonical one.
FIELDS = {
    "question": ("question", "problem"),
    "reference_answer": ("reference_answer", "reference", "answer", "solution"),
    "tests": ("tests", "reference_tests"),
    "student_answer": ("student_answer", "student", "response"),
    "student_code": ("student_code", "code"),
}


@dataclasses.dataclass(frozen=True)
class HomeworkRow:
    """One row as read: ``index`` counts data rows from 1 (the file's order); ``error`` says
    why the row cannot be graded (the other fields are then best effort)."""

    index: int
    question: str = ""
    reference_answer: str = ""
    tests: str = ""
    student_answer: str = ""
    student_code: str = ""
    error: str = ""


def read_homework(path: str) -> list[HomeworkRow]:
    """The rows of a ``.csv`` / ``.jsonl`` file (by its extension)."""
    if not os.path.isfile(path):
        raise UserError(f"{path}: no such file")
    if os.path.getsize(path) > MAX_FILE_BYTES:
        raise UserError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MB")
    kind = os.path.splitext(path)[1].lower().lstrip(".")
    with open(path, "rb") as f:
        data = f.read()
    try:
        return parse_homework(data.decode("utf-8-sig"), kind)
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    except ValueError as err:
        raise UserError(f"{path}: {err}") from None


def parse_homework(text: str, kind: str) -> list[HomeworkRow]:
    """The rows of CSV (``kind`` "csv", a header row first) or JSONL ("jsonl"/"json") text."""
    if kind == "csv":
        records = _csv_records(text)
    elif kind in ("jsonl", "json"):
        records = _jsonl_records(text)
    else:
        raise UserError(f"expected a .csv or .jsonl file, got {kind!r}")
    rows = []
    for index, record in enumerate(records, 1):
        if index > MAX_ROWS:
            raise UserError(f"more than {MAX_ROWS} rows")
        rows.append(_row(index, record))
    return rows


def _csv_records(text: str) -> Iterable[dict | str]:
    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip().lower() for h in next(reader)]
    except StopIteration:
        raise UserError("empty file: expected a header row") from None
    except csv.Error as err:
        raise UserError(f"header row: {err}") from None
    columns = _columns(header)
    while True:
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            yield f"not a CSV row ({err})"
            continue
        if not any(v.strip() for v in values):
            continue
        if len(values) > len(header):
            yield f"{len(values)} values for {len(header)} columns"
            continue
        yield {field: values[i] if i < len(values) else "" for field, i in columns.items()}


def _columns(header: Sequence[str]) -> dict[str, int]:
    columns = {}
    for field, names in FIELDS.items():
        for name in names:
            if name in header:
                columns[field] = header.index(name)
                break
    if "student_answer" not in columns and "student_code" not in columns:
        raise UserError(f"header {list(header)}: expected a student_answer or student_code "
                        "column")
    return columns


def _jsonl_records(text: str) -> Iterable[dict | str]:
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = loads_bounded(line)
        except ValueError as err:
            yield f"not a JSON line ({err.__class__.__name__}: {err})"
            continue
        if not isinstance(record, dict):
            yield f"expected a JSON object, got {type(record).__name__}"
            continue
        lowered = {str(k).strip().lower(): v for k, v in record.items()}
        yield {field: lowered[name] for field, names in FIELDS.items()
               for name in reversed(names) if name in lowered}


def _row(index: int, record: dict | str) -> HomeworkRow:
    if isinstance(record, str):
        return HomeworkRow(index, error=record)
    values, problems = {}, []
    for field, value in record.items():
        if value is None:
            value = ""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            problems.append(f"{field}: expected text, got {type(value).__name__}")
            continue
        if len(value) > MAX_FIELD_CHARS:
            problems.append(f"{field}: longer than {MAX_FIELD_CHARS} characters")
            continue
        values[field] = value
    if not problems and not (values.get("reference_answer", "").strip()
                             or values.get("tests", "").strip()):
        problems.append("reference_answer or tests: expected at least one")
    if not problems and not (values.get("student_answer", "").strip()
                             or values.get("student_code", "").strip()):
        problems.append("student_answer or student_code: expected at least one")
    return HomeworkRow(index, **values, error="; ".join(problems))


def spreadsheet_safe(value: object) -> object:
    """A cell a spreadsheet will not run as a formula: text starting with = + - @, a tab or a
    carriage return gets a leading ' (OWASP's rule), so a student's ``=HYPERLINK(...)``
    answer stays text. Plain numbers such as -3 or +2.5 are kept as written: answers are
    often negative numbers, and a spreadsheet reads those as numbers, never as formulas."""
    if isinstance(value, str) and value[:1] in _FORMULA_STARTS and not _NUMBER.match(value):
        return "'" + value
    return value


def write_results_csv(rows: Sequence[dict], out: io.TextIOBase | str) -> None:
    """Writes graded rows (dicts with the same keys) as CSV to a path or a text stream, each
    cell `spreadsheet_safe`."""
    if isinstance(out, str):  # written beside, then renamed: never a half-written file
        partial = f"{out}.partial"
        with open(partial, "w", newline="", encoding="utf-8") as f:
            write_results_csv(rows, f)
        os.replace(partial, out)
        return
    if not rows:
        return
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows({k: spreadsheet_safe(v) for k, v in row.items()} for row in rows)
