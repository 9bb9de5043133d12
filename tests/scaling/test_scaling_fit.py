"""Maximum-likelihood fitting: recovery of known constants, intervals, goodness, bad data."""

import numpy as np
import pytest

from agentic_jax.scaling import (
    PUBLISHED_MATH_LAW,
    ScalingFitError,
    ScalingLaw,
    evaluate_law,
    fit_scaling_law,
)

BIASED = ScalingLaw(alpha=0.5, beta=0.3, gamma=0.05, bias=-1.0)


def draw(law, seed, num_points=200, num_problems=2000):
    """Success rates measured on num_problems problems at random (N, T, L) points."""
    rng = np.random.default_rng(seed)
    N = np.exp(rng.uniform(np.log(0.5), np.log(70.0), num_points))
    T = rng.uniform(0.0, 25.0, num_points)
    L = rng.uniform(0.0, 60.0, num_points)
    y = rng.binomial(num_problems, law.predict(N, T, L)) / num_problems
    return N, T, L, y, np.full(num_points, num_problems)


def relative_error(law, truth, names=("alpha", "beta", "gamma")):
    return {k: abs(getattr(law, k) / getattr(truth, k) - 1.0) for k in names}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recovers_published_form(seed):
    law = fit_scaling_law(*draw(PUBLISHED_MATH_LAW, seed), fix_bias_at_zero=True)
    assert max(relative_error(law, PUBLISHED_MATH_LAW).values()) <= 0.10
    assert law.bias == 0.0


@pytest.mark.parametrize("seed", [0, 1])
def test_recovers_law_with_bias(seed):
    law = fit_scaling_law(*draw(BIASED, seed))
    errors = relative_error(law, BIASED, ("alpha", "beta", "gamma", "bias"))
    assert max(errors.values()) <= 0.10, errors


def test_recovers_without_problem_counts():
    N, T, L, y, _ = draw(BIASED, 3)
    law = fit_scaling_law(N, T, L, y)
    assert max(relative_error(law, BIASED).values()) <= 0.10


def test_weights_count_problems():
    """A point measured on 100x more problems pulls the fit like 100 copies of itself."""
    N, T, L, y, n = draw(BIASED, 4, num_points=30, num_problems=50)
    n = n.astype(float)
    n[0] *= 100
    weighted = fit_scaling_law(N, T, L, y, n)
    copies = np.r_[np.zeros(99, int), np.arange(30)]
    repeated = fit_scaling_law(N[copies], T[copies], L[copies], y[copies], np.full(129, 50.0))
    np.testing.assert_allclose(weighted.params, repeated.params, rtol=1e-6)


def test_fit_is_the_likelihood_maximum():
    data = draw(BIASED, 5)
    law = fit_scaling_law(*data)
    best = law.goodness.log_likelihood
    for delta in np.eye(4) * 1e-3:
        other = ScalingLaw(*(law.params + delta))
        assert evaluate_law(other, *data).log_likelihood < best


def test_bootstrap_interval_covers_truth_and_is_seeded():
    data = draw(BIASED, 4, num_points=120, num_problems=500)
    law = fit_scaling_law(*data, num_bootstrap=200, seed=7)
    iv = law.intervals
    assert iv.num_resamples + iv.num_failed == 200 and iv.confidence == 0.95
    for name in ("alpha", "beta", "gamma", "bias"):
        lo, hi = iv.bounds[name]
        assert lo < getattr(BIASED, name) < hi, (name, lo, hi)
        assert lo < getattr(law, name) < hi
    assert fit_scaling_law(*data, num_bootstrap=200, seed=7).intervals == iv
    assert fit_scaling_law(*data, num_bootstrap=200, seed=8).intervals != iv


def test_narrower_confidence_gives_narrower_intervals():
    data = draw(BIASED, 6, num_points=80, num_problems=200)
    wide = fit_scaling_law(*data, num_bootstrap=100, confidence=0.95).intervals.bounds
    narrow = fit_scaling_law(*data, num_bootstrap=100, confidence=0.5).intervals.bounds
    for name in wide:
        assert narrow[name][1] - narrow[name][0] < wide[name][1] - wide[name][0]


def test_group_bootstrap_resamples_whole_groups():
    N, T, L, y, n = draw(BIASED, 7, num_points=60)
    groups = np.repeat(np.arange(6), 10)
    law = fit_scaling_law(N, T, L, y, n, num_bootstrap=50, groups=groups)
    assert law.intervals.num_resamples >= 40
    with pytest.raises(ValueError, match="one label per point"):
        fit_scaling_law(N, T, L, y, n, num_bootstrap=5, groups=groups[:-1])


