"""Clopper–Pearson (Eqs. 29–30) and ε_lower (Eq. 28)."""
import math

import numpy as np
import pytest
from scipy import stats

from pe_kit.audit.bounds import (
    calibrate_threshold,
    clopper_pearson,
    epsilon_lower_from_counts,
    evaluate_threshold,
)


def test_edge_cases_x0_and_xn():
    assert clopper_pearson(0, 100, 0.0025, "lower") == 0.0
    assert clopper_pearson(100, 100, 0.0025, "upper") == 1.0
    # closed forms: x = n → p_L = γ^(1/n); x = 0 → p_U = 1 − γ^(1/n)
    assert clopper_pearson(100, 100, 0.0025, "lower") == pytest.approx(0.0025 ** (1 / 100), rel=1e-12)
    assert clopper_pearson(0, 100, 0.0025, "upper") == pytest.approx(1 - 0.0025 ** (1 / 100), rel=1e-12)


def test_matches_scipy_binomtest_exact_interval():
    # a two-sided exact interval at level 1 − 2γ has the one-sided γ bounds as endpoints
    for x, n in [(3, 50), (17, 1000), (999, 1000)]:
        ci = stats.binomtest(x, n).proportion_ci(confidence_level=1 - 2 * 0.01, method="exact")
        assert clopper_pearson(x, n, 0.01, "lower") == pytest.approx(ci.low, rel=1e-9)
        assert clopper_pearson(x, n, 0.01, "upper") == pytest.approx(ci.high, rel=1e-9)


def test_vectorized_and_bad_input():
    out = clopper_pearson(np.array([0, 5, 10]), 10, 0.05, "upper")
    assert out.shape == (3,) and out[-1] == 1.0 and np.all(np.diff(out) > 0)
    with pytest.raises(ValueError, match="successes"):
        clopper_pearson(11, 10, 0.05, "lower")
    with pytest.raises(ValueError, match="gamma"):
        clopper_pearson(1, 10, 0.0, "lower")
    with pytest.raises(ValueError, match="side"):
        clopper_pearson(1, 10, 0.05, "middle")


def test_epsilon_branches_by_hand():
    n, g, d = 10**6, 0.0025, 1e-5
    eps, branch = epsilon_lower_from_counts(5000, 100, n, n, g, d)
    tpr_l = clopper_pearson(5000, n, g, "lower")
    fpr_u = clopper_pearson(100, n, g, "upper")
    assert branch == 1 and eps == pytest.approx(math.log((tpr_l - d) / fpr_u))
    # mirror image: few false negatives → branch 2
    eps2, branch2 = epsilon_lower_from_counts(n - 100, n - 5000, n, n, g, d)
    assert branch2 == 2 and eps2 == pytest.approx(eps)
    # no signal → clamped at 0
    assert epsilon_lower_from_counts(500, 500, 1000, 1000, g, d) == (0.0, 0)
    # numerator ≤ δ gives no bound
    assert epsilon_lower_from_counts(0, 0, 1000, 1000, g, 0.5)[0] == 0.0


def test_null_scores_give_zero_epsilon(rng):
    s0, s1 = rng.normal(size=20000), rng.normal(size=20000)
    cal = calibrate_threshold(s0, s1, 0.0025, 1e-5)
    test = evaluate_threshold(rng.normal(size=20000), rng.normal(size=20000), cal.threshold, 0.0025, 1e-5)
    assert test.epsilon_lower == 0.0


def test_calibrated_threshold_is_optimal_on_a_grid(rng):
    s0 = rng.normal(-0.5, 1, 50000)
    s1 = np.where(rng.random(50000) < 0.5, rng.normal(0.5, 1, 50000), rng.normal(-0.5, 1, 50000))
    cal = calibrate_threshold(s0, s1, 0.0025, 1e-5)
    grid = np.quantile(s0, np.linspace(0.5, 0.99999, 400))
    best_grid = max(evaluate_threshold(s0, s1, t, 0.0025, 1e-5).epsilon_lower for t in grid)
    assert cal.epsilon_lower >= best_grid - 1e-9
    with pytest.raises(ValueError, match="scores_h0"):
        calibrate_threshold(np.array([]), s1, 0.0025, 1e-5)
