"""The scalar projection draws the same score distribution as the full-histogram path (design.md)."""
import numpy as np
import pytest
from scipy import stats

from pe_kit.audit.moments import aux_moments, llr_weights, null_moments, restrict
from pe_kit.audit.trials import (
    background_sums,
    scalar_problem,
    simulate_scores,
    simulate_scores_full,
)
from pe_kit.settings import MechanismConfig
from pe_kit.study.world import canary_contribution, make_design


def test_background_sums_exact_moments(rng):
    a = rng.random(50)
    q, n = 0.1, 200_000
    s = background_sums(a, q, n, rng)
    assert abs(s.mean() - q * a.sum()) < 5 * np.sqrt(q * (1 - q) * (a**2).sum() / n)
    assert np.var(s) == pytest.approx(q * (1 - q) * (a**2).sum(), rel=0.02)
    # participation of one user: Bernoulli(q) exactly
    one = background_sums(np.array([1.0]), q, n, rng)
    assert set(np.unique(one)) <= {0.0, 1.0} and abs(one.mean() - q) < 5 * np.sqrt(q * (1 - q) / n)


def test_scalar_and_full_paths_agree_on_real_contributions(tiny_world):
    mech = MechanismConfig(record_cap=16)
    design = make_design(tiny_world, "ordinary", 0, np.random.default_rng(0))
    v_full = canary_contribution(tiny_world, design, mech)
    coords = np.flatnonzero(v_full)
    test = tiny_world.contributions("test", mech, design)
    aux = tiny_world.contributions("aux", mech, design)
    m0, sigma = null_moments(aux_moments(restrict(aux, coords)), test.shape[0], mech)
    w = llr_weights(v_full[coords], sigma)
    prob = scalar_problem(w, restrict(test, coords), v_full[coords], m0, mech.noise_std, mech.sample_rate)
    assert prob.projections.size > 0  # real background voters on the canary's coordinates
    for hyp in (0, 1):
        fast = simulate_scores(prob, hyp, 40_000, np.random.default_rng(hyp))
        full = simulate_scores_full(test, v_full, coords, w, m0, mech.noise_std, mech.sample_rate, hyp, 4000,
                                    np.random.default_rng(10 + hyp))
        assert stats.ks_2samp(fast, full).pvalue > 1e-3
        assert abs(fast.mean() - full.mean()) < 5 * full.std() / np.sqrt(4000)
