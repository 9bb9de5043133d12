"""Rows of a local table file: jsonl, json, parquet, or a Hugging Face ``datasets`` directory.

    rows = read_rows("aime24.parquet")          # -> Iterator[Row]
    rows = read_rows("math500/", split="test")  # a save_to_disk directory or a snapshot folder

Each row comes with ``where`` ("file.jsonl:12", "dir[test][3]") so a row that cannot be read
can be named. A line that is not JSON is reported through ``on_error`` and skipped; a file that
cannot be opened at all is a ValueError naming it. Nothing is downloaded: ``datasets`` reads
only what ``save_to_disk`` wrote, and parquet goes through pyarrow.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from agentic_jax.errors import UserError
from agentic_jax.utils.files import loads_bounded

DATA_SUFFIXES = (".jsonl", ".json", ".parquet")


class Row(NamedTuple):
    """One record of a table and where it came from."""

    where: str
    data: Any


def _jsonl(path: str, on_error: Callable[[str, str], None]) -> Iterator[Row]:
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
                yield from _jsonl(path, on_error)
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
        yield from _jsonl(path, on_error)
    elif path.endswith(".json"):
        yield from _json(path, on_error)
    elif path.endswith(".parquet"):
        yield from _parquet(path)
    else:
        raise UserError(f"{path}: expected a .jsonl, .json or .parquet file or a datasets "
                        "directory")
