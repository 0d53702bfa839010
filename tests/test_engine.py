"""Streaming trial engine (pe_kit.audit.engine): exact samplers, counts, seeds, calibration, expected curve,
the never-overclaim property of the calibrated audit (App. E.6), and the tightness table."""
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from pe_kit.audit import canary as audit_mod
from pe_kit.audit.accounting import epsilon_theory
from pe_kit.audit.bounds import (
    best_threshold_from_counts,
    calibrate_from_counts,
    epsilon_lower_from_counts,
)
from pe_kit.audit.engine import ThresholdGrid, TrialEngine, _audit_scalar, score_moments
from pe_kit.audit.expectations import expected_epsilon
from pe_kit.audit.moments import mixture_llr as mixture_llr_fn
from pe_kit.audit.samplers import _groups_numpy, _make_plan, _subset_tables, stream_seed
from pe_kit.audit.sweep import tightness_curve
from pe_kit.audit.trials import (
    ScalarProblem,
    nonce_problem,
    simulate_scores,
    simulate_scores_full,
)
from pe_kit.settings import AuditConfig, MechanismConfig
from tests.oracles import ParallelTrialEngine, engine_scores

EPS_THEORY = epsilon_theory(1.0, 0.1, 1e-5)  # 1.695 (design.md)


def _background_problem(k=300, q=0.1, shift=0.6, seed=0) -> ScalarProblem:
    rng = np.random.default_rng(seed)
    a = rng.exponential(0.02, k) * rng.choice([-1.0, 1.0], k)
    a[:3] = [0.3, -0.2, 0.25]  # a few heavy voters: a visibly non-Gaussian background
    return ScalarProblem(projections=a, canary_shift=shift, noise_sd=0.25, offset=0.1, sample_rate=q, n_users=2 * k)


# ------------------------------------------------------------------------------------------ exact samplers

@pytest.mark.parametrize("g,q", [(8, 0.1), (5, 0.37), (1, 0.5)])
def test_subset_tables_are_exact_product_bernoulli(g, q):
    """Each subset's share of the 62-bit positions equals q^|S|(1−q)^(g−|S|) to within 2⁻⁶², and every
    non-straddling lookup cell names the subset that owns it."""
    bnd, lut, order = _subset_tables(g, q)
    scale = 1 << 62
    edges = [0] + [int(b) for b in bnd] + [scale]
    qf = Fraction(q)
    for rank, subset in enumerate(order):
        k = bin(int(subset)).count("1")
        exact = qf ** k * (1 - qf) ** (g - k)
        assert abs(Fraction(edges[rank + 1] - edges[rank], scale) - exact) <= Fraction(1, scale)
    assert sorted(order.tolist()) == list(range(1 << g))
    cells = np.flatnonzero(lut >= 0)
    owner = order[np.searchsorted(bnd, cells.astype(np.uint64) << np.uint64(46), side="right")]
    np.testing.assert_array_equal(lut[cells], owner)
    assert (lut < 0).mean() < 0.01  # few straddles: the fallback is rare


@pytest.mark.parametrize("q", [0.1, 0.37])
def test_group_sampler_draws_the_product_bernoulli_law(q):
    """a_u = 2^u encodes the participating subset in the sum: χ² over all 256 subsets, per-user rates q,
    and no pairwise correlation (exact independence of the I_u)."""
    n = 400_000
    plan = _make_plan(ScalarProblem(2.0 ** np.arange(8), 0.0, 0.0, 0.0, q, 8), "groups", 8)
    subsets = _groups_numpy(plan, n, np.random.Generator(np.random.PCG64DXSM(7))).astype(np.int64)
    counts = np.bincount(subsets, minlength=256)
    pops = np.array([bin(i).count("1") for i in range(256)])
    expected = n * q ** pops * (1 - q) ** (8 - pops)
    keep = expected >= 10
    assert counts[~keep].sum() <= 10 * max(1.0, expected[~keep].sum())
    assert stats.chisquare(counts[keep], expected[keep] * counts[keep].sum() / expected[keep].sum()).pvalue > 1e-3
    bits = (subsets[:, None] >> np.arange(8)) & 1
    np.testing.assert_allclose(bits.mean(axis=0), q, atol=5 * np.sqrt(q * (1 - q) / n))
    corr = np.corrcoef(bits.T)[np.triu_indices(8, 1)]
    assert np.abs(corr).max() < 5 / np.sqrt(n)


