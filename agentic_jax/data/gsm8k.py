"""GSM8K: the shipped official files, and Python programs from its calculator annotations.

    problems = load_gsm8k("train")                  # 7,473 problems (corpora/gsm8k/train.jsonl)
    problems = load_gsm8k("test", path="/d/gsm8k")   # a directory of train.jsonl / test.jsonl
    calc_program("48/2 = <<48/2=24>>24 ... #### 72")  # -> "step1 = 48 / 2\\n...print(step2)"

The package ships GSM8K's two files as the openai/grade-school-math repository publishes them
(MIT licence, ``corpora/gsm8k/LICENSE``), so ``data.source=gsm8k`` and ``--benchmarks=gsm8k``
work offline on a fresh clone: 4.9 MB, and no tfds or ``datasets`` preparation step that needs a
network. Rows are ``{"question", "answer"}``, the answer a worked solution whose calculator
steps are annotated ``<<48/2=24>>`` and whose last line is ``#### 72``.

A row whose question is empty, whose answer has no ``####`` or whose final answer is not a number
is skipped, counted in ``SourceStats`` and named in one log line (file and line number).

Each training problem carries ``solution_code``: its calculator steps as a short program, one
variable per step, a later step naming an earlier result where it uses that number, and the
step that reaches the final answer printed (`calc_program`). The warm start runs these programs
in the sandbox and keeps a tool-using example only where the printed result grades equal to the
reference answer; ``tools/gsm8k_programs.py`` counts how many of the 7,473 convert.
"""

from __future__ import annotations

import ast
import logging
import os
import re
from fractions import Fraction
from pathlib import Path

from agentic_jax.data.checks import numeric_tests
from agentic_jax.data.problem import Problem
from agentic_jax.data.table_files import SourceStats, read_rows
from agentic_jax.errors import UserError

SHIPPED_DIR = Path(__file__).resolve().parent / "corpora" / "gsm8k"
SPLITS = ("train", "test")
SIZES = {"train": 7473, "test": 1319}

_CALC = re.compile(r"<<([^<>]*)>>")
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d*)?|\.\d+)")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_ALLOWED = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Add, ast.Sub, ast.Mult,
            ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd, ast.Load, ast.Name)
_MAX_STEPS = 16


def split_path(split: str, path: str | os.PathLike | None = None) -> Path:
    """The file of one split: ``path`` (a directory holding ``<split>.jsonl``, or the file
    itself), default the shipped copy."""
    if split not in SPLITS:
        raise UserError(f"gsm8k: split: expected one of {SPLITS}, got {split!r}")
    root = Path(path) if path else SHIPPED_DIR
    file = root / f"{split}.jsonl" if root.is_dir() else root
    if not file.is_file():
        raise UserError(f"gsm8k: no {split} file at {file}")
    return file


def normalise_gsm8k_answer(solution: str) -> str:
    """The final answer of a GSM8K solution: after the last "####", no commas, $ or final dot."""
    if "####" not in solution:
        raise UserError("field 'answer': no '####' final answer")
    answer = solution.rsplit("####", 1)[1].strip()
    answer = re.sub(r"(?<=\d),(?=\d{3})", "", answer).replace("$", "").rstrip(".").strip()
    if not answer:
        raise UserError("field 'answer': empty after '####'")
    return answer


def final_number(solution: str) -> str:
    """The answer after ``####`` as a plain number string; UserError when there is none or it
    is not a number."""
    answer = normalise_gsm8k_answer(solution)
    try:
        Fraction(answer)
    except (ValueError, ZeroDivisionError):
        raise UserError(f"field 'answer': final answer {answer[:40]!r} is not a number") from None
    return answer


def _step_value(text: str) -> Fraction | None:
    try:
        return Fraction(_THOUSANDS.sub("", text.strip()).rstrip("."))
    except (ValueError, ZeroDivisionError):
        return None


def _literal(number: str) -> str:
    """A number as Python reads it: no leading zeros on integers ("05" -> "5")."""
    if "." in number:
        whole, frac = number.split(".", 1)
        return f"{int(whole) if whole else 0}.{frac or 0}"
    return str(int(number))


