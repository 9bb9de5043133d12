"""The law's functional form, its emergence threshold and its JSON form."""

import json
import math
import warnings

import numpy as np
import pytest

from agentic_jax.scaling import PUBLISHED_MATH_LAW, BootstrapIntervals, GoodnessOfFit, ScalingLaw

LAW = ScalingLaw(alpha=0.32, beta=0.41, gamma=0.08, bias=-0.5)


def test_predict_is_the_published_formula():
    N, T, L = 7.0, 4.0, 12.0
    logit = 0.32 * math.log(N) + 0.41 * math.sqrt(T) - 0.08 * L - 0.5
    assert LAW.predict(N, T, L) == pytest.approx(1.0 / (1.0 + math.exp(-logit)), rel=1e-12)
    assert isinstance(LAW.predict(N, T, L), float)


def test_predict_broadcasts_and_is_monotone():
    N = np.geomspace(0.1, 100.0, 7)
    p = LAW.predict(N, 1.0, 10.0)
    assert p.shape == (7,) and np.all(np.diff(p) > 0)
    assert np.all(np.diff(LAW.predict(1.0, np.linspace(0, 9, 5), 10.0)) > 0)
    assert np.all(np.diff(LAW.predict(1.0, 1.0, np.linspace(0, 50, 5))) < 0)
    assert LAW.predict(N[:, None], np.array([1.0, 4.0]), 10.0).shape == (7, 2)


def test_predict_saturates_without_overflow():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert LAW.predict(1.0, 0.0, 1e5) == 0.0
        assert LAW.predict(1e300, 1e6, 0.0) == 1.0


@pytest.mark.parametrize("p", [0.05, 0.5, 0.9])
def test_threshold_inverts_predict(p):
    T, L = np.array([0.0, 1.0, 9.0]), np.array([5.0, 20.0, 40.0])
    n_star = LAW.threshold_N(T, L, p)
    np.testing.assert_allclose(LAW.predict(n_star, T, L), p, rtol=1e-10)
    # emergence: above the threshold success exceeds p, below it falls short
    assert np.all(LAW.predict(n_star * 1.5, T, L) > p)
    assert np.all(LAW.predict(n_star / 1.5, T, L) < p)


def test_threshold_default_p_is_one_half_and_closed_form():
    n_star = PUBLISHED_MATH_LAW.threshold_N(1.0, 10.0)
    assert n_star == pytest.approx(math.exp((-0.41 + 0.8) / 0.32))
    assert PUBLISHED_MATH_LAW.predict(n_star, 1.0, 10.0) == pytest.approx(0.5)


def test_threshold_with_falling_success():
    law = ScalingLaw(alpha=-0.5, beta=0.0, gamma=0.0, bias=1.0)
    n_star = law.threshold_N(0.0, 0.0, 0.3)
    assert law.predict(n_star, 0.0, 0.0) == pytest.approx(0.3)


@pytest.mark.parametrize("p", [0.0, 1.0, -0.1, 2.0])
def test_threshold_rejects_p_outside_open_unit_interval(p):
    with pytest.raises(ValueError, match="p must be in"):
        LAW.threshold_N(1.0, 1.0, p)


def test_threshold_needs_a_size_effect():
    with pytest.raises(ValueError, match="alpha == 0"):
        ScalingLaw(0.0, 1.0, 1.0).threshold_N(1.0, 1.0)


@pytest.mark.parametrize(
    "N, T, L, match",
    [
        (0.0, 1.0, 1.0, "N must be > 0"),
        (-1.0, 1.0, 1.0, "N must be > 0"),
        (1.0, -1.0, 1.0, "T must be >= 0"),
        (1.0, 1.0, -2.0, "L must be >= 0"),
        (float("nan"), 1.0, 1.0, "N must be finite"),
        (1.0, 1.0, float("inf"), "L must be finite"),
    ],
)
def test_predict_rejects_bad_inputs(N, T, L, match):
    with pytest.raises(ValueError, match=match):
        LAW.predict(N, T, L)


def test_published_constants():
    assert PUBLISHED_MATH_LAW.params.tolist() == [0.32, 0.41, 0.08, 0.0]


def test_json_round_trip_keeps_intervals_and_goodness():
    law = ScalingLaw(
        0.3,
        0.4,
        0.07,
        0.1,
        intervals=BootstrapIntervals({"alpha": (0.2, 0.4)}, 0.95, 190, 10),
        goodness=GoodnessOfFit(-10.0, 2.0, 50.0, float("nan"), 0.01, 12),
    )
    text = json.dumps(law.to_dict(), allow_nan=False)
    back = ScalingLaw.from_dict(json.loads(text))
    assert back == law
    assert back.intervals == law.intervals
    assert back.goodness.num_points == 12 and math.isnan(back.goodness.pseudo_r2)
    assert ScalingLaw.from_dict(LAW.to_dict()).intervals is None


def test_from_dict_names_missing_keys():
    with pytest.raises(ValueError, match=r"missing keys \['gamma'\]"):
        ScalingLaw.from_dict({"alpha": 1, "beta": 1, "bias": 0})
    with pytest.raises(ValueError, match="expected a JSON object"):
        ScalingLaw.from_dict([1, 2, 3])