def test_group_sampler_is_exact_across_groups():
    """Three groups per sub-batch (a_u = 2^u, u < 24, so the sum encodes every user): each group's subset
    law is product-Bernoulli and groups are independent — this exercises the exact redraw of trials that
    meet a straddling cell in several rows."""
    n, q = 300_000, 0.1
    plan = _make_plan(ScalarProblem(2.0 ** np.arange(24), 0.0, 0.0, 0.0, q, 24), "groups", 8)
    total = _groups_numpy(plan, n, np.random.Generator(np.random.PCG64DXSM(3))).astype(np.int64)
    pops = np.array([bin(i).count("1") for i in range(256)])
    expected = n * q ** pops * (1 - q) ** (8 - pops)
    keep = expected >= 10
    parts = [(total >> (8 * g)) & 255 for g in range(3)]
    for part in parts:
        counts = np.bincount(part, minlength=256)
        assert stats.chisquare(counts[keep], expected[keep] * counts[keep].sum() / expected[keep].sum()).pvalue > 1e-3
    k = np.vstack([pops[p] for p in parts])  # participants per group: uncorrelated across groups
    assert np.abs(np.corrcoef(k)[np.triu_indices(3, 1)]).max() < 5 / np.sqrt(n)


@pytest.mark.parametrize("hyp", [0, 1])
def test_samplers_agree_with_each_other_and_with_exact_moments(hyp):
    """groups, gaps and the legacy ``simulate_scores`` draw one distribution: KS between
    each pair and the exact mean/variance of the score (App. E.2)."""
    prob = _background_problem()
    n = 60_000
    mom = score_moments(prob)
    mean = mom["mean0"] if hyp == 0 else mom["mean1"]
    sd = mom["sd0"] if hyp == 0 else mom["sd1"]
    draws = {m: engine_scores(TrialEngine(prob, method=m, block_trials=1 << 14), hyp, n, seed=11)
             for m in ("groups", "gaps")}
    draws["legacy"] = simulate_scores(prob, hyp, n, np.random.default_rng(5))
    for name, s in draws.items():
        assert abs(s.mean() - mean) < 5 * sd / np.sqrt(s.size), name
        assert s.var() == pytest.approx(sd ** 2, rel=6 * np.sqrt(2 / s.size) + 0.01), name
        assert stats.skew(s) == pytest.approx(stats.skew(draws["legacy"]), abs=0.1), name
    for name in ("gaps", "legacy"):
        assert stats.ks_2samp(draws["groups"], draws[name]).pvalue > 1e-3, name


def test_engine_matches_full_histogram_path():
    """The scalar engine and the full p-dimensional histogram path (Alg. A.1 line 20) give the same score law."""
    rng = np.random.default_rng(3)
    n_users, p = 150, 40
    pop = sp.random(n_users, p, density=0.15, random_state=4, format="csr") * 0.03
    coords = np.arange(10)
    v_full = np.zeros(p)
    v_full[coords] = 0.1 / np.sqrt(10)
    w = rng.random(10) * 20
    m0 = rng.random(10) * 0.01
    from pe_kit.audit.trials import scalar_problem

    prob = scalar_problem(w, pop[:, coords], v_full[coords], m0, 0.1, 0.1)
    for hyp in (0, 1):
        full = simulate_scores_full(pop, v_full, coords, w, m0, 0.1, 0.1, hyp, 3000, np.random.default_rng(hyp))
        fast = engine_scores(TrialEngine(prob, method="groups"), hyp, 50_000, seed=hyp)
        assert stats.ks_2samp(fast, full).pvalue > 1e-3
        assert abs(fast.mean() - full.mean()) < 5 * full.std() / np.sqrt(full.size)


# ------------------------------------------------------------------------------------------ counts and seeds

