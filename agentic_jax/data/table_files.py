"""Rows of a local table file (jsonl, json, parquet, a Hugging Face ``datasets`` directory),
the text of a row's field, and the counts of a load.

    rows = read_rows("aime24.parquet")          # -> Iterator[Row]
    rows = read_rows("math500/", split="test")  # a save_to_disk directory or a snapshot folder
    rows = read_jsonl("train.txt", on_error=stats.skip)  # JSON lines, whatever the file's name
    question = field_text(row.data.get("question"), "question")

Each row comes with ``where`` ("file.jsonl:12", "dir[test][3]") so a row that cannot be read
can be named. A line that is not JSON is reported through ``on_error`` and skipped; a file that
cannot be opened at all is a ValueError naming it. ``SourceStats.skip`` is the ``on_error``
of a load: it counts the row and logs one line naming it. Nothing is downloaded: ``datasets``
reads only what ``save_to_disk`` wrote, and parquet goes through pyarrow.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import logging
import math
import os
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from agentic_jax.errors import UserError
from agentic_jax.utils.files import loads_bounded

DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
_BYTES_REPR = re.compile(r"""b(['"])(.*)\1""", re.DOTALL)
_REASONS_KEPT = 20


class Row(NamedTuple):
    """One record of a table and where it came from."""

    where: str
    data: Any


@dataclasses.dataclass
class SourceStats:
    """Counts of a load: rows turned into problems and malformed rows skipped (with reasons)."""

    loaded: int = 0
    skipped: int = 0
    reasons: list[str] = dataclasses.field(default_factory=list)

    def skip(self, where: str, why: str) -> None:
        """Counts one malformed row and logs why."""
        self.skipped += 1
        if len(self.reasons) < _REASONS_KEPT:
            self.reasons.append(f"{where}: {why}")
        logging.warning("skipping malformed row %s: %s", where, why)


def field_text(value: Any, field: str) -> str:
    """A row's field as clean text; UserError naming the field when it holds none.

    Bytes are decoded and a printed b'...' unwrapped (tfds' math_dataset), a whole float is
    written as an integer (AMC's 142.0), a list of strings is joined with ", " (OlympiadBench's
    final_answer); whitespace and literal "\\n"s at the end are trimmed.
    """
    if value is None:
        raise UserError(f"field {field!r}: missing")
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, bool):
        raise UserError(f"field {field!r}: expected text, got a boolean")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UserError(f"field {field!r}: not a finite number")
        value = int(value) if value.is_integer() else value
    if isinstance(value, int | float):
        value = str(value)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        value = ", ".join(v.strip() for v in value)
    if not isinstance(value, str):
        raise UserError(f"field {field!r}: expected text, got {type(value).__name__}")
    text = value.strip()
    match = _BYTES_REPR.fullmatch(text)
    if match:
        text = match.group(2)
    while text.endswith("\\n"):
        text = text[:-2]
    text = text.strip()
    if not text:
        raise UserError(f"field {field!r}: empty")
    return text


def read_jsonl(path: str, on_error: Callable[[str, str], None]) -> Iterator[Row]:
    """The rows of a JSON-lines file, whatever its name; blank lines are passed over."""
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                data = loads_bounded(line)
            except json.JSONDecodeError as err:
                on_error(where, f"not JSON ({err.msg})")
                continue
            except ValueError as err:  # nested past the bound (CPython's parser would recurse)
                on_error(where, str(err))
                continue
            yield Row(where, data)


def _json(path: str, on_error: Callable[[str, str], None]) -> Iterator[Row]:
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except RecursionError:
            raise UserError(f"{path}: JSON nested too deep to read") from None
        except json.JSONDecodeError as err:
            if err.msg == "Extra data":  # JSON lines under a .json name, as hub exports often are
                yield from read_jsonl(path, on_error)
                return
            raise UserError(f"{path}: not a JSON file ({err.msg} at line {err.lineno})") from err
    if isinstance(data, dict):  # {"data": [...]} or {"train": [...]}: the one list inside
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise UserError(f"{path}: expected a JSON list of rows or an object holding one")
        data = lists[0]
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a JSON list of rows, got {type(data).__name__}")
    for index, row in enumerate(data):
        yield Row(f"{path}[{index}]", row)


def _parquet(path: str) -> Iterator[Row]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises several types for a damaged file
        raise UserError(f"{path}: not a readable parquet file ({err})") from err
    for index, row in enumerate(table.to_pylist()):
        yield Row(f"{path}[{index}]", row)


def _saved_dataset(path: str, split: str | None) -> Iterator[Row]:
    import datasets

    loaded = datasets.load_from_disk(path)
    if isinstance(loaded, datasets.DatasetDict):
        names = list(loaded)
        chosen = split or next((s for s in ("test", "train") if s in loaded), names[0])
        if chosen not in loaded:
            raise UserError(f"{path}: no split {chosen!r} (has {', '.join(names)})")
        loaded, where = loaded[chosen], f"{path}[{chosen}]"
    else:
        where = path
    for index, row in enumerate(loaded):
        yield Row(f"{where}[{index}]", row)


def _data_files(path: str, split: str | None) -> list[str]:
    """The data files of a folder (a hub snapshot: data/test-00000-of-00001.parquet, ...),
    those whose name mentions ``split`` when it is given."""
    files = sorted(f for f in glob.glob(os.path.join(path, "**", "*"), recursive=True)
                   if f.endswith(DATA_SUFFIXES) and os.path.isfile(f))
    if split is not None:
        files = [f for f in files if split in os.path.relpath(f, path)]
    return files


def read_rows(path: str, *, split: str | None = None,
              on_error: Callable[[str, str], None] = lambda where, why: None) -> Iterator[Row]:
    """The rows of ``path`` (see the module docstring); ``split`` picks a split of a datasets
    directory (default "test", else "train", else the first)."""
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "dataset_info.json")) or os.path.exists(
                os.path.join(path, "dataset_dict.json")):
            yield from _saved_dataset(path, split)
            return
        files = _data_files(path, split)
        if not files:
            raise UserError(f"{path}: a directory with neither a saved dataset nor "
                            f"{'/'.join(DATA_SUFFIXES)} files" + (f" for split {split!r}"
                                                                   if split else ""))
        for file in files:
            yield from read_rows(file, on_error=on_error)
        return
    if not os.path.isfile(path):
        raise UserError(f"{path}: no such file or directory")
    if path.endswith(".jsonl"):
        yield from read_jsonl(path, on_error)
    elif path.endswith(".json"):
        yield from _json(path, on_error)
    elif path.endswith(".parquet"):
        yield from _parquet(path)
    else:
        raise UserError(f"{path}: expected a .jsonl, .json or .parquet file or a datasets "
                        "directory")
