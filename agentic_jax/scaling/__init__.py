"""The scaling law σ(α·ln N + β·√T − γ·L + b): fitting it, reading runs, plotting the curves."""

from agentic_jax.scaling.fit import ScalingFitError, evaluate_law, fit_scaling_law
from agentic_jax.scaling.law import (
    PUBLISHED_MATH_LAW,
    BootstrapIntervals,
    GoodnessOfFit,
    ScalingLaw,
)
from agentic_jax.scaling.plots import plot_fit, plot_run_curves
from agentic_jax.scaling.report import fit_runs, format_summary
from agentic_jax.scaling.runs import RunPoints, load_metrics, load_run, read_num_params

__all__ = [
    "PUBLISHED_MATH_LAW",
    "BootstrapIntervals",
    "GoodnessOfFit",
    "RunPoints",
    "ScalingFitError",
    "ScalingLaw",
    "evaluate_law",
    "fit_runs",
    "fit_scaling_law",
    "format_summary",
    "load_metrics",
    "load_run",
    "plot_fit",
    "plot_run_curves",
    "read_num_params",
]
