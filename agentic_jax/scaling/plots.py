"""PNG plots: a run's training curves, and a scaling-law fit against the runs it came from.

Figures are drawn on matplotlib's Agg canvas directly (no pyplot), so plotting works headless
and leaves no global state behind in a training process.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from agentic_jax.scaling.law import ScalingLaw
from agentic_jax.scaling.runs import RunPoints, is_finite_number

# (metrics key, panel title): the curves the emergence result is about.
RUN_CURVES = (
    ("accuracy", "accuracy"),
    ("code_use_rate", "code-use rate"),
    ("tool_calls", "tool calls per episode"),
    ("response_length", "response length (tokens)"),
    ("reward", "reward"),
    ("exec_success_rate", "code execution success rate"),
)

Records = Sequence[Mapping[str, Any]]


def plot_run_curves(
    metrics_records: Records | Mapping[str, Records],
    out_png: str | os.PathLike,
    title: str | None = None,
) -> str:
    """Plots `RUN_CURVES` against step, one line per run, panels sharing the step axis.

    Args:
      metrics_records: one run's metrics records (dicts with "step" and the curve keys), or a
        mapping run name -> records to overlay several runs. Missing or non-numeric values are
        left out of their panel; "eval_accuracy", when logged, is drawn dashed beside accuracy.
      out_png: the PNG to write (parent directories are created).
      title: the figure title.

    Returns:
      The path written.
    """
    runs = dict(metrics_records) if isinstance(metrics_records, Mapping) else {"": metrics_records}
    fig = Figure(figsize=(16, 8), layout="constrained")
    axes = fig.subplots(2, 3, sharex=True).ravel()
    for (key, label), ax in zip(RUN_CURVES, axes):
        for i, (name, records) in enumerate(runs.items()):
            color = f"C{i % 10}"
            ax.plot(*_series(records, key), color=color, label=name or "train")
            eval_steps, eval_values = _series(records, "eval_accuracy")
            if key == "accuracy" and eval_steps:
                ax.plot(
                    eval_steps,
                    eval_values,
                    color=color,
                    linestyle="--",
                    label=f"{name} (eval)".strip(),
                )
        ax.set_title(label)
        ax.grid(alpha=0.3)
    for ax in axes[3:]:
        ax.set_xlabel("step")
    handles, labels = axes[0].get_legend_handles_labels()
    if len(labels) > 1:
        fig.legend(handles, labels, loc="outside right upper", fontsize="small")
    if title:
        fig.suptitle(title)
    return _save(fig, out_png)


def plot_fit(
    runs: Sequence[RunPoints],
    law: ScalingLaw,
    reference: ScalingLaw,
    out_png: str | os.PathLike,
    reference_name: str = "published",
) -> str:
    """Three panels: observed vs predicted success; success vs step per run with both laws'
    predictions; predicted success vs N at the data's median T and L, thresholds marked.

    `law` is drawn solid, `reference` (e.g. `PUBLISHED_MATH_LAW`) dashed.
    """
    fig = Figure(figsize=(17, 5.5), layout="constrained")
    ax_obs, ax_step, ax_n = fig.subplots(1, 3)
    sizes = sorted({r.num_params for r in runs})
    colors = {n: f"C{i % 10}" for i, n in enumerate(sizes)}
    for r in runs:
        kw = {"color": colors[r.num_params]}
        ax_obs.scatter(r.success, law.predict(r.N, r.T, r.response_length), s=8, marker="o", **kw)
        ax_obs.scatter(
            r.success,
            reference.predict(r.N, r.T, r.response_length),
            s=12,
            marker="x",
            alpha=0.5,
            **kw,
        )
        ax_step.plot(r.step, r.success, ".", alpha=0.4, **kw)
        ax_step.plot(r.step, law.predict(r.N, r.T, r.response_length), "-", **kw)
        ax_step.plot(r.step, reference.predict(r.N, r.T, r.response_length), "--", **kw)
    ax_obs.plot([0, 1], [0, 1], color="gray", linewidth=1)
    ax_obs.set(
        xlabel="observed success",
        ylabel="predicted success",
        xlim=(0, 1),
        ylim=(0, 1),
        title=f"observed vs predicted (o: fit, x: {reference_name})",
    )
    for n in sizes:
        ax_step.plot([], [], color=colors[n], label=f"N = {_format_params(n)}")
    ax_step.set(
        xlabel="step",
        ylabel="success",
        ylim=(-0.02, 1.02),
        title=f"success vs step (solid: fit, dashed: {reference_name})",
    )
    ax_step.legend(fontsize="small")
    _plot_success_vs_n(ax_n, runs, {"fit": (law, "-"), reference_name: (reference, "--")})
    for ax in (ax_obs, ax_step, ax_n):
        ax.grid(alpha=0.3)
    return _save(fig, out_png)


def _plot_success_vs_n(
    ax: Any, runs: Sequence[RunPoints], laws: Mapping[str, tuple[ScalingLaw, str]]
) -> None:
    """Each law's success vs N (log axis) at median T and L, with its p = 0.5 threshold."""
    t = float(np.median(np.concatenate([r.T for r in runs])))
    l = float(np.median(np.concatenate([r.response_length for r in runs])))
    n_obs = np.array([r.num_params / 1e9 for r in runs])
    grid = np.geomspace(n_obs.min() / 10.0, n_obs.max() * 10.0, 200)
    for name, (law, style) in laws.items():
        ax.plot(grid, law.predict(grid, t, l), style, color="black", label=name)
        if law.alpha != 0.0:
            n_star = law.threshold_N(t, l)
            label = f"{name}: N* = {_format_params(n_star * 1e9)}"
            if grid[0] <= n_star <= grid[-1]:
                ax.axvline(n_star, linestyle=style, color="red", linewidth=1, label=label)
            else:
                ax.plot(
                    [], [], linestyle=style, color="red", linewidth=1, label=label + " (off axis)"
                )
    final = [r.success[-1] for r in runs if r.success.size]
    ax.scatter(
        [r.num_params / 1e9 for r in runs if r.success.size],
        final,
        color="C0",
        label="final observed",
        zorder=3,
    )
    ax.set(
        xscale="log",
        xlabel="N (billions of parameters)",
        ylabel="success",
        ylim=(-0.02, 1.02),
        title=f"success vs N at median step {t * 1e6:.3g}, L = {l:.0f} tokens",
    )
    ax.legend(fontsize="small")


def _series(records: Records, key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of the records holding a finite number under both "step" and `key`."""
    pairs = [(r.get("step"), r.get(key)) for r in records]
    pairs = [(s, v) for s, v in pairs if is_finite_number(s) and is_finite_number(v)]
    return [s for s, _ in pairs], [v for _, v in pairs]


def _format_params(n: float) -> str:
    """2e5 -> "200K", 1.5e9 -> "1.5B"."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.3g}"


def _save(fig: Figure, out_png: str | os.PathLike) -> str:
    path = os.fspath(out_png)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=100)
    return path