def test_histogram_and_counts_are_the_trials_themselves():
    """``histogram``/``count_above`` reduce exactly the trials ``scores`` returns (same seed)."""
    prob = _background_problem(k=120)
    eng = TrialEngine(prob, block_trials=5000)
    n = 23_456  # not a multiple of the block
    grid = ThresholdGrid.for_problem(prob, n, resolution=64)
    for hyp in (0, 1):
        s = engine_scores(eng, hyp, n, seed=(4, 2))
        hist = eng.histogram(hyp, n, grid, seed=(4, 2))
        np.testing.assert_array_equal(hist, np.bincount(grid.bin_index(s), minlength=grid.size + 1))
        above = grid.counts_above(hist)
        for j in (0, grid.size // 3, grid.size // 2, grid.size - 1):
            assert above[j] == int((s > grid.thresholds[j]).sum())
        thr = float(np.quantile(s, 0.97))
        assert eng.count_above(hyp, n, thr, seed=(4, 2)) == int((s > thr).sum())


def test_results_depend_on_seed_only_not_on_workers():
    prob = _background_problem(k=64)
    grid = ThresholdGrid.for_problem(prob, 40_000, resolution=32)
    one = TrialEngine(prob, block_trials=4096).histogram(1, 40_000, grid, seed=9)
    for parallel in ("threads", "processes"):
        pooled = ParallelTrialEngine(prob, block_trials=4096, n_workers=2, parallel=parallel)
        np.testing.assert_array_equal(one, pooled.histogram(1, 40_000, grid, seed=9))
    assert one.sum() == 40_000
    other = TrialEngine(prob, block_trials=4096).histogram(1, 40_000, grid, seed=10)
    assert not np.array_equal(one, other)
    assert stream_seed(9, 0, 1).generate_state(2).tolist() == stream_seed(9, 0, 1).generate_state(2).tolist()
    assert stream_seed(9, 0, 1).generate_state(2).tolist() != stream_seed(9, 1, 0).generate_state(2).tolist()


def test_multinomial_counts_have_the_sampled_law():
    """Without background the bin counts are exactly Multinomial: both methods agree (χ² on coarse bins)
    and the test-split count has the Binomial mean."""
    prob = nonce_problem(1.0, 0.1)
    n = 200_000
    grid = ThresholdGrid(start=-3.0, step=0.25, size=25)
    for hyp in (0, 1):
        sampled = TrialEngine(prob, method="sample").histogram(hyp, n, grid, seed=1)
        exact = TrialEngine(prob, method="multinomial").histogram(hyp, n, grid, seed=2)
        assert sampled.sum() == exact.sum() == n
        table = np.vstack([sampled, exact])
        table = table[:, table.min(axis=0) >= 5]
        assert stats.chi2_contingency(table).pvalue > 1e-3
    mc = [TrialEngine(prob, method="multinomial").count_above(1, n, 1.0, seed=s) for s in range(40)]
    p1 = 0.9 * stats.norm.sf(1.5) + 0.1 * stats.norm.sf(0.5)
    assert np.mean(mc) == pytest.approx(n * p1, rel=5 * np.sqrt((1 - p1) / (n * p1 * 40)))


# ------------------------------------------------------------------------------------------ calibration

def test_best_threshold_pruning_equals_full_scan():
    rng = np.random.default_rng(0)
    for trial in range(30):
        n = int(rng.choice([200, 5000, 10**6]))
        m = 300
        shift = rng.choice([0.0, 0.5, 2.0])
        s0, s1 = np.sort(rng.normal(0, 1, 2000)), np.sort(rng.normal(shift, 1, 2000))
        thr = np.linspace(-4, 6, m)
        fp = np.round(n * (1 - np.searchsorted(s0, thr) / 2000)).astype(np.int64)
        tp = np.round(n * (1 - np.searchsorted(s1, thr) / 2000)).astype(np.int64)
        eps, _ = epsilon_lower_from_counts(tp, fp, n, n, 0.0025, 1e-5)
        idx, best = best_threshold_from_counts(tp, fp, n, n, 0.0025, 1e-5)
        if eps.max() <= 0:
            assert (idx, best) == (-1, 0.0)
        else:
            assert idx == int(np.argmax(eps)) and best == pytest.approx(eps.max(), rel=1e-12)
    cal = calibrate_from_counts([0.0, 1.0, 2.0], [10, 10, 10], [9, 5, 1], 10, 10, 0.0025, 1e-5)
    assert cal.threshold in (0.0, 1.0, 2.0)
    with pytest.raises(ValueError, match="ascending"):
        calibrate_from_counts([1.0, 0.0], [1, 1], [1, 1], 10, 10, 0.0025, 1e-5)
    with pytest.raises(ValueError, match="true_pos"):
        best_threshold_from_counts([1, 2], [1], 10, 10, 0.0025, 1e-5)


def test_grid_covers_both_tails_at_the_requested_resolution():
    prob = nonce_problem(1.0, 0.1)
    grid = ThresholdGrid.for_problem(prob, 10**9)
    mom = score_moments(prob)
    assert grid.step == pytest.approx(mom["sd0"] / 256)
    z = stats.norm.isf(0.5e-9) + 2
    assert grid.thresholds[0] <= mom["mean0"] - z * mom["sd0"] + grid.step
    assert grid.thresholds[-1] >= mom["mean_inc"] + z * mom["sd0"] - grid.step
    np.testing.assert_allclose(grid.counts_above(np.array([1] * (grid.size + 1))), np.arange(grid.size, 0, -1))
    with pytest.raises(ValueError, match="resolution"):
        ThresholdGrid.for_problem(prob, 100, resolution=0)
    with pytest.raises(ValueError, match="step"):
        ThresholdGrid(0.0, 0.0, 3)


def test_expected_curve_reference_values():
    """μ_eff = 1, q = 0.1, γ = 0.0025, δ = 1e-5 (issue 6): ≈0.99 at 10⁶, 1.35 at 10⁷, 1.56 at 10⁸, 1.64 at
    10⁹, and the n → ∞ limit just below ε_theory = 1.695."""
    ref = {10**6: 0.990, 10**7: 1.349, 10**8: 1.556, 10**9: 1.641}
    for n, value in ref.items():
        assert expected_epsilon(1.0, 0.1, n) == pytest.approx(value, abs=0.003)
    limit = expected_epsilon(1.0, 0.1, None)
    assert 1.67 < limit <= EPS_THEORY
    curve = [expected_epsilon(1.0, 0.1, n) for n in (10**4, 10**5, 10**6, 10**7)]
    assert np.all(np.diff(curve) > 0)
    assert expected_epsilon(0.5, 0.1, 10**6) < expected_epsilon(1.0, 0.1, 10**6)
    with pytest.raises(ValueError, match="mu_eff"):
        expected_epsilon(0.0, 0.1, 100)


def test_perfect_canary_audit_at_one_million_trials():
    """μ_eff = 1/σ, 10⁶ per-trial samples per hypothesis (design.md: median ≈ 0.96, 0.72–1.32 over seeds),
    always below ε_theory; the threshold sits in the upper tail (branch 1, FPR ~ 10⁻⁵)."""
    runs = [_audit_scalar(nonce_problem(1.0, 0.1), trials=10**6, gamma=0.0025, delta=1e-5, seed=s, method="sample")
            for s in range(3)]
    eps = np.array([r.epsilon_lower for r in runs])
    assert 0.8 <= np.median(eps) <= 1.15 and np.all((eps > 0.3) & (eps <= EPS_THEORY))
    for res in runs:
        assert res.calibration.n_h0 == res.n_h1 == 10**6
        assert res.threshold == res.calibration.threshold and res.branch == 1
        assert 1e-6 < res.fpr < 1e-3 and res.info["sampler"] == "sample"


def test_audit_never_overclaims():
    """A null canary (w·v = 0: H0 ≡ H1) over 200 seeded audits: ε_lower > 0 in at most α of them (one-sided
    binomial test), and ε_lower ≤ ε_theory in every audit, null or perfect (App. E.6)."""
    alpha, gamma = 0.05, 0.05 / 20
    null = ScalarProblem(projections=_background_problem(k=40).projections, canary_shift=0.0, noise_sd=0.25,
                         offset=0.0, sample_rate=0.1, n_users=80)
    eps = np.array([_audit_scalar(null, trials=20_000, gamma=gamma, delta=1e-5, seed=s, resolution=24).epsilon_lower
                    for s in range(200)])
    positive = int((eps > 0).sum())
    assert positive / eps.size <= alpha
    assert stats.binomtest(positive, eps.size, alpha, alternative="greater").pvalue > 0.05
    assert np.all(eps <= EPS_THEORY)
    perfect = [_audit_scalar(nonce_problem(1.0, 0.1), trials=100_000, gamma=gamma, delta=1e-5, seed=s,
                            method="multinomial").epsilon_lower for s in range(40)]
    assert np.all(np.array(perfect) <= EPS_THEORY) and np.median(perfect) > 0.3


def test_audit_canary_uses_streaming_engine_above_threshold(monkeypatch):
    monkeypatch.setattr(audit_mod, "STREAMING_MIN_TRIALS", 1000)
    v_full = np.zeros(100)
    v_full[:64] = 0.1 / 8
    empty = sp.csr_matrix((20, 100))
    mech = MechanismConfig()
    runs = [audit_mod._audit_canary(v_full, np.arange(64), empty, empty, empty, mech, AuditConfig(trials=200_000),
                                   np.random.default_rng(3)) for _ in range(2)]
    a, b = runs
    assert a.epsilon_lower == b.epsilon_lower and a.threshold == b.threshold  # same rng → same numbers
    assert a.n_h0 == a.calibration.n_h1 == a.info["trials"] == 200_000
    assert a.mu_eff == pytest.approx(1.0, abs=1e-6) and 0.2 < a.epsilon_lower <= a.epsilon_theory
    assert a.info["threshold_mix"] == pytest.approx(mixture_llr_fn(a.threshold, 0.1))


def test_tightness_curve_table():
    df = tightness_curve({"nonce": 1.0, "weak": nonce_problem(0.6, 0.1)}, trials=(10**4, 10**6, 10**8),
                         sample_rate=0.1, n_canaries=2, max_simulated_trials=10**6, seed=1)
    assert len(df) == 2 * 2 * 3
    assert set(df.columns) >= {"attack", "canary", "trials", "epsilon_lower", "epsilon_theory", "epsilon_expected",
                               "mu_eff", "ratio_to_theory"}
    assert np.allclose(df.epsilon_theory, EPS_THEORY)
    nonce = df[df.attack == "nonce"]
    assert np.allclose(nonce[nonce.trials == 10**8].epsilon_expected, expected_epsilon(1.0, 0.1, 10**8))
    assert nonce[nonce.trials == 10**8].epsilon_lower.isna().all()  # above max_simulated_trials
    sim = df[df.simulated]
    assert (sim.method == "multinomial").all() and (sim.epsilon_lower <= sim.epsilon_theory).all()
    at_1e6 = nonce[nonce.trials == 10**6].epsilon_lower
    assert 0.7 < at_1e6.max() < 1.4 and (at_1e6 > 0.2).all()  # max over canaries, as the paper reports
    weak = df[(df.attack == "weak") & (df.trials == 10**6)]
    assert weak.mu_eff.iloc[0] == pytest.approx(0.6) and (weak.epsilon_lower < at_1e6.max()).all()


def test_bad_inputs_raise_value_errors_naming_the_field():
    prob = nonce_problem(1.0, 0.1)
    with pytest.raises(ValueError, match="method"):
        TrialEngine(prob, method="magic")
    with pytest.raises(ValueError, match="multinomial"):
        TrialEngine(_background_problem(k=10), method="multinomial")
    with pytest.raises(ValueError, match="group_size"):
        TrialEngine(prob, group_size=20)
    with pytest.raises(ValueError, match="hypothesis"):
        TrialEngine(prob).count_above(2, 10, 0.0, seed=0)
    with pytest.raises(ValueError, match="n_trials"):
        TrialEngine(prob).count_above(0, 0, 0.0, seed=0)
    with pytest.raises(ValueError, match="seed"):
        TrialEngine(prob).count_above(0, 10, 0.0, seed=-1)
    with pytest.raises(ValueError, match="gamma"):
        _audit_scalar(prob, trials=10, gamma=0.0, delta=1e-5, seed=0)
    with pytest.raises(ValueError, match="sample_rate"):
        TrialEngine(ScalarProblem(np.zeros(0), 1.0, 1.0, 0.5, 0.0, 0))
    with pytest.raises(ValueError, match="sample_rate"):
        tightness_curve({"x": 1.0}, trials=(100,))
    with pytest.raises(ValueError, match="mu_eff"):
        nonce_problem(-1.0, 0.1)


def test_audit_scalar_picks_exact_multinomial_only_where_exact():
    from pe_kit.audit.engine import exact_method

    nonce, background = nonce_problem(1.0, 0.1), _background_problem(k=10)
    assert exact_method("auto", nonce, nonce) == "multinomial"
    assert exact_method("auto", nonce, background) == "auto"  # one split has background voters
    assert exact_method("sample", nonce) == "sample"  # an explicit choice is kept
    res = _audit_scalar(nonce, trials=20_000, gamma=0.0025, delta=1e-5, seed=3)
    assert res.info["sampler"] == "multinomial" and res.calibration.n_h0 == res.n_h1 == 20_000
    assert _audit_scalar(background, trials=2_000, gamma=0.0025, delta=1e-5, seed=3).info["sampler"] in ("groups", "gaps")


def test_tiled_group_sampler_partial_tiles_keep_the_exact_mean():
    """Blocks that are not a multiple of the cache tile (and shorter than one) keep E[Σ I_u a_u] = qΣa."""
    prob = _background_problem(k=37)
    for t in (1, 5000, (1 << 14) + 3):
        s = engine_scores(TrialEngine(prob, method="groups", block_trials=t), 0, 3 * t, seed=4)
        assert s.shape == (3 * t,) and np.isfinite(s).all()
    s = engine_scores(TrialEngine(prob, method="groups", block_trials=(1 << 14) + 3), 0, 200_000, seed=5)
    mom = score_moments(prob)
    assert abs(s.mean() - mom["mean0"]) < 5 * mom["sd0"] / np.sqrt(s.size)
