"""Standard math benchmarks and training sets from local files, in their own column layouts.

    problems = load_benchmark("math500.jsonl", name="math500")
    sets = load_benchmarks(parse_benchmark_specs("math500=/d/math500,aime24=/d/aime24.parquet"))

Files are read by ``table_files.read_rows`` (jsonl, json, parquet, a ``datasets`` directory)
and fields cleaned by ``table_files.field_text``. Layouts are recognised by their column names,
row by row:

    math            problem, solution[, answer], subject | type, level, unique_id
                    (MATH, MATH500, Minerva's problem/solution files, DeepScaleR); without an
                    answer column the answer is the solution's last \\boxed{} or final-answer line
    gsm8k           question, answer ending in "#### n"
    qa              problem | question, answer[, id] (AIME, AMC, Minerva, AIME 2025)
    olympiadbench   question, final_answer (a list), subfield, id
    dapo            prompt (chat messages around the problem), reward_model.ground_truth
                    (DAPO-Math-17k)
    orz             [{"from": "human", "value": q}, {"from": "assistant",
                    "ground_truth": {"value": a}}] (ORZ-57k)

Every problem is a ``Problem`` with stage "external", kind = the benchmark name, the answer
string as the dataset writes it, and meta {"source", "layout", "subject", "level", "row_id"}.
A row that cannot be read is skipped, counted in ``SourceStats`` and named in a log line.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentic_jax.data.checks import numeric_tests
from agentic_jax.data.gsm8k import normalise_gsm8k_answer, split_path
from agentic_jax.data.problem import Problem
from agentic_jax.data.table_files import SourceStats, field_text, read_rows
from agentic_jax.errors import UserError
from agentic_jax.reward.extract import extract_answer

LAYOUTS = ("math", "gsm8k", "qa", "olympiadbench", "dapo", "orz")
MATH_MAX_LEVEL = 5
_QUESTION_KEYS = ("problem", "question", "Problem", "Question")
_ANSWER_KEYS = ("answer", "Answer", "expected_answer", "ground_truth")
_ID_KEYS = ("unique_id", "id", "ID", "idx", "problem_id")
_SUBJECT_KEYS = ("subject", "type", "subfield", "category")
_DAPO_PREFIX = "Solve the following math problem"
_DAPO_SUFFIX = "\n\nRemember to put your answer on its own line after"
_LEVEL = re.compile(r"(?:level\s*)?(\d+)", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Fields:
    """What a row holds, whatever its layout."""

    layout: str
    question: str
    answer: str
    solution: str = ""
    subject: str = ""
    level: int | None = None
    row_id: str = ""


def _first(row: Mapping[str, Any], keys: Sequence[str]) -> tuple[str, Any] | None:
    return next(((k, row[k]) for k in keys if row.get(k) not in (None, "")), None)


def _level(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _LEVEL.fullmatch(str(value).strip()) if value is not None else None
    return int(match.group(1)) if match else None


def _orz(row: list) -> Fields:
    if len(row) < 2 or not all(isinstance(m, Mapping) for m in row[:2]):
        raise UserError("expected [human message, assistant message with ground_truth]")
    truth = row[1].get("ground_truth")
    answer = truth.get("value") if isinstance(truth, Mapping) else truth
    return Fields("orz", field_text(row[0].get("value"), "value"),
                  field_text(answer, "ground_truth"))


def _dapo(row: Mapping[str, Any]) -> Fields:
    messages = row.get("prompt")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], Mapping):
        raise UserError("field 'prompt': expected a list of chat messages")
    question = field_text(messages[-1].get("content"), "prompt.content")
    if question.startswith(_DAPO_PREFIX) and "\n\n" in question:
        question = question.split("\n\n", 1)[1].split(_DAPO_SUFFIX, 1)[0].strip()
    truth = row["reward_model"]
    answer = truth.get("ground_truth") if isinstance(truth, Mapping) else None
    extra = row.get("extra_info")
    row_id = extra.get("index", "") if isinstance(extra, Mapping) else ""
    return Fields("dapo", question, field_text(answer, "reward_model.ground_truth"),
                  row_id=str(row_id))


def _layout(row: Mapping[str, Any]) -> str:
    if "reward_model" in row:
        return "dapo"
    if "final_answer" in row:
        return "olympiadbench"
    answer = row.get("answer")
    if "question" in row and isinstance(answer, str) and "####" in answer:
        return "gsm8k"
    if "solution" in row and (_first(row, _SUBJECT_KEYS) or "level" in row or not answer):
        return "math"
    return "qa"


def read_fields(row: Any) -> Fields:
    """The fields of one row in any supported layout; ValueError naming what is wrong."""
    if isinstance(row, list):
        return _orz(row)
    if not isinstance(row, Mapping):
        raise UserError(f"expected a row object, got {type(row).__name__}")
    layout = _layout(row)
    if layout == "dapo":
        return _dapo(row)
    found = _first(row, _QUESTION_KEYS)
    if found is None:
        raise UserError(f"no question column (one of {', '.join(_QUESTION_KEYS)})")
    question = field_text(found[1], found[0])
    solution = field_text(row["solution"], "solution") if row.get("solution") else ""
    if layout == "gsm8k":
        answer = normalise_gsm8k_answer(row["answer"])
        solution = row["answer"].rsplit("####", 1)[0].strip()
    elif layout == "olympiadbench":
        answer = field_text(row["final_answer"], "final_answer")
    else:
        stated = _first(row, _ANSWER_KEYS)
        answer = field_text(stated[1], stated[0]) if stated else extract_answer(solution)
        if answer is None:
            raise UserError("no answer column and no final answer in the solution")
    if isinstance(row.get("solution"), list):
        solution = "\n\n".join(str(s) for s in row["solution"])
    subject = _first(row, _SUBJECT_KEYS)
    row_id = _first(row, _ID_KEYS)
    return Fields(layout, question, answer, solution, str(subject[1]) if subject else "",
                  _level(row.get("level")), str(row_id[1]) if row_id else "")


def _problem(name: str, problem_id: str, fields: Fields) -> Problem:
    level = fields.level
    difficulty = min(max(level / MATH_MAX_LEVEL, 0.0), 1.0) if level is not None else 0.0
    return Problem(
        id=problem_id, stage="external", difficulty=difficulty, question=fields.question,
        answer=fields.answer, solution_code="", tests=numeric_tests(fields.answer),
        direct_solution=fields.solution, kind=name,
        meta={"source": name, "layout": fields.layout, "subject": fields.subject,
              "level": level, "row_id": fields.row_id},
    )


def load_benchmark(path: str, *, name: str | None = None, split: str | None = None,
                   levels: Iterable[int] | None = None, limit: int | None = None,
                   stats: SourceStats | None = None) -> list[Problem]:
    """The problems of one benchmark or training-set file (see the module docstring).

    Args:
      path: a .jsonl / .json / .parquet file or a ``datasets`` directory.
      name: the benchmark's name (problem ids and ``kind``); default: the file name.
      split: the split of a datasets directory.
      levels: keep only rows of these MATH levels (e.g. (3, 4, 5)); rows without a level go.
      limit: at most this many problems.
      stats: filled with loaded and skipped counts and the reasons for skips.
    """
    stats = stats if stats is not None else SourceStats()
    name = name or re.sub(r"\.(jsonl|json|parquet)$", "", path.rstrip("/").rsplit("/", 1)[-1])
    wanted = None if levels is None else set(levels)
    problems: list[Problem] = []
    seen_ids: set[str] = set()
    for index, row in enumerate(read_rows(path, split=split, on_error=stats.skip)):
        if limit is not None and len(problems) >= limit:
            break
        try:
            fields = read_fields(row.data)
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
            stats.skip(row.where, str(err))
            continue
        if wanted is not None and fields.level not in wanted:
            continue
        problem_id = f"{name}:{fields.row_id or index}"
        if problem_id in seen_ids:
            problem_id = f"{name}:{index}"
        seen_ids.add(problem_id)
        problems.append(_problem(name, problem_id, fields))
    stats.loaded = len(problems)
    if stats.skipped:
        logging.warning("benchmark %s (%s): skipped %d unreadable rows, loaded %d", name, path,
                        stats.skipped, stats.loaded)
    return problems


def shipped_benchmarks() -> dict[str, str]:
    """The benchmarks the package holds, by the name a spec may give alone: GSM8K's test set."""
    return {"gsm8k": str(split_path("test"))}


def parse_benchmark_specs(spec: str) -> dict[str, str]:
    """ "math500=PATH,aime24=PATH" -> {"math500": PATH, "aime24": PATH}; a name alone is one of
    `shipped_benchmarks` ("gsm8k"); ValueError otherwise."""
    specs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        bench, sep, path = item.partition("=")
        if not sep and bench in shipped_benchmarks():
            bench, sep, path = bench, "=", shipped_benchmarks()[bench]
        if not sep or not bench.strip() or not path.strip():
            raise UserError(f"--benchmarks: expected name=PATH or one of "
                            f"{sorted(shipped_benchmarks())}, got {item!r}")
        if bench.strip() in specs:
            raise UserError(f"--benchmarks: {bench.strip()!r} given twice")
        specs[bench.strip()] = path.strip()
    return specs


def load_benchmarks(specs: Mapping[str, str], **kwargs: Any) -> dict[str, list[Problem]]:
    """``load_benchmark`` for every name -> path; a benchmark with no readable row is an
    error naming it."""
    loaded = {}
    for name, path in specs.items():
        problems = load_benchmark(path, name=name, **kwargs)
        if not problems:
            raise UserError(f"benchmark {name!r}: no readable problems in {path}")
        loaded[name] = problems
    return loaded
