"""Fit the scaling law on run directories and write `fit.json` and `fit.png`."""

from __future__ import annotations

import logging
import os
from typing import Any, Sequence

from agentic_jax.scaling.fit import ScalingFitError, evaluate_law, fit_scaling_law
from agentic_jax.scaling.law import PARAM_NAMES, PUBLISHED_MATH_LAW, ScalingLaw
from agentic_jax.scaling.plots import plot_fit
from agentic_jax.scaling.runs import RunPoints, concat_points, load_run
from agentic_jax.utils.files import write_json

logger = logging.getLogger(__name__)

FIT_JSON = "fit.json"
FIT_PNG = "fit.png"


def fit_runs(
    run_dirs: Sequence[str],
    out_dir: str,
    *,
    success_key: str = "accuracy",
    fix_bias_at_zero: bool = False,
    l2: float = 0.0,
    num_bootstrap: int = 200,
    confidence: float = 0.95,
    seed: int = 0,
    reference: ScalingLaw = PUBLISHED_MATH_LAW,
) -> dict[str, Any]:
    """Fits the law to every logged step of the runs; writes out_dir/fit.json and fit.png.

    The bootstrap resamples whole runs, since the steps of one run are correlated. Runs without a
    usable record yet are left out (and listed under "skipped_runs"); a missing run directory or
    metrics file raises. `reference` (the published constants) is evaluated on the same data.

    Returns:
      What fit.json holds: the fitted law (constants, intervals, goodness of fit), the reference
      law with its goodness of fit on the same data, per-run summaries and the options used.
    """
    runs, skipped_runs = _load_runs(run_dirs, success_key)
    N, T, L, y, n, run_index = concat_points(runs)
    options = dict(fix_bias_at_zero=fix_bias_at_zero, l2=l2, confidence=confidence, seed=seed)
    try:
        law = fit_scaling_law(
            N, T, L, y, n, num_bootstrap=num_bootstrap, groups=run_index, **options
        )
    except ScalingFitError as e:
        if num_bootstrap == 0:
            raise
        logger.warning("no bootstrap intervals: %s", e)
        law = fit_scaling_law(N, T, L, y, n, **options)
    result = {
        "law": law.to_dict(),
        "reference": {
            "law": reference.to_dict(),
            "goodness": evaluate_law(reference, N, T, L, y, n).to_dict(),
            "relative_difference": {
                k: (getattr(law, k) - getattr(reference, k)) / getattr(reference, k)
                for k in PARAM_NAMES
                if getattr(reference, k) != 0.0
            },
        },
        "data": {
            "num_points": int(y.size),
            "num_runs": len(runs),
            "success_key": success_key,
            "weighted_by_num_problems": n is not None,
            "units": {"N": "billions of parameters", "T": "millions of steps", "L": "tokens"},
        },
        "runs": [_run_summary(r) for r in runs],
        "skipped_runs": skipped_runs,
        "options": {**options, "num_bootstrap": num_bootstrap},
    }
    os.makedirs(out_dir, exist_ok=True)
    _write_json(os.path.join(out_dir, FIT_JSON), result)
    plot_fit(runs, law, reference, os.path.join(out_dir, FIT_PNG))
    return result


def format_summary(result: dict[str, Any]) -> str:
    """A few human-readable lines: constants with intervals, and both laws' goodness of fit."""
    law = ScalingLaw.from_dict(result["law"])
    ref = ScalingLaw.from_dict(result["reference"]["law"])
    lines = [f"{result['data']['num_points']} points from {result['data']['num_runs']} runs"]
    for name in PARAM_NAMES:
        bounds = law.intervals.bounds.get(name) if law.intervals else None
        ci = f" [{bounds[0]:.4g}, {bounds[1]:.4g}]" if bounds else ""
        lines.append(
            f"  {name:5s} = {getattr(law, name):.4g}{ci}  (reference {getattr(ref, name):g})"
        )
    for label, g in (
        ("fit", result["law"]["goodness"]),
        ("reference", result["reference"]["goodness"]),
    ):
        r2 = "n/a" if g["pseudo_r2"] is None else f"{g['pseudo_r2']:.3f}"
        lines.append(
            f"  {label}: deviance {g['deviance']:.4g}, pseudo-R2 {r2}, " f"Brier {g['brier']:.4g}"
        )
    return "\n".join(lines)


def _load_runs(
    run_dirs: Sequence[str], success_key: str
) -> tuple[list[RunPoints], list[dict[str, str]]]:
    if not run_dirs:
        raise ValueError("no run directories given")
    runs, skipped = [], []
    for run_dir in run_dirs:
        run = load_run(run_dir, success_key)
        if run.skipped_lines:
            logger.info("%s: skipped %d unreadable metrics lines", run_dir, run.skipped_lines)
        if run.step.size == 0:
            logger.warning(
                "%s: no record with step, %s and response_length yet; left out",
                run_dir,
                success_key,
            )
            skipped.append({"run_dir": run_dir, "reason": "no usable records"})
            continue
        runs.append(run)
    if not runs:
        raise ValueError(f"none of the {len(run_dirs)} runs has a usable record yet")
    return runs, skipped


def _run_summary(run: RunPoints) -> dict[str, Any]:
    return {
        "run_dir": run.run_dir,
        "num_params": run.num_params,
        "num_points": int(run.step.size),
        "final_step": float(run.step[-1]),
        "final_success": float(run.success[-1]),
        "final_response_length": float(run.response_length[-1]),
        "skipped_lines": run.skipped_lines,
        "dropped_records": run.dropped_records,
    }


def _write_json(path: str, obj: Any) -> None:
    """Atomic, so an interrupted write never leaves half a fit.json."""
    write_json(path, obj, allow_nan=False)
