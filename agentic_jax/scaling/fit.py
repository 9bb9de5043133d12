"""Maximum-likelihood fit of the scaling law, bootstrap intervals and goodness of fit.

Each point i is a success rate y_i ∈ [0, 1] measured on n_i problems at (N_i, T_i, L_i). With
x_i = [ln N_i, √T_i, −L_i, 1] and θ = [α, β, γ, b] the binomial log-likelihood is

    ℓ(θ) = Σ_i n_i·[y_i·η_i − ln(1 + e^η_i)],   η_i = x_i·θ,

concave in θ. Newton's method (equivalently IRLS) maximises it:

    g = Xᵀ·(n ∘ (y − p)),   H = Xᵀ·diag(n ∘ p ∘ (1 − p))·X,   θ ← θ + H⁻¹·g,

with step halving whenever a full step would lower ℓ. Columns are scaled to unit root mean
square first, because L (hundreds of tokens) and √T (often ≪ 1) differ by orders of magnitude.
An optional ridge term −(l2/2)·‖θ_scaled‖² keeps the maximum finite when the data are perfectly
separable (e.g. every success rate 0 or 1); without it such data raise `ScalingFitError`.
Without `num_problems` every point weighs 1 (a quasi-binomial fit of the rates).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from agentic_jax.scaling.law import (
    PARAM_NAMES,
    ArrayLike,
    BootstrapIntervals,
    GoodnessOfFit,
    ScalingLaw,
    sigmoid,
    validate_inputs,
)

_FEATURE_NAMES = ("ln N", "sqrt T", "-L", "1")
# Fitted logits past this size mean probabilities within e^-30 of 0 or 1: what a diverging
# Newton iteration on separable data produces, never a plausible success rate.
_SEPARATION_LOGIT = 30.0


class ScalingFitError(ValueError):
    """The data do not determine the law (separation, too few distinct values, no convergence)."""


def fit_scaling_law(
    N: ArrayLike,
    T: ArrayLike,
    L: ArrayLike,
    success: ArrayLike,
    num_problems: ArrayLike | None = None,
    *,
    fix_bias_at_zero: bool = False,
    l2: float = 0.0,
    num_bootstrap: int = 0,
    confidence: float = 0.95,
    groups: Sequence | np.ndarray | None = None,
    seed: int = 0,
    max_iter: int = 100,
    tol: float = 1e-9,
) -> ScalingLaw:
    """Fits success = σ(α·ln N + β·√T − γ·L + b) by weighted binomial maximum likelihood.

    Args:
      N, T, L, success: 1-D arrays [P]: billions of parameters, millions of steps, mean response
        length in tokens, success rate in [0, 1].
      num_problems: problems behind each success rate [P] (the binomial weights); None weighs
        every point equally.
      fix_bias_at_zero: fit the published form, with b = 0.
      l2: ridge strength on the column-scaled coefficients; > 0 regularises separable data.
      num_bootstrap: percentile-bootstrap resamples for `law.intervals` (0: none).
      confidence: the intervals' nominal coverage.
      groups: a label per point [P]; the bootstrap then resamples whole groups (e.g. runs, whose
        logged steps are correlated) instead of single points.
      seed: the bootstrap's random seed.
      max_iter, tol: Newton iterations and the relative step size that counts as converged.

    Returns:
      The fitted law, with `goodness` and (if num_bootstrap > 0) `intervals` filled in.
    """
    X, y, w = _design(N, T, L, success, num_problems, fix_bias_at_zero)
    if l2 < 0 or not np.isfinite(l2):
        raise ValueError(f"l2 must be a finite number >= 0, got {l2}")
    if num_bootstrap < 0:
        raise ValueError(f"num_bootstrap must be >= 0, got {num_bootstrap}")
    theta = _newton(X, y, w, l2, max_iter, tol)
    law = _to_law(theta)
    intervals = None
    if num_bootstrap > 0:
        intervals = _bootstrap(X, y, w, l2, num_bootstrap, confidence, groups, seed, max_iter, tol)
    return ScalingLaw(
        law.alpha,
        law.beta,
        law.gamma,
        law.bias,
        intervals=intervals,
        goodness=_goodness(X @ theta, y, w),
    )


def evaluate_law(
    law: ScalingLaw,
    N: ArrayLike,
    T: ArrayLike,
    L: ArrayLike,
    success: ArrayLike,
    num_problems: ArrayLike | None = None,
) -> GoodnessOfFit:
    """How well a given law (e.g. `PUBLISHED_MATH_LAW`) describes the data, without refitting."""
    X, y, w = _design(N, T, L, success, num_problems, fix_bias_at_zero=False)
    return _goodness(X @ law.params, y, w)


def _design(
    N: ArrayLike,
    T: ArrayLike,
    L: ArrayLike,
    success: ArrayLike,
    num_problems: ArrayLike | None,
    fix_bias_at_zero: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validated design matrix X [P, K], success rates y [P] and weights w [P]."""
    n, t, l = validate_inputs(N, T, L)
    y = np.asarray(success, dtype=np.float64)
    w = np.ones_like(y) if num_problems is None else np.asarray(num_problems, dtype=np.float64)
    arrays = {"N": n, "T": t, "L": l, "success": y, "num_problems": w}
    for name, a in arrays.items():
        if a.ndim != 1:
            raise ValueError(f"{name} must be a 1-D array, got shape {a.shape}")
    lengths = {name: a.shape[0] for name, a in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(
            f"N, T, L, success (and num_problems) must have equal lengths, got {lengths}"
        )
    if not np.all(np.isfinite(y)) or np.any((y < 0) | (y > 1)):
        raise ValueError("success must be rates in [0, 1]")
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError("num_problems must be finite and > 0")
    columns = [np.log(n), np.sqrt(t), -l] + ([] if fix_bias_at_zero else [np.ones_like(n)])
    X = np.stack(columns, axis=1)
    if X.shape[0] < X.shape[1]:
        raise ValueError(
            f"need at least {X.shape[1]} points to fit {X.shape[1]} constants, " f"got {X.shape[0]}"
        )
    return X, y, w


def _newton(
    X: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float, max_iter: int, tol: float
) -> np.ndarray:
    """The maximiser θ [K] of the (ridge-penalised) weighted log-likelihood; see module doc."""
    scale = np.sqrt(np.mean(X**2, axis=0))
    _check_identifiable(X, scale)
    Z = X / scale
    if l2 == 0.0 and (np.all(y == 0.0) or np.all(y == 1.0)):
        raise ScalingFitError(
            f"every success rate is {y[0]:g}: the likelihood has no maximum "
            "(perfect separation); pass l2 > 0 to regularise"
        )

    def objective(th: np.ndarray) -> float:
        return _log_likelihood(Z @ th, y, w) - 0.5 * l2 * float(th @ th)

    theta = np.zeros(Z.shape[1])
    value = objective(theta)
    for _ in range(max_iter):
        p = sigmoid(Z @ theta)
        grad = Z.T @ (w * (y - p)) - l2 * theta
        hess = (Z.T * (w * p * (1.0 - p))) @ Z + l2 * np.eye(Z.shape[1])
        try:
            step = np.linalg.solve(hess, grad)
        except np.linalg.LinAlgError:
            break
        t = 1.0
        # The objective is concave, so halving finds an ascent step unless we are at the optimum.
        while objective(theta + t * step) < value and t > 1e-8:
            t *= 0.5
        theta = theta + t * step
        value = objective(theta)
        if np.max(np.abs(t * step)) <= tol * (1.0 + np.max(np.abs(theta))):
            return theta / scale
    if np.max(np.abs(Z @ theta)) > _SEPARATION_LOGIT:
        raise ScalingFitError(
            "the fit diverges: the data are perfectly separable (success rates of "
            "0 and 1 split cleanly by N, T, L); pass l2 > 0 to regularise"
        )
    raise ScalingFitError(f"Newton's method did not converge in {max_iter} iterations")


def _check_identifiable(X: np.ndarray, scale: np.ndarray) -> None:
    names = _FEATURE_NAMES[: X.shape[1]]
    if np.any(scale == 0.0):
        zero = [n for n, s in zip(names, scale) if s == 0.0]
        raise ScalingFitError(f"cannot fit: column(s) {zero} are 0 at every point")
    if np.linalg.matrix_rank(X / scale) < X.shape[1]:
        constant = [n for n, c in zip(names[:3], X.T) if np.ptp(c) == 0.0]
        detail = (
            f"{constant} take a single value"
            if constant and X.shape[1] == 4
            else "the columns are collinear"
        )
        raise ScalingFitError(
            f"cannot separate the effects of {list(names)}: {detail}; "
            "vary N, T and L across points (e.g. at least 2 model sizes)"
        )


def _log_likelihood(eta: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    """Σ w·[y·η − ln(1 + e^η)], stable for any η."""
    return float(np.sum(w * (y * eta - np.logaddexp(0.0, eta))))


def _xlogx(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x * np.log(np.where(x > 0, x, 1.0)), 0.0)


def _goodness(eta: np.ndarray, y: np.ndarray, w: np.ndarray) -> GoodnessOfFit:
    """Log-likelihood, deviance, deviance R² and Brier score of logits η [P] against y [P]."""
    ll = _log_likelihood(eta, y, w)
    ll_saturated = float(np.sum(w * (_xlogx(y) + _xlogx(1.0 - y))))
    mean = float(np.sum(w * y) / np.sum(w))
    ll_null = float(np.sum(w * (y * _safe_log(mean) + (1.0 - y) * _safe_log(1.0 - mean))))
    deviance = max(2.0 * (ll_saturated - ll), 0.0)
    null_deviance = max(2.0 * (ll_saturated - ll_null), 0.0)
    pseudo_r2 = 1.0 - deviance / null_deviance if null_deviance > 0 else float("nan")
    brier = float(np.sum(w * (y - sigmoid(eta)) ** 2) / np.sum(w))
    return GoodnessOfFit(
        log_likelihood=ll,
        deviance=deviance,
        null_deviance=null_deviance,
        pseudo_r2=pseudo_r2,
        brier=brier,
        num_points=int(y.shape[0]),
    )


def _safe_log(x: float) -> float:
    # ln 0 only ever meets a zero factor: the mean rate is 0 (or 1) only when every y is.
    return float(np.log(x)) if x > 0 else 0.0


def _to_law(theta: np.ndarray) -> ScalingLaw:
    alpha, beta, gamma = (float(v) for v in theta[:3])
    return ScalingLaw(alpha, beta, gamma, float(theta[3]) if theta.shape[0] == 4 else 0.0)


def _bootstrap(
    X: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    l2: float,
    num_resamples: int,
    confidence: float,
    groups: Sequence | np.ndarray | None,
    seed: int,
    max_iter: int,
    tol: float,
) -> BootstrapIntervals:
    """Percentile intervals from refits on resampled points (or resampled whole groups)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    labels = np.arange(y.shape[0]) if groups is None else np.asarray(groups)
    if labels.shape != y.shape:
        raise ValueError(
            f"groups must have one label per point ({y.shape[0]}), " f"got shape {labels.shape}"
        )
    members = [np.flatnonzero(labels == g) for g in np.unique(labels)]
    rng = np.random.default_rng(seed)
    thetas, failed = [], 0
    for _ in range(num_resamples):
        idx = np.concatenate([members[i] for i in rng.integers(0, len(members), len(members))])
        try:
            thetas.append(_newton(X[idx], y[idx], w[idx], l2, max_iter, tol))
        except ScalingFitError:
            failed += 1
    if len(thetas) < 2:
        raise ScalingFitError(
            f"only {len(thetas)} of {num_resamples} bootstrap resamples could be "
            "fitted; add data (more sizes or runs) or pass l2 > 0"
        )
    tail = 100.0 * (1.0 - confidence) / 2.0
    lo, hi = np.percentile(np.stack(thetas), [tail, 100.0 - tail], axis=0)
    bounds = {name: (float(a), float(b)) for name, a, b in zip(PARAM_NAMES, lo, hi)}
    return BootstrapIntervals(
        bounds=bounds, confidence=confidence, num_resamples=len(thetas), num_failed=failed
    )
