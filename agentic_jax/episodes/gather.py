"""Every host's episodes on every host, field for field.

An `Episode` is packed into flat numpy columns that the collectives carry exactly: per-episode
numbers as one row each, and each list or text field as one flat array of all episodes' items
plus a length per episode. Only 32-bit integers, bytes and bools travel (the collectives run
through JAX, which without x64 narrows 64-bit values), so a float is sent as the two 32-bit
words of its float64 and arrives bit for bit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from agentic_jax.parallel import gather_rows
from agentic_jax.rollout import Episode

_SEPARATOR = "\x00"  # between the strings of a list[str] field (error names)
_INT32 = np.iinfo(np.int32)

Packed = dict[str, np.ndarray]


def _floats_to_words(values: Sequence[float]) -> np.ndarray:
    return np.asarray(values, np.float64).reshape(-1).view(np.uint32).reshape(-1, 2)


def _words_to_floats(words: np.ndarray) -> list[float]:
    return np.ascontiguousarray(words, np.uint32).reshape(-1).view(np.float64).tolist()


def _ints(values: Sequence[int], name: str) -> np.ndarray:
    array = np.asarray(values, np.int64).reshape(-1)
    if array.size and (array.min() < _INT32.min or array.max() > _INT32.max):
        raise ValueError(f"Episode.{name}: values outside int32 cannot be gathered")
    return array.astype(np.int32)


def _text_bytes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), np.uint8)


# Field annotation -> (one value -> flat array, flat array -> value) for list and text fields.
_RAGGED: dict[str, tuple[Callable, Callable]] = {
    "list[int]": (lambda v, n: _ints(v, n), lambda a: [int(x) for x in a]),
    "list[float]": (lambda v, n: _floats_to_words(v), _words_to_floats),
    "str": (lambda v, n: _text_bytes(v), lambda a: bytes(a).decode("utf-8")),
    "list[str]": (lambda v, n: _text_bytes(_SEPARATOR.join(v)),
                  lambda a: bytes(a).decode("utf-8").split(_SEPARATOR) if len(a) else []),
}
_SCALARS = ("int", "float", "bool")


def _fields() -> list[dataclasses.Field]:
    """The fields hosts exchange (not those marked ``metadata={"gathered": False}``, which
    arrive at their defaults)."""
    fields = [f for f in dataclasses.fields(Episode) if f.metadata.get("gathered", True)]
    for f in fields:
        if f.type not in _RAGGED and f.type not in _SCALARS:
            raise TypeError(f"Episode.{f.name}: a field of type {f.type} cannot be gathered")
    return list(fields)


def pack_episodes(episodes: Sequence[Episode]) -> dict[str, Packed]:
    """{"rows": per-episode columns [N] (numbers and each list field's length), one entry per
    list / text field: {"items": its items of all episodes, concatenated}}."""
    rows: Packed = {}
    packed: dict[str, Packed] = {"rows": rows}
    for f in _fields():
        values = [getattr(e, f.name) for e in episodes]
        if f.type == "int":
            rows[f.name] = _ints(values, f.name)
        elif f.type == "float":
            rows[f.name] = _floats_to_words(values)
        elif f.type == "bool":
            rows[f.name] = np.asarray(values, bool)
        else:
            to_array = _RAGGED[f.type][0]
            parts = [to_array(v, f.name) for v in values]
            rows[f"{f.name}#length"] = np.asarray([len(p) for p in parts], np.int32)
            empty = np.zeros((0, 2), np.uint32) if f.type == "list[float]" else np.zeros(
                (0,), np.int32 if f.type == "list[int]" else np.uint8)
            packed[f.name] = {"items": np.concatenate(parts) if parts else empty}
    return packed


def unpack_episodes(packed: dict[str, Packed]) -> list[Episode]:
    """The episodes `pack_episodes` packed (rows of several hosts concatenated in order)."""
    rows = packed["rows"]
    n = len(next(iter(rows.values()))) if rows else 0
    kwargs: list[dict] = [{} for _ in range(n)]
    for f in _fields():
        if f.type in _SCALARS:
            column = rows[f.name]
            values = (_words_to_floats(column) if f.type == "float"
                      else [bool(x) if f.type == "bool" else int(x) for x in column])
        else:
            from_array = _RAGGED[f.type][1]
            items = packed[f.name]["items"]
            ends = np.cumsum(rows[f"{f.name}#length"])
            values = [from_array(items[end - length:end]) for end, length in
                      zip(ends, rows[f"{f.name}#length"])]
        for kw, value in zip(kwargs, values):
            kw[f.name] = value
    return [Episode(**kw) for kw in kwargs]


def gather_episodes(episodes: Sequence[Episode]) -> list[Episode]:
    """Every process's episodes, concatenated in process order, on every process (the list
    itself in a single process). Collective: every process must call it."""
    import jax

    if jax.process_count() == 1:
        return list(episodes)
    packed = pack_episodes(episodes)
    return unpack_episodes({name: gather_rows(part) for name, part in packed.items()})
