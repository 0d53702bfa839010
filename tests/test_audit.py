"""Audit statistics: moments (Eqs. 31–35), LLR and μ_eff (Eqs. 14–16, 20), mixture (Eqs. 22–23),
and the calibrated ε_lower on simulated nonce-like canaries (§2.1, App. E.6)."""
import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from pe_kit.audit.accounting import epsilon_theory
from pe_kit.audit.canary import _audit_canary
from pe_kit.audit.moments import (
    aux_moments,
    llr,
    llr_weights,
    mixture_llr,
    mu_eff,
    null_moments,
)
from pe_kit.audit.trials import scalar_problem, simulate_scores
from pe_kit.settings import AuditConfig, MechanismConfig

MECH = MechanismConfig()


def _nonce_canary(p=100, r=64, c=0.1):
    v = np.zeros(p)
    v[:r] = c / np.sqrt(r)
    return v, np.arange(r)


def test_aux_moments_shrinkage_by_hand():
    aux = np.array([[1.0, 2.0], [3.0, 0.0]])
    m = aux_moments(aux, shrinkage=0.1)
    np.testing.assert_allclose(m.mean, [2.0, 1.0])
    second = aux.T @ aux / 2  # [[5, 1], [1, 2]]
    np.testing.assert_allclose(m.second_moment, [[5.0, 0.9], [0.9, 2.0]])
    assert second[0, 1] == 1.0
    m0, sigma = null_moments(m, 10, MECH, ridge=1e-9)
    np.testing.assert_allclose(m0, 0.1 * 10 * np.array([2.0, 1.0]))
    expected = 0.1 * 0.9 * 10 * np.array([[5.0, 0.9], [0.9, 2.0]]) + (0.01 + 1e-9) * np.eye(2)
    np.testing.assert_allclose(sigma, expected)
    with pytest.raises(ValueError, match="aux"):
        aux_moments(np.zeros((0, 2)))


def test_zero_background_full_norm_gives_mu_eff_one_over_sigma():
    for sigma_mult in (0.5, 1.0, 2.0):
        mech = MechanismConfig(noise_multiplier=sigma_mult)
        v, _ = _nonce_canary()
        v = v[:64]
        m0, sigma = null_moments(aux_moments(np.zeros((5, 64))), 1000, mech)
        assert mu_eff(v, sigma) == pytest.approx(1 / sigma_mult, rel=1e-6)


def test_mu_eff_never_exceeds_ceiling_with_background(rng):
    aux = sp.random(200, 30, density=0.2, random_state=1) * 0.01
    m0, sigma = null_moments(aux_moments(aux), 1000, MECH)
    for _ in range(20):
        v = rng.random(30)
        v *= 0.1 / np.linalg.norm(v)
        assert mu_eff(v, sigma) <= 1 / MECH.noise_multiplier + 1e-9


def test_llr_is_linear_closed_form(rng):
    a = rng.random((4, 4))
    sigma = a @ a.T + np.eye(4)
    v, m0, y = rng.random(4), rng.random(4), rng.random((3, 4))
    w = np.linalg.solve(sigma, v)
    np.testing.assert_allclose(llr(y, v, m0, sigma), (y - m0 - v / 2) @ w)
    # log-density difference of the two Gaussians (Eq. 14 derivation)
    d1 = stats.multivariate_normal(m0 + v, sigma).logpdf(y) - stats.multivariate_normal(m0, sigma).logpdf(y)
    np.testing.assert_allclose(llr(y, v, m0, sigma), d1, rtol=1e-10)


def test_mixture_identity_and_monotone():
    ell = np.linspace(-20, 20, 101)
    q = 0.1
    np.testing.assert_allclose(mixture_llr(ell, q), np.log((1 - q) + q * np.exp(ell)), rtol=1e-12, atol=1e-15)
    assert np.all(np.diff(mixture_llr(ell, q)) > 0)
    assert mixture_llr(1000.0, q) == pytest.approx(np.log(q) + 1000.0)
    with pytest.raises(ValueError, match="sample_rate"):
        mixture_llr(0.0, 0.0)


def test_simulated_scores_match_gaussian_closed_form(rng):
    v, coords = _nonce_canary()
    v = v[coords]
    m0, sigma = null_moments(aux_moments(np.zeros((5, 64))), 100, MECH)
    w = llr_weights(v, sigma)
    prob = scalar_problem(w, sp.csr_matrix((100, 64)), v, m0, MECH.noise_std, 1.0)  # q=1: always included
    mu = mu_eff(v, sigma)
    s0 = simulate_scores(prob, 0, 50000, rng)
    s_inc = simulate_scores(prob, 1, 50000, rng)
    assert stats.kstest(s0, stats.norm(-mu**2 / 2, mu).cdf).pvalue > 1e-3
    assert stats.kstest(s_inc, stats.norm(mu**2 / 2, mu).cdf).pvalue > 1e-3


