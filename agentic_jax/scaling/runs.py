"""Scaling-law points from training runs: one point per logged step of `RUN_DIR/metrics.jsonl`.

What is read (the trainer's run directory format):
  N  the parameter count from `RUN_DIR/config.json`: top-level "num_params", else
     "model"/"num_params"; without either, the newest metrics record's "num_params".
     Stored raw; `RunPoints.N` is in billions.
  T  each record's "step"; `RunPoints.T` is in millions of steps.
  L  each record's "response_length" (mean tokens per response).
  y  each record's success key, "accuracy" unless told otherwise (e.g. "eval_accuracy").
  n  each record's weight: the first of "num_episodes" (the trainer's step metrics) and
     "num_problems" (evaluations) that every kept record has; none weighs every point 1.

A run may still be writing: its partial last line, and any garbage line, is skipped and
counted; records without a usable step, success rate or length are dropped and counted.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Mapping, Sequence

import numpy as np

from agentic_jax.utils.metrics import METRICS_FILE, read_metrics

CONFIG_FILE = "config.json"


@dataclasses.dataclass(frozen=True)
class RunPoints:
    """The usable records of one run, as arrays [P] in logged order."""

    run_dir: str
    num_params: float
    step: np.ndarray
    success: np.ndarray
    response_length: np.ndarray
    num_problems: np.ndarray | None
    skipped_lines: int
    dropped_records: int

    @property
    def N(self) -> np.ndarray:
        """Parameters in billions, one per point [P]."""
        return np.full(self.step.shape, self.num_params / 1e9)

    @property
    def T(self) -> np.ndarray:
        """Training steps in millions [P]."""
        return self.step / 1e6

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.run_dir))


def load_metrics(run_dir: str) -> tuple[list[dict[str, Any]], int]:
    """The records of `run_dir/metrics.jsonl` and the number of unreadable lines skipped."""
    path = os.path.join(run_dir, METRICS_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no metrics file (is {run_dir!r} a run directory?)")
    try:
        return read_metrics(path)
    except OSError as e:
        raise OSError(f"{path}: cannot read metrics ({e.strerror or e})") from e


def read_num_params(run_dir: str, records: Sequence[Mapping[str, Any]]) -> float:
    """The run's parameter count; see the module docstring for where it is looked up."""
    path = os.path.join(run_dir, CONFIG_FILE)
    candidates: list[Any] = []
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not a readable JSON config ({e})") from e
        if isinstance(config, dict):
            model = config.get("model")
            candidates += [
                config.get("num_params"),
                model.get("num_params") if isinstance(model, dict) else None,
            ]
    candidates += [r.get("num_params") for r in reversed(records)]
    value = next((v for v in candidates if v is not None), None)
    if value is None:
        raise ValueError(
            f'{run_dir}: no parameter count: expected "num_params" in {CONFIG_FILE} '
            f'(top level or under "model") or in {METRICS_FILE} records'
        )
    if not is_finite_number(value) or value <= 0:
        raise ValueError(f"{run_dir}: num_params must be a positive number, got {value!r}")
    return float(value)


WEIGHT_KEYS = ("num_episodes", "num_problems")


def load_run(
    run_dir: str, success_key: str = "accuracy", weight_key: str | Sequence[str] = WEIGHT_KEYS
) -> RunPoints:
    """Reads one run's points; raises FileNotFoundError/ValueError for unusable directories."""
    records, skipped = load_metrics(run_dir)
    num_params = read_num_params(run_dir, records)
    kept = [r for r in records if _usable(r, success_key)]
    keys = (weight_key,) if isinstance(weight_key, str) else tuple(weight_key)
    weights, has_weights = [], False
    for key in keys:
        weights = [r.get(key) for r in kept]
        has_weights = bool(kept) and all(is_finite_number(v) and v > 0 for v in weights)
        if has_weights:
            break
    return RunPoints(
        run_dir=run_dir,
        num_params=num_params,
        step=np.array([r["step"] for r in kept], dtype=np.float64),
        success=np.array([r[success_key] for r in kept], dtype=np.float64),
        response_length=np.array([r["response_length"] for r in kept], dtype=np.float64),
        num_problems=np.array(weights, dtype=np.float64) if has_weights else None,
        skipped_lines=skipped,
        dropped_records=len(records) - len(kept),
    )


def concat_points(
    runs: Sequence[RunPoints],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """(N, T, L, success, num_problems or None, run index) over all runs, each [sum P]."""
    if not runs:
        raise ValueError("no runs to combine")
    weights = [r.num_problems for r in runs]
    return (
        np.concatenate([r.N for r in runs]),
        np.concatenate([r.T for r in runs]),
        np.concatenate([r.response_length for r in runs]),
        np.concatenate([r.success for r in runs]),
        None if any(w is None for w in weights) else np.concatenate(weights),
        np.concatenate([np.full(r.step.shape, i) for i, r in enumerate(runs)]),
    )


def is_finite_number(v: Any) -> bool:
    """True for a finite int or float (not a bool): what a JSON metric value should be."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _usable(record: Mapping[str, Any], success_key: str) -> bool:
    step, y, length = (record.get(k) for k in ("step", success_key, "response_length"))
    return (
        is_finite_number(step)
        and step >= 0
        and is_finite_number(y)
        and 0.0 <= y <= 1.0
        and is_finite_number(length)
        and length >= 0
    )
