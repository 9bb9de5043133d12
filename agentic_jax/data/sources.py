"""Problem sources named by `data.source`: the curriculum, dataset files, tensorflow-datasets.

    curriculum                      the generated curriculum (split "train" or "test")
    file:PATH                       a jsonl / json / parquet file or a `datasets` directory in
                                    a dataset's own layout (MATH, DeepScaleR, ORZ-57k,
                                    DAPO-Math-17k, GSM8K, ...: `agentic_jax.data.benchmarks`),
                                    split into "train" / "test" like the curriculum; a
                                    DatasetDict directory gives its "train" split
    jsonl:PATH                      one JSON object per line: question, answer, optional tests
    gsm8k[:DIR]                     GSM8K's official train / test splits: the package's copy
                                    (`agentic_jax.data.gsm8k`), or DIR/train.jsonl, DIR/test.jsonl
    math_dataset/<module>           tfds DeepMind mathematics, e.g. math_dataset/algebra__linear_1d

Dataset rows become `Problem`s with stage "external". A malformed row is skipped, counted in
`SourceStats` and logged; it never stops an epoch. tensorflow-datasets is imported only when a
tfds source is loaded, through `tfds.data_source`, which needs no TensorFlow (prepare the data
once with `file_format="array_record"`; nothing is downloaded here).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from agentic_jax.data.checks import numeric_tests
from agentic_jax.data.curriculum import generate_curriculum
from agentic_jax.data.gsm8k import load_gsm8k
from agentic_jax.data.problem import Problem
from agentic_jax.data.split import split_problems
from agentic_jax.data.table_files import SourceStats, field_text, read_jsonl
from agentic_jax.errors import UserError

_TFDS_BUILDER_MODULES = (
    "tensorflow_datasets.datasets.math_dataset.math_dataset_dataset_builder",
)


def _external(problem_id: str, kind: str, question: str, answer: str, tests: str | None = None,
              direct: str = "") -> Problem:
    return Problem(
        id=problem_id, stage="external", difficulty=0.0, question=question, answer=answer,
        solution_code="", tests=numeric_tests(answer) if tests is None else tests,
        direct_solution=direct, kind=kind, meta={"source": kind},
    )


def _jsonl_rows(path: str, stats: SourceStats) -> Iterator[Problem]:
    name = os.path.basename(path)
    for row in read_jsonl(path, on_error=stats.skip):
        try:
            if not isinstance(row.data, dict):
                raise UserError(f"expected a JSON object, got {type(row.data).__name__}")
            tests = row.data.get("tests")
            if tests is not None and not isinstance(tests, str):
                raise UserError("field 'tests': expected a string")
            question = field_text(row.data.get("question"), "question")
            answer = field_text(row.data.get("answer"), "answer")
        except ValueError as err:
            stats.skip(row.where, str(err))
            continue
        line_no = row.where.rsplit(":", 1)[1]
        yield _external(f"jsonl:{name}:{line_no}", "jsonl", question, answer, tests)


def _math_dataset_problem(name: str, index: int, row: Mapping[str, Any]) -> Problem:
    return _external(f"{name}:{index}", name, field_text(row.get("question"), "question"),
                     field_text(row.get("answer"), "answer"))


def _tfds_rows(spec: str, split: str, data_dir: str | None, stats: SourceStats
               ) -> Iterator[Problem]:
    import tensorflow_datasets as tfds  # heavy; only for tfds sources

    for module in _TFDS_BUILDER_MODULES:  # registers the builders without TensorFlow
        importlib.import_module(module)
    try:
        rows = tfds.data_source(spec, split=split, data_dir=data_dir, download=False)
    except Exception as err:  # tfds raises many types; all mean "not available here"
        raise UserError(f"data.source={spec!r}: cannot open split {split!r} (data_dir="
                        f"{data_dir}): {type(err).__name__}: {str(err).splitlines()[0]}"
                        ) from err
    for index in range(len(rows)):
        try:
            yield _math_dataset_problem(spec, index, rows[index])
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
            stats.skip(f"{spec}[{split}][{index}]", str(err))


def _curriculum(split: str, seed: int, test_fraction: float) -> list[Problem]:
    if split not in ("train", "test"):
        raise UserError(f"split: the curriculum has 'train' and 'test', got {split!r}")
    train, test = split_problems(generate_curriculum(seed), test_fraction, seed)
    return train if split == "train" else test


def _file(path: str, split: str, seed: int, test_fraction: float,
          levels: Iterable[int] | None, stats: SourceStats) -> list[Problem]:
    # benchmarks grades with agentic_jax.reward, which loads sympy: imported when it is used.
    from agentic_jax.data.benchmarks import load_benchmark

    if split not in ("train", "test"):
        raise UserError(f"split: a file: source has 'train' and 'test', got {split!r}")
    if not os.path.exists(path):
        raise UserError(f"data.source='file:{path}': no such file or directory")
    dataset_dict = os.path.exists(os.path.join(path, "dataset_dict.json"))
    problems = load_benchmark(path, split="train" if dataset_dict else None, levels=levels,
                              stats=stats)
    train, test = split_problems(problems, test_fraction, seed)
    return train if split == "train" else test


def load_source(spec: str, *, split: str = "train", seed: int = 0, test_fraction: float = 0.1,
                data_dir: str | None = None, limit: int | None = None,
                stats: SourceStats | None = None,
                levels: Iterable[int] | None = None) -> list[Problem]:
    """Loads the problems a `data.source` spec names (see the module docstring).

    Args:
      spec: "curriculum", "file:PATH", "jsonl:PATH", "gsm8k[:DIR]" or
        "math_dataset/<module>".
      split: "train"/"test" for the curriculum, file: and gsm8k sources (GSM8K's own
        splits), the tfds split name for tfds sources; a jsonl file is its own split.
      seed, test_fraction: curriculum generation and the train/test split of the curriculum
        and of file: sources.
      data_dir: tfds data directory (prepared offline).
      limit: at most this many problems.
      stats: filled with the loaded and skipped counts.
      levels: file: sources only: keep the rows of these MATH levels (e.g. (3, 4, 5)).
    """
    stats = stats if stats is not None else SourceStats()
    if levels is not None and not spec.startswith("file:"):
        raise UserError(f"data.levels: applies to file: sources, not {spec!r}")
    rows: Iterable[Problem]
    if spec == "curriculum":
        rows = _curriculum(split, seed, test_fraction)
    elif spec.startswith("jsonl:"):
        path = spec[len("jsonl:"):]
        if not os.path.isfile(path):
            raise UserError(f"data.source={spec!r}: no such file {path!r}")
        rows = _jsonl_rows(path, stats)
    elif spec.startswith("file:"):
        rows = _file(spec[len("file:"):], split, seed, test_fraction, levels, stats)
    elif spec == "gsm8k" or spec.startswith("gsm8k:"):
        rows = load_gsm8k(split, path=spec[len("gsm8k:"):] or None, stats=stats)
    elif spec.startswith("math_dataset/"):
        rows = _tfds_rows(spec, split, data_dir, stats)
    else:
        raise UserError(f"data.source={spec!r}: expected 'curriculum', 'file:PATH', "
                        "'jsonl:PATH', 'gsm8k[:DIR]' or 'math_dataset/<module>'")
    problems = []
    for problem in rows:
        if limit is not None and len(problems) >= limit:
            break
        problems.append(problem)
    stats.loaded = len(problems)
    if stats.skipped:
        logging.warning("data.source=%s: skipped %d malformed rows, loaded %d", spec,
                        stats.skipped, stats.loaded)
    return problems
