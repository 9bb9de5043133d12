"""Small file and number helpers shared by the run loop and the tools."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import numpy as np

MAX_JSON_DEPTH = 32  # request bodies and homework lines need 3; CPython's parser fails near 1000
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# Each byte's change of nesting depth: +1 opens an array/object, -1 (255 as int8) closes one.
_DEPTH_STEP = bytes(1 if b in b"[{" else 255 if b in b"]}" else 0 for b in range(256))


def write_json(path: str, obj: Any, *, allow_nan: bool = True) -> None:
    """Writes ``obj`` as JSON atomically: a reader sees the old file or the new one, never a
    partial write. ``allow_nan=False`` refuses NaN / inf (which strict JSON readers reject)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True, allow_nan=allow_nan)
    os.replace(tmp, path)


def read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class JSONDepthError(ValueError):
    """Valid or not, the JSON is nested deeper than the reader allows."""


def json_depth(text: str) -> int:
    """The deepest nesting of arrays/objects in valid JSON ``text`` (brackets inside strings
    aside), counted by a C-speed regex and NumPy rather than by recursion. On invalid JSON an
    unclosed string makes the regex quadratic: parse first."""
    data = _JSON_STRING.sub(b"", text.encode("utf-8", "surrogatepass"))
    steps = np.frombuffer(data.translate(_DEPTH_STEP), dtype=np.int8)
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


def loads_bounded(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` of untrusted text; JSONDepthError for nesting deeper than ``max_depth``,
    ValueError for text that is not JSON.

    CPython's parser raises RecursionError (not ValueError) near depth 1000, which escaped
    callers that catch ValueError; below that depth a deep value is refused after parsing so
    that no later recursive walk (validation, printing) meets it."""
    if isinstance(text, bytes):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    try:
        value = json.loads(text)
    except RecursionError:
        raise JSONDepthError(f"JSON nested deeper than {max_depth} levels") from None
    depth = json_depth(text)
    if depth > max_depth:
        raise JSONDepthError(f"JSON nested {depth} levels deep; at most {max_depth}")
    return value


def round_up(n: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` that is >= ``n`` (``multiple`` > 0)."""
    return -(-int(n) // int(multiple)) * int(multiple)