@pytest.mark.slow
def test_bootstrap_coverage_is_near_nominal():
    covered = []
    for seed in range(60):
        law = fit_scaling_law(
            *draw(BIASED, 100 + seed, num_points=60, num_problems=200), num_bootstrap=200, seed=seed
        )
        covered.append(
            [lo <= v <= hi for v, (lo, hi) in zip(BIASED.params, law.intervals.bounds.values())]
        )
    assert np.all(np.mean(covered, axis=0) >= 0.85)


def test_goodness_of_fit_on_exact_rates():
    rng = np.random.default_rng(0)
    N, T, L = rng.uniform(0.5, 50, 40), rng.uniform(0, 9, 40), rng.uniform(0, 40, 40)
    law = fit_scaling_law(N, T, L, BIASED.predict(N, T, L))
    g = law.goodness
    assert g.deviance == pytest.approx(0.0, abs=1e-8)
    assert g.pseudo_r2 == pytest.approx(1.0) and g.brier == pytest.approx(0.0, abs=1e-12)
    assert g.null_deviance > 0 and g.num_points == 40
    np.testing.assert_allclose(law.params, BIASED.params, rtol=1e-6)


def test_published_constants_evaluated_on_data():
    data = draw(PUBLISHED_MATH_LAW, 8)
    own = evaluate_law(PUBLISHED_MATH_LAW, *data)
    fitted = fit_scaling_law(*data, fix_bias_at_zero=True).goodness
    assert own.pseudo_r2 > 0.99
    assert fitted.log_likelihood >= own.log_likelihood > fitted.log_likelihood - 10.0
    other = evaluate_law(PUBLISHED_MATH_LAW, *draw(BIASED, 8))
    assert other.pseudo_r2 < 0.9 and other.brier > 10 * own.brier


def test_all_successes_are_separable():
    N, T, L, _, n = draw(BIASED, 9, num_points=20)
    with pytest.raises(ScalingFitError, match="separation"):
        fit_scaling_law(N, T, L, np.ones(20), n)
    law = fit_scaling_law(N, T, L, np.ones(20), n, l2=1.0)
    assert np.all(np.isfinite(law.params)) and np.all(law.predict(N, T, L) > 0.9)


def test_success_split_cleanly_by_size_is_separable():
    N, T, L, _, _ = draw(BIASED, 10, num_points=40)
    y = (N > 5.0).astype(float)
    with pytest.raises(ScalingFitError, match="separable"):
        fit_scaling_law(N, T, L, y)
    law = fit_scaling_law(N, T, L, y, l2=0.1)
    assert law.alpha > 0 and np.all(np.isfinite(law.params))


def test_single_model_size_cannot_fit_size_and_bias():
    N, T, L, y, n = draw(BIASED, 11, num_points=30)
    with pytest.raises(ScalingFitError, match=r"\['ln N'\] take a single value"):
        fit_scaling_law(np.full(30, 2.0), T, L, y, n)
    # without a bias term the size column is the intercept, which the data do determine
    fit_scaling_law(np.full(30, 2.0), T, L, y, n, fix_bias_at_zero=True)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(T=np.ones(5)), "equal lengths"),
        (dict(success=np.full(20, 1.5)), r"success must be rates in \[0, 1\]"),
        (dict(success=np.full(20, np.nan)), "success must be rates"),
        (dict(N=np.zeros(20)), "N must be > 0"),
        (dict(L=-np.ones(20)), "L must be >= 0"),
        (dict(num_problems=np.zeros(20)), "num_problems must be finite and > 0"),
        (dict(num_problems=np.ones(3)), "equal lengths"),
        (dict(N=np.ones((4, 5))), "N must be a 1-D array"),
        (dict(l2=-1.0), "l2 must be"),
        (dict(num_bootstrap=-1), "num_bootstrap must be >= 0"),
        (dict(num_bootstrap=10, confidence=1.0), r"confidence must be in \(0, 1\)"),
    ],
)
def test_bad_inputs_raise(change, match):
    N, T, L, y, n = draw(BIASED, 12, num_points=20)
    args = {**dict(N=N, T=T, L=L, success=y, num_problems=n), **change}
    kwargs = {k: args.pop(k) for k in ("l2", "num_bootstrap", "confidence") if k in args}
    with pytest.raises(ValueError, match=match):
        fit_scaling_law(**args, **kwargs)


def test_too_few_points():
    with pytest.raises(ValueError, match="need at least 4 points"):
        fit_scaling_law([1.0, 2.0, 3.0], [0.0, 1.0, 2.0], [1.0, 1.0, 2.0], [0.2, 0.5, 0.7])