def test_tpr_minus_fpr_equals_q_times_inclusion_gap(rng):
    v, coords = _nonce_canary()
    v = v[coords]
    q, n = 0.1, 400_000
    m0, sigma = null_moments(aux_moments(np.zeros((5, 64))), 100, MECH)
    w = llr_weights(v, sigma)
    prob = scalar_problem(w, sp.csr_matrix((100, 64)), v, m0, MECH.noise_std, q)
    s0, s1 = simulate_scores(prob, 0, n, rng), simulate_scores(prob, 1, n, rng)
    a = 0.7
    fpr, tpr = (s0 > a).mean(), (s1 > a).mean()
    mu = mu_eff(v, sigma)
    tpr_inc = 1 - stats.norm.cdf((a - mu**2 / 2) / mu)  # Eq. 19
    assert tpr - fpr == pytest.approx(q * (tpr_inc - fpr), abs=4 * np.sqrt(2 * 0.25 / n))


def test_null_canary_gives_zero(rng):
    """A canary with no signal on P: identical score distributions → ε_lower = 0 (every seed)."""
    background = sp.random(300, 40, density=0.1, random_state=2, format="csr") * 0.02
    v_full = np.zeros(80)
    v_full[40:] = 0.1 / np.sqrt(40)  # votes only outside P = 0..39
    for seed in range(5):
        res = _audit_canary(v_full, np.arange(40), sp.hstack([background, sp.csr_matrix((300, 40))]).tocsr()[:100],
                           sp.hstack([background, sp.csr_matrix((300, 40))]).tocsr()[100:200],
                           sp.hstack([background, sp.csr_matrix((300, 40))]).tocsr()[200:],
                           MECH, AuditConfig(trials=20000), np.random.default_rng(seed))
        assert res.epsilon_lower == 0.0 and res.mu_eff == 0.0


def test_nonce_canary_one_million_trials_matches_expectation():
    """μ_eff = 1 (σ=1, q=0.1), 10⁶ trials per hypothesis: ε_lower ∈ [0.7, 1.35] every seed, median ∈ [0.85, 1.1]."""
    v_full, coords = _nonce_canary()
    empty, population = sp.csr_matrix((50, 100)), sp.csr_matrix((1000, 100))
    eps_theory = epsilon_theory(1.0, 0.1, 1e-5)
    results = [_audit_canary(v_full, coords, empty, population, population, MECH,
                            AuditConfig(trials=1_000_000), np.random.default_rng(seed)) for seed in range(5)]
    eps = np.array([r.epsilon_lower for r in results])
    assert all(r.mu_eff == pytest.approx(1.0, abs=1e-6) for r in results)
    assert np.all((eps >= 0.7) & (eps <= 1.35)), eps
    assert 0.85 <= np.median(eps) <= 1.1, eps
    assert np.all(eps <= eps_theory)
    assert all(r.epsilon_theory == pytest.approx(1.695, abs=0.003) for r in results)


def test_same_seed_same_numbers():
    v_full, coords = _nonce_canary()
    empty = sp.csr_matrix((10, 100))
    a = _audit_canary(v_full, coords, empty, empty, empty, MECH, AuditConfig(trials=5000), np.random.default_rng(7))
    b = _audit_canary(v_full, coords, empty, empty, empty, MECH, AuditConfig(trials=5000), np.random.default_rng(7))
    assert a.epsilon_lower == b.epsilon_lower and a.threshold == b.threshold


def test_calibration_and_test_splits_must_have_equal_size():
    """No resampling: a calibration split of another size is refused, naming the keys and the fix."""
    v_full, coords = _nonce_canary()
    with pytest.raises(ValueError, match=r"n_calibration=50 but n_test=1000.*--set n_calibration=1000"):
        _audit_canary(v_full, coords, sp.csr_matrix((10, 100)), sp.csr_matrix((50, 100)), sp.csr_matrix((1000, 100)),
                     MECH, AuditConfig(trials=1000), np.random.default_rng(0))


def test_population_shift_flags_disjoint_fpr_intervals():
    """bounds.population_shift: equal FPRs are not flagged; a 10× FPR on test is."""
    from pe_kit.audit.bounds import evaluate_threshold, population_shift

    rng = np.random.default_rng(3)
    h0, h1 = rng.normal(0, 1, 100_000), rng.normal(1, 1, 100_000)
    cal = evaluate_threshold(h0, h1, 2.5, 0.0025, 1e-5)
    same = evaluate_threshold(rng.normal(0, 1, 100_000), h1, 2.5, 0.0025, 1e-5)
    shifted = evaluate_threshold(rng.normal(0.8, 1, 100_000), h1, 2.5, 0.0025, 1e-5)
    assert population_shift(cal, same, 0.0025)["population_shift"] is False
    out = population_shift(cal, shifted, 0.0025)
    assert out["population_shift"] is True and out["fpr_test"] > 5 * out["fpr_calibration"]
    assert out["fpr_calibration_lower"] <= out["fpr_calibration"] <= out["fpr_calibration_upper"]
