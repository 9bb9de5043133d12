"""Metrics writers: one JSON object per logged step in ``metrics.jsonl``, TensorBoard events in
``tensorboard/``, and a reader that tolerates runs still being written.

Only the main process writes. On resume, records newer than the restored step (logged after the
last checkpoint by a run that then died) are moved to ``metrics.discarded.jsonl`` so the curve
has no duplicate steps and nothing written is lost. A last line cut short (a crash during a
write) goes there too, so the next record starts on a line of its own.
"""

from __future__ import annotations

import json
import logging
import math
import os
from typing import Any, Iterable, Mapping

import numpy as np

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
DISCARDED_FILE = "metrics.discarded.jsonl"


def _to_json_value(v: Any) -> Any:
    if isinstance(v, (np.generic, np.ndarray)) or hasattr(v, "__array__"):
        v = np.asarray(v)
        v = v.item() if v.ndim == 0 else v.tolist()
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else (1e308 if v > 0 else -1e308)
    return v


def read_metrics(path: str) -> tuple[list[dict[str, Any]], int]:
    """Reads a metrics.jsonl file; returns (records, number of unreadable lines skipped).

    A partial last line (a run still writing) and garbage lines are skipped, never raised.
    """
    records: list[dict[str, Any]] = []
    skipped = 0
    if not os.path.exists(path):
        return records, skipped
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                skipped += 1
                continue
            if isinstance(obj, dict):
                records.append(obj)
            else:
                skipped += 1
    return records, skipped


class MetricsWriter:
    """Writes step metrics to jsonl and TensorBoard (main process only).

    Args:
      workdir: the run directory.
      enabled: False on non-main processes: every call becomes a no-op.
      tensorboard: also write TensorBoard events under ``workdir/tensorboard``.
      resume_step: when resuming, records with ``step > resume_step`` are moved aside.
    """

    def __init__(
        self,
        workdir: str,
        *,
        enabled: bool = True,
        tensorboard: bool = True,
        resume_step: int | None = None,
    ):
        self.enabled = enabled
        self.path = os.path.join(workdir, METRICS_FILE)
        self._tb = None
        if not enabled:
            return
        os.makedirs(workdir, exist_ok=True)
        self._repair_tail()
        if resume_step is not None:
            self._truncate_after(resume_step)
        if tensorboard:
            from tensorboardX import SummaryWriter  # imported lazily: it pulls in protobuf

            self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))
        self._file = open(self.path, "a", encoding="utf-8")

    def _repair_tail(self) -> None:
        """Ends the file with a newline: a last line that is a whole record gets its newline, a
        cut one is removed (and kept in the discarded file as it was)."""
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb+") as f:
            data = f.read()
            if not data or data.endswith(b"\n"):
                return
            cut = data.rfind(b"\n") + 1
            tail = data[cut:]
            try:
                whole = isinstance(json.loads(tail), dict)
            except ValueError:
                whole = False
            if whole:
                f.write(b"\n")
                return
            with open(self._discarded_path, "ab") as out:
                out.write(tail + b"\n")
            f.truncate(cut)
        logger.warning("%s: its last line was cut short (%d bytes, a crash during a write); "
                       "moved to %s", self.path, len(tail), DISCARDED_FILE)

    @property
    def _discarded_path(self) -> str:
        return os.path.join(os.path.dirname(self.path), DISCARDED_FILE)

    def _truncate_after(self, step: int) -> None:
        records, _ = read_metrics(self.path)
        keep = [r for r in records if r.get("step", -1) <= step]
        drop = [r for r in records if r.get("step", -1) > step]
        if not drop:
            return
        with open(self._discarded_path, "a", encoding="utf-8") as f:
            for r in drop:
                f.write(json.dumps(r) + "\n")
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for r in keep:
                f.write(json.dumps(r) + "\n")
        os.replace(tmp, self.path)
        logger.info(
            "resuming at step %d: moved %d newer metric records to %s",
            step,
            len(drop),
            DISCARDED_FILE,
        )

    def write(self, step: int, metrics: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"step": int(step)}
        record.update({k: _to_json_value(v) for k, v in metrics.items()})
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    self._tb.add_scalar(k, v, step)

    def write_many(self, items: Iterable[tuple[int, Mapping[str, Any]]]) -> None:
        for step, metrics in items:
            self.write(step, metrics)

    def close(self) -> None:
        if not self.enabled:
            return
        self._file.close()
        if self._tb is not None:
            self._tb.close()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
