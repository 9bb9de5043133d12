"""The agentic-RL scaling law for tool-using math solvers.

    success(N, T, L) = σ(α·ln N + β·√T − γ·L + b)

with N the parameter count in billions, T the number of training steps in millions, L the mean
response length in tokens and σ the logistic function. The published constants for math are
α = 0.32, β = 0.41, γ = 0.08 with no bias term (`PUBLISHED_MATH_LAW`). The logarithm is the
natural one.

Solving σ(·) = p for N gives the emergence threshold, the size at which success crosses p:

    N*(T, L, p) = exp((logit p − β·√T + γ·L − b) / α).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

PARAM_NAMES = ("alpha", "beta", "gamma", "bias")
ArrayLike = float | np.ndarray | list[float]


@dataclasses.dataclass(frozen=True)
class GoodnessOfFit:
    """How well a law describes a data set; all sums are weighted by problems per point.

    Attributes:
      log_likelihood: Σ n·[y·ln p + (1 − y)·ln(1 − p)].
      deviance: 2·Σ n·[y·ln(y/p) + (1 − y)·ln((1 − y)/(1 − p))] (0 for a perfect fit).
      null_deviance: the deviance of the constant prediction p = weighted mean of y.
      pseudo_r2: 1 − deviance / null_deviance (deviance R²; negative when worse than a constant).
      brier: Σ n·(y − p)² / Σ n.
      num_points: the number of (N, T, L) points.
    """

    log_likelihood: float
    deviance: float
    null_deviance: float
    pseudo_r2: float
    brier: float
    num_points: int

    def to_dict(self) -> dict[str, float | None]:
        """JSON-ready: a non-finite value (pseudo_r2 of constant data) becomes None."""
        return {k: (v if math.isfinite(v) else None) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GoodnessOfFit:
        d = _pick(d, [f.name for f in dataclasses.fields(cls)], "goodness of fit")
        d = {k: (math.nan if v is None else v) for k, v in d.items()}
        return cls(**{**d, "num_points": int(d["num_points"])})


@dataclasses.dataclass(frozen=True)
class BootstrapIntervals:
    """Percentile bootstrap intervals of the fitted constants.

    Attributes:
      bounds: parameter name -> (low, high).
      confidence: the coverage the intervals aim for, e.g. 0.95.
      num_resamples: resamples whose refit succeeded and entered the percentiles.
      num_failed: resamples that could not be fitted (e.g. a single model size drawn).
    """

    bounds: dict[str, tuple[float, float]]
    confidence: float
    num_resamples: int
    num_failed: int

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["bounds"] = {k: [float(lo), float(hi)] for k, (lo, hi) in self.bounds.items()}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BootstrapIntervals:
        d = _pick(d, ["bounds", "confidence", "num_resamples", "num_failed"], "bootstrap intervals")
        d["bounds"] = {k: (float(v[0]), float(v[1])) for k, v in d["bounds"].items()}
        return cls(**d)


@dataclasses.dataclass(frozen=True)
class ScalingLaw:
    """success = σ(alpha·ln N + beta·√T − gamma·L + bias); see the module docstring for units.

    `intervals` and `goodness` describe a fit and take no part in equality.
    """

    alpha: float
    beta: float
    gamma: float
    bias: float = 0.0
    intervals: BootstrapIntervals | None = dataclasses.field(default=None, compare=False)
    goodness: GoodnessOfFit | None = dataclasses.field(default=None, compare=False)

    @property
    def params(self) -> np.ndarray:
        """[alpha, beta, gamma, bias] as a float64 array [4]."""
        return np.array([self.alpha, self.beta, self.gamma, self.bias], dtype=np.float64)

    def logit(self, N: ArrayLike, T: ArrayLike, L: ArrayLike) -> np.ndarray:
        """alpha·ln N + beta·√T − gamma·L + bias, broadcast over the inputs."""
        n, t, l = validate_inputs(N, T, L)
        return self.alpha * np.log(n) + self.beta * np.sqrt(t) - self.gamma * l + self.bias

    def predict(self, N: ArrayLike, T: ArrayLike, L: ArrayLike) -> np.ndarray | float:
        """Predicted success in (0, 1); a float when every input is a scalar."""
        p = sigmoid(self.logit(N, T, L))
        return float(p) if p.ndim == 0 else p

    def threshold_N(self, T: ArrayLike, L: ArrayLike, p: float = 0.5) -> np.ndarray | float:
        """The size N (billions) at which predicted success equals p, for given T and L.

        With alpha > 0 success rises past this size (emergence); with alpha < 0 it falls. Sizes
        beyond float range come back as inf (or 0).
        """
        if not 0.0 < p < 1.0:
            raise ValueError(f"p must be in (0, 1), got {p}")
        if self.alpha == 0.0:
            raise ValueError(
                "threshold_N is undefined when alpha == 0 (success does not depend on N)"
            )
        _, t, l = validate_inputs(1.0, T, L)
        log_n = np.log(p / (1.0 - p)) - self.beta * np.sqrt(t) + self.gamma * l - self.bias
        with np.errstate(over="ignore"):
            n = np.exp(log_n / self.alpha)
        return float(n) if n.ndim == 0 else n

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; `from_dict` inverts it."""
        d: dict[str, Any] = {name: float(getattr(self, name)) for name in PARAM_NAMES}
        d["intervals"] = self.intervals.to_dict() if self.intervals else None
        d["goodness"] = self.goodness.to_dict() if self.goodness else None
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ScalingLaw:
        values = _pick(d, list(PARAM_NAMES), "scaling law")
        intervals, goodness = d.get("intervals"), d.get("goodness")
        return cls(
            **{k: float(v) for k, v in values.items()},
            intervals=BootstrapIntervals.from_dict(intervals) if intervals else None,
            goodness=GoodnessOfFit.from_dict(goodness) if goodness else None,
        )


PUBLISHED_MATH_LAW = ScalingLaw(alpha=0.32, beta=0.41, gamma=0.08, bias=0.0)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """σ(x) = 1 / (1 + e^(−x)), written so that neither tail overflows."""
    x = np.asarray(x, dtype=np.float64)
    return np.exp(-np.logaddexp(0.0, -x))


def validate_inputs(
    N: ArrayLike, T: ArrayLike, L: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """N, T, L as float64 arrays; raises ValueError unless N > 0, T >= 0, L >= 0, all finite."""
    arrays = []
    for name, value, positive in (("N", N, True), ("T", T, False), ("L", L, False)):
        a = np.asarray(value, dtype=np.float64)
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} must be finite")
        if np.any(a <= 0.0) if positive else np.any(a < 0.0):
            raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'}, got min {a.min():g}")
        arrays.append(a)
    return arrays[0], arrays[1], arrays[2]


def _pick(d: Mapping[str, Any], keys: list[str], what: str) -> dict[str, Any]:
    if not isinstance(d, Mapping):
        raise ValueError(f"{what}: expected a JSON object, got {type(d).__name__}")
    missing = [k for k in keys if k not in d]
    if missing:
        raise ValueError(f"{what}: missing keys {missing}")
    return {k: d[k] for k in keys}
