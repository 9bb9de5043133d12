"""Small file and number helpers shared by the run loop and the tools."""

from __future__ import annotations

import json
import os
from typing import Any


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


def round_up(n: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` that is >= ``n`` (``multiple`` > 0)."""
    return -(-int(n) // int(multiple)) * int(multiple)