def _checked(expression: str) -> bool:
    """Whether ``expression`` is plain arithmetic on numbers and earlier steps' names."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        return False
    return all(isinstance(node, _ALLOWED) for node in ast.walk(tree))


def calc_program(solution: str) -> str | None:
    """The calculator steps of a GSM8K solution as a Python program that prints the answer.

    Step ``i`` (``<<expr=value>>``) becomes ``step<i> = expr``, with every number in ``expr``
    that equals an earlier step's value replaced by that step's name (the latest one). The
    program prints the last step whose value equals the final answer. None when the solution
    has no steps, a step is not plain arithmetic, or no step reaches the final answer.
    """
    try:
        answer = Fraction(final_number(solution))
    except UserError:
        return None
    steps = _CALC.findall(solution.rsplit("####", 1)[0])
    if not steps or len(steps) > _MAX_STEPS:
        return None
    lines: list[str] = []
    names: dict[Fraction, str] = {}  # value -> the latest step that computed it
    printed = None
    for i, step in enumerate(steps, start=1):
        expression, sep, result = step.rpartition("=")
        value = _step_value(result)
        if not sep or value is None:
            return None
        expression = _THOUSANDS.sub("", expression)
        earlier = dict(names)

        def name(match: re.Match, earlier=earlier) -> str:
            number = Fraction(_literal(match.group(1)))
            return earlier.get(number, _literal(match.group(1)))

        expression = _NUMBER.sub(name, expression).strip()
        if not expression or not _checked(expression):
            return None
        var = f"step{i}"
        lines.append(f"{var} = {expression}")
        names[value] = var
        if value == answer:
            printed = var
    if printed is None:
        return None
    # Steps after the answer's computation are left out: the program ends where it is printed.
    last = int(printed[len("step"):])
    return "\n".join(lines[:last] + [f"print({printed})"])


def reasoning_text(solution: str) -> str:
    """The worked solution without its calculator annotations and final ``####`` line."""
    return _CALC.sub("", solution.rsplit("####", 1)[0]).strip()


def gsm8k_problem(problem_id: str, row: object) -> Problem:
    """One row as a `Problem` (stage "external", kind "gsm8k"); UserError naming what is
    wrong with a bad row."""
    if not isinstance(row, dict):
        raise UserError(f"expected a JSON object, got {type(row).__name__}")
    question, solution = row.get("question"), row.get("answer")
    if not isinstance(question, str) or not question.strip():
        raise UserError("field 'question': missing or empty")
    if not isinstance(solution, str) or not solution.strip():
        raise UserError("field 'answer': missing or empty")
    answer = final_number(solution)
    return Problem(
        id=problem_id, stage="external", difficulty=0.0, question=question.strip(),
        answer=answer, solution_code=calc_program(solution) or "",
        tests=numeric_tests(answer), direct_solution=reasoning_text(solution), kind="gsm8k",
        meta={"source": "gsm8k", "layout": "gsm8k", "row_id": problem_id},
    )


def load_gsm8k(split: str, *, path: str | os.PathLike | None = None,
               stats: SourceStats | None = None, limit: int | None = None) -> list[Problem]:
    """The problems of one GSM8K split, in file order, ids ``gsm8k-<split>:<line>``."""
    stats = stats if stats is not None else SourceStats()
    file = split_path(split, path)
    problems: list[Problem] = []
    for row in read_rows(str(file), on_error=stats.skip):
        if limit is not None and len(problems) >= limit:
            break
        line = row.where.rsplit(":", 1)[-1]
        try:
            problems.append(gsm8k_problem(f"gsm8k-{split}:{line}", row.data))
        except UserError as err:
            stats.skip(row.where, str(err))
    stats.loaded = len(problems)
    if stats.skipped:
        logging.warning("gsm8k %s (%s): skipped %d malformed rows, loaded %d", split, file,
                        stats.skipped, stats.loaded)
    return problems
