"""One-run audits (issue 16): the two bounds against closed forms and Monte-Carlo references, the null run,
the multi-canary design, and one PE release on a synthetic world."""
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import special, stats

from pe_kit.audit.one_run import (
    abstaining_guesses,
    epsilon_from_mu,
    epsilon_lower_steinke,
    fdp_rejects,
    guess_pairs,
    idealised_scores,
    mu_lower_fdp,
    _one_run_audit,
    steinke_p_value,
)
from pe_kit.audit.one_run_bounds import _FastInverseBlowup
from pe_kit.settings import MechanismConfig
from steps.one_run_design import OneRunDesign, design_one_run, max_canaries
from tests.oracles import tradeoff_inverse_blowup


# ------------------------------------------------------------------------------------------ Steinke et al.

@pytest.mark.parametrize("r", [10, 100, 1000])
def test_steinke_all_correct_matches_theorem_closed_form(r):
    # Thm 3.1 at δ = 0 with v = r: p-value = p_ε^r, so ε_lower = logit(β^{1/r}); r = 100 gives 3.493
    eps = epsilon_lower_steinke(r, r, r, 0.0, 0.05)
    assert eps == pytest.approx(special.logit(0.05 ** (1 / r)), abs=1e-5)
    if r == 100:
        assert eps == pytest.approx(3.493, abs=1e-3)


def test_steinke_p_value_delta_term_against_direct_sum():
    m, r, v, eps, delta = 500, 120, 80, 0.7, 1e-4
    p = special.expit(eps)
    alpha = max(sum(stats.binom.pmf(v - j, r, p) for j in range(1, i + 1)) / i for i in range(1, v + 1))
    want = stats.binom.sf(v - 1, r, p) + 2 * m * delta * alpha
    assert steinke_p_value(m, r, v, eps, delta) == pytest.approx(want, rel=1e-10)
    assert epsilon_lower_steinke(m, r, v, delta, 0.05) < epsilon_lower_steinke(m, r, v, 0.0, 0.05)
    with pytest.raises(ValueError, match="v=9 ≤ guesses r=8"):
        steinke_p_value(10, 8, 9, 1.0, 0.0)


def test_steinke_randomized_response_monte_carlo():
    # the bound is tight for ε0-randomized response (each guess right w.p. e^ε0/(1+e^ε0)): at m = r = 10⁴ guesses
    # the median ε_lower is logit(p − z_{0.95}·sd) with sd = √(p(1−p)/m) (normal approx. of the Binomial tail)
    rng = np.random.default_rng(0)
    m, eps0 = 10_000, 2.0
    p = special.expit(eps0)
    got = np.median([epsilon_lower_steinke(m, m, int(v), 0.0, 0.05) for v in rng.binomial(m, p, 41)])
    want = special.logit(p - stats.norm.isf(0.05) * np.sqrt(p * (1 - p) / m))
    assert want == pytest.approx(1.950, abs=1e-3)
    assert got == pytest.approx(want, abs=0.03)  # MC sd of the median ≈ 0.01


# ------------------------------------------------------------------------------------------ Mahloujifar et al.

def _blowup(x, mu, q):
    """1 − C_q(G_μ)(x) by brute force: the lower convex envelope of min(f_q, f_q⁻¹) on a grid."""
    xs = np.linspace(0, 1, 20001)
    fq = q * stats.norm.cdf(stats.norm.ppf(1 - xs) - mu) + (1 - q) * (1 - xs)
    # f_q⁻¹ on the grid by interpolation of the decreasing curve
    finv = np.interp(xs, fq[::-1], xs[::-1])
    low = np.minimum(fq, finv)
    # lower convex hull
    hull = []
    for pt in zip(xs, low):
        while len(hull) >= 2 and (hull[-1][0] - hull[-2][0]) * (pt[1] - hull[-2][1]) - \
                (hull[-1][1] - hull[-2][1]) * (pt[0] - hull[-2][0]) <= 0:
            hull.pop()
        hull.append(pt)
    hx, hy = np.array(hull).T
    return 1 - np.interp(x, hx, hy)


@pytest.mark.parametrize("q", [1.0, 0.3, 0.1])
def test_inverse_blowup_inverts_the_subsampled_gaussian_tradeoff(q):
    mu = 1.3
    y = np.array([1e-4, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99])
    x = tradeoff_inverse_blowup(y, mu, q)
    assert np.allclose(_blowup(x, mu, q), y, atol=2e-4)
    if q < 1:  # the form fdp_rejects uses
        assert np.allclose(_blowup(_FastInverseBlowup(np.full(y.shape, mu), q)(y), mu, q), y, atol=2e-4)
    if q == 1.0:
        assert np.allclose(x, stats.norm.cdf(stats.norm.ppf(y) - mu), atol=1e-12)


def test_fdp_at_vanishing_mu_is_never_looser_than_the_fair_coin_test():
    # μ → 0 (perfect privacy): every rejection must also be a rejection of the exact Binomial(r, ½) test, and
    # the critical count is within one of it
    beta = 0.05
    for m, r in ((100, 100), (100, 40), (1000, 200)):
        vs = np.arange(r + 1)
        rec = np.array([fdp_rejects(m, r, int(v), np.array([1e-9]), beta)[0] for v in vs])
        exact = stats.binom.sf(vs - 1, r, 0.5) <= beta
        assert not (rec & ~exact).any()
        assert vs[rec].min() - vs[exact].min() in (0, 1)


def test_fdp_is_tighter_than_steinke_on_the_gaussian_game():
    # Mahloujifar et al.'s claim (their §6 comparisons): on the same guesses of a Gaussian mechanism the f-DP
    # bound is higher than Steinke et al.'s; μ = 2, m = 1000 (ε_theory = 8.4 at δ = 1e-5)
    wins = 0
    for seed in range(5):
        s, inc = idealised_scores(2.0, 1.0, 1000, np.random.default_rng(seed))
        res = _one_run_audit(s, inc, delta=1e-5, sample_rate=1.0)
        assert 0 < res["steinke"].epsilon_lower and res["fdp"].epsilon_lower < epsilon_from_mu(2.0, 1.0, 1e-5)
        assert res["fdp"].info["mu_lower"] < 2.0
        wins += res["fdp"].epsilon_lower > res["steinke"].epsilon_lower
    assert wins == 5


def test_epsilon_from_mu_matches_the_accountant():
    # μ-GDP closed form at q = 1 (the kit's PRV accountant gives 4.387 with its 0.01 discretisation error)
    assert epsilon_from_mu(1.0, 1.0, 1e-5) == pytest.approx(4.3772, abs=1e-3)
    assert epsilon_from_mu(1.0, 0.1, 1e-5) == pytest.approx(1.695 - 0.01, abs=1e-3)  # PRV minus its error
    assert epsilon_from_mu(0.0, 0.1, 1e-5) == 0.0


# ------------------------------------------------------------------------------------------ guesses, null run

def test_abstaining_guesser_counts():
    scores = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0])
    inc = np.array([True, True, False, False, True, False])
    assert abstaining_guesses(scores, inc, 2, 0) == (2, 2)
    assert abstaining_guesses(scores, inc, 3, 2) == (5, 3)  # top 3: 2 right; bottom 2: 1 right
    with pytest.raises(ValueError, match="k_plus"):
        abstaining_guesses(scores, inc, 4, 3)
    assert guess_pairs(100) == sorted({(1, 0), (2, 0), (5, 0), (10, 0), (20, 0), (35, 0), (50, 0), (1, 1), (2, 2),
                                        (5, 5), (10, 10), (20, 20), (35, 35), (50, 50)})


@pytest.mark.parametrize("q", [1.0, pytest.param(0.1, marks=pytest.mark.slow)])
def test_null_run_gives_zero_in_at_least_95_percent_of_200_repeats(q):
    # issue 16: canaries with no signal give ε_lower = 0 in ≥ 95 % of ≥ 200 repeats, both bounds; at q = 0.1 the
    # f-DP bound searches the subsampled family C_q(G_μ) (about a minute: marked slow)
    zeros = {"steinke": 0, "fdp": 0}
    for rep in range(200):
        s, inc = idealised_scores(0.0, q, 100, np.random.default_rng([7, rep]))
        s = s + np.random.default_rng([8, rep]).normal(size=s.size)  # scores with no signal, no ties
        for method, a in _one_run_audit(s, inc, delta=1e-5, sample_rate=q).items():
            assert a.info["sample_rate"] == q
            zeros[method] += a.epsilon_lower == 0
    assert zeros["steinke"] >= 190 and zeros["fdp"] >= 190, zeros


# ------------------------------------------------------------------------------------------ design and PE release

class _Encoder:
    """Deterministic fake encoder (d = 16): a unit vector per text from its SHA-256; nonce strings (they contain
    spaces) live in dimensions 8–15, the users' texts in 0–7 — as nonce strings sit far from natural text."""

    def encode(self, texts, desc=None):
        import hashlib

        out = np.zeros((len(texts), 16))
        for i, t in enumerate(texts):
            g = np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)).normal(size=8)
            out[i, 8:] = g if " " in t else 0.0
            out[i, :8] = 0.0 if " " in t else g
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def test_max_canaries_and_design_blocks():
    assert max_canaries(8192, 0.5, 5) == 819 and max_canaries(256, 1.0, 5, 2) == 25
    with pytest.raises(ValueError, match="probe_share"):
        max_canaries(256, 0.0)
    d = design_one_run(_Encoder(), 200, 20, np.random.default_rng(0), copies=5, records_per_canary=2)
    assert isinstance(d, OneRunDesign) and d.m == 20 and d.n_probes == 200 and d.probe_share == 1.0
    assert np.unique(d.blocks).size == d.blocks.size  # disjoint blocks
    bank = d.bank(np.zeros((200, 16), np.float32))
    for i in (0, 7):
        for j in range(10):
            assert np.array_equal(bank[d.blocks[i, j]], d.canary_embeddings[2 * i + j // 5])
    with pytest.raises(ValueError, match="do not fit"):
        design_one_run(_Encoder(), 100, 21, np.random.default_rng(0))


def _world(n_test=300, n_aux=150, p=600, seed=0):
    rng = np.random.default_rng(seed)
    enc = _Encoder()

    def users(n, tag):
        emb = enc.encode([f"{tag}-{u}-{j}" for u in range(n) for j in range(4)])
        return {"emb": emb, "owner": np.repeat(np.arange(n), 4), "ids": [f"{tag}{u}" for u in range(n)]}

    bank = rng.normal(size=(p, 16)).astype(np.float32)
    return SimpleNamespace(bank=bank / np.linalg.norm(bank, axis=1, keepdims=True), encoder=enc,
                           records={"test": users(n_test, "t"), "aux": users(n_aux, "a")})


def test_pe_release_with_nonce_blocks_matches_the_idealised_game():
    from steps.one_run import one_run_release

    world = _world()
    mech = MechanismConfig(top_k=5, clip_norm=0.1, noise_multiplier=1.0, sample_rate=1.0)
    design = design_one_run(world.encoder, 600, 100, np.random.default_rng(1), copies=5)
    res = one_run_release(world, design, mech, np.random.default_rng(2))
    # every canary's votes sit on its own block with ‖v_P‖ = C and no background voter: μ_eff = 1/σ (Eq. 20)
    assert res.background_voters.max() == 0 and np.allclose(res.mu_eff, 1.0, atol=1e-6)
    # at q = 1 ℓ ~ N(±μ²/2, μ²): the included and excluded means differ by μ² ≈ 1
    ell = res.scores  # mixture LLR at q = 1 is ℓ itself
    gap = ell[res.included].mean() - ell[~res.included].mean()
    assert gap == pytest.approx(1.0, abs=0.45)  # sd of the gap ≈ 0.2 at m = 100
    assert res.releases == 1
    for a in res.audits.values():
        assert 0 <= a.epsilon_lower <= epsilon_from_mu(1.0, 1.0, 1e-5)


@pytest.mark.parametrize("q", [1.0, 0.1])
def test_pe_nonce_one_run_never_above_epsilon_theory(q):
    # issue 16: on PE with nonce canaries at σ = 1 the one-run ε_lower of both bounds stays ≤ ε_theory (one release at
    # σ = 1, q, δ = 1e-5: 4.387 at q = 1, 1.695 at q = 0.1 with the kit's PRV accountant); 3 seeded releases per q,
    # m = 100 canaries filling 500 of the p = 600 coordinates. At q = 1 the bound is positive in every release (the
    # check is not met by zeros alone); at q = 0.1 nine in ten inserted canaries sit the release out.
    from pe_kit.audit.accounting import epsilon_theory
    from steps.one_run import one_run_release

    world = _world()
    mech = MechanismConfig(top_k=5, clip_norm=0.1, noise_multiplier=1.0, sample_rate=q)
    theory = epsilon_theory(1.0, q, 1e-5)
    assert theory == pytest.approx(4.387 if q == 1 else 1.695, abs=2e-3)
    design = design_one_run(world.encoder, 600, 100, np.random.default_rng(1), copies=5)
    for seed in range(3):
        res = one_run_release(world, design, mech, np.random.default_rng([q == 1, seed]))
        assert np.allclose(res.mu_eff, 1.0, atol=1e-6) and res.releases == 1
        for a in res.audits.values():
            assert a.info["sample_rate"] == q and 0 <= a.epsilon_lower <= theory, a
        if q == 1:
            assert min(a.epsilon_lower for a in res.audits.values()) > 0


def test_fast_inverse_blowup_agrees_with_the_bisection():
    mu = np.geomspace(1e-3, 20, 64)
    for q in (0.1, 0.7):
        fast = _FastInverseBlowup(mu, q)
        for y in (1e-9, 1e-4, 0.05, 0.4, 0.8, 0.999):
            want = tradeoff_inverse_blowup(np.full(64, y), mu, q)
            assert np.allclose(fast(np.full(64, y)), want, rtol=1e-9, atol=0)


def test_notebook_parameters_defaults_and_single_values():
    from steps.one_run import DEFAULTS, with_defaults

    p = with_defaults({"one_run_variants": "nonce", "probe_shares": 0.5, "copies": None})
    assert p["one_run_variants"] == ["nonce"] and p["probe_shares"] == [0.5]
    assert p["one_run_qs"] == list(DEFAULTS["one_run_qs"]) == [1.0, 0.1] and p["copies"] is None
    assert p["published_repeats"] == 100 and p["published_sigmas"] == [0.5, 1.0, 2.0, 4.0]
    assert with_defaults({"published_sigmas": 1.0})["published_sigmas"] == [1.0]


# ------------------------------------------------------------------------------------------ published values
# Mahloujifar, Melis, Chaudhuri, "Auditing f-Differential Privacy in One Run", ICML 2025 (arXiv 2410.22235):
# the idealised Gaussian game of their App. D (Algorithm 4), App. B's stated count and Table 1 (δ = 1e-5, τ = 0.05).

def _alg3_passes(sigma, m, c, c_cap, tau=0.05):
    """The source's Algorithm 3 with abstention (k = 2), written out scalar by scalar from its pseudo-code:
    r[c] = τc/m, h[c] = τ(c′−c)/m, h[i] = max(h[i+1], f̄⁻¹(r[i+1])), r[i] = r[i+1] + i/(c′−i)·(h[i] − h[i+1]);
    the claim passes unless r[0] + h[0] > c′/m. f̄⁻¹(x) = Φ(Φ⁻¹(x) − 1/σ) for the Gaussian mechanism."""
    r, h = tau * c / m, tau * (c_cap - c) / m
    for i in range(c - 1, -1, -1):
        h_new = max(h, special.ndtr(special.ndtri(min(r, 1.0)) - 1 / sigma))
        r, h = r + i / (c_cap - i) * (h_new - h), h_new
    return not r + h > c_cap / m


def test_fdp_recursion_decides_as_the_sources_algorithm_3():
    rng = np.random.default_rng(5)
    for _ in range(12):
        m = int(rng.integers(20, 400))
        c_cap = int(rng.integers(1, m + 1))
        c = int(rng.integers(0, c_cap + 1))
        sigmas = np.geomspace(0.2, 50, 10)
        want = np.array([not _alg3_passes(s, m, c, c_cap) for s in sigmas])
        assert np.array_equal(fdp_rejects(m, c_cap, c, 1 / sigmas, 0.05), want), (m, c_cap, c)
    # App. B's setting (σ = 1, m = 10⁵, c′ = 1500, c = 1429): on the source's grid σ = 1 + 0.01 i the first rejected
    # claim is σ = 1.28 in both, i.e. an f-DP ε_lower of 3.29 at δ = 1e-5 for that one game
    grid = 1.0 + 0.01 * np.arange(60)
    rejected = fdp_rejects(100_000, 1500, 1429, 1 / grid, 0.05)
    assert grid[np.argmax(rejected)] == pytest.approx(1.28) and rejected[np.argmax(rejected):].all()
    assert not _alg3_passes(1.28, 100_000, 1429, 1500) and _alg3_passes(1.27, 100_000, 1429, 1500)
    assert epsilon_from_mu(1 / 1.28, 1.0, 1e-5) == pytest.approx(3.29, abs=0.01)


def test_idealised_game_reproduces_the_sources_correct_count():
    from steps.one_run_checks import APP_B, idealised_correct

    # App. B: "the number of guesses to 1,500 and the number of correct guesses are set to 1,429, suggested by the
    # idealized setting" (σ = 1, m = 10⁵; their mean over 100 games). 60 games: standard error ≈ 1.0
    mean, se = idealised_correct(1 / APP_B["sigma"], APP_B["m"], [APP_B["guesses"]], 60, np.random.default_rng(3))
    assert se[0] < 1.5
    assert abs(mean[0] - APP_B["correct"]) <= 3 * se[0] + 1  # + 1: Algorithm 4 rounds the mean down
    # the counts are those of the kit's abstaining guesser with k₊ = k₋ = c′/2
    rng_a, rng_b = np.random.default_rng(6), np.random.default_rng(6)
    one, _ = idealised_correct(1.0, 500, [10, 60, 500], 2, rng_a)
    games = [idealised_scores(1.0, 1.0, 500, rng_b) for _ in range(2)]
    for j, k in enumerate((5, 30, 250)):
        assert one[j] == pytest.approx(np.mean([abstaining_guesses(s, inc, k, k)[1] for s, inc in games]))
    with pytest.raises(ValueError, match="even"):
        idealised_correct(1.0, 100, [15], 2, np.random.default_rng(0))


def test_theoretical_epsilon_matches_table_1():
    from steps.one_run_checks import TABLE1

    # Table 1 prints the Gaussian mechanism's ε at δ = 1e-5 truncated to two decimals (9.997 → 9.99)
    for sigma, row in TABLE1.items():
        eps = epsilon_from_mu(1 / sigma, 1.0, 1e-5)
        assert 0 <= eps - row["theory"] < 0.01, (sigma, eps)


@pytest.mark.slow
def test_table_1_steinke_column_reproduces_and_the_fdp_gap_is_one_sided():
    from steps.one_run_checks import published_checks

    # 100 games per σ as in the source; σ = 1 and 2 (m = 10⁵). Steinke et al.'s bound reproduces within the
    # Monte-Carlo tolerance (published 2.61 and 1.33; the kit 2.66 and 1.29). The f-DP bound is below the published
    # 3.61 / 1.59 (the kit 3.35 / 1.49) although its recursion decides as the source's Algorithm 3 and the game
    # reproduces App. B: the (c′, c) behind Table 1 are not stated (see ``published_checks``). What must hold of the
    # source's claim: the f-DP bound beats Steinke et al.'s on the same guesses, and neither passes ε_theory.
    rows = published_checks(repeats=100, seed=0, sigmas=(1.0, 2.0))
    by = {(r["method"], r["setting"].split(",")[0]): r for r in rows}
    assert by[("game", "σ=1")]["within"]
    for s in ("σ=1", "σ=2"):
        assert by[("theory", s)]["within"] and by[("steinke", s)]["within"], by[("steinke", s)]
        fdp, steinke, theory = by[("fdp", s)], by[("steinke", s)], by[("theory", s)]
        assert steinke["reproduced"] < fdp["reproduced"] < fdp["published"] < theory["reproduced"]
        assert steinke["tolerance"] < 0.15


def test_table_1_fdp_gap_settings_at_the_stated_best_guesses():
    # σ = 0.5, m = 10⁵: the stated procedure's best (c′, c) = (2990, 2985) (benchmarks/one_run_fdp_gap.py, 100 games).
    # At τ = 0.05, δ = 1e-5 the f-DP bound is 7.39 (published 8.16); the same μ read at δ = 1e-6 gives 8.17 and
    # τ = 0.1 gives 7.84 — neither setting is stated, and neither fits every row (``one_run_checks`` docstring). The
    # appendix's no-abstention audit told m = c′ overshoots ε_theory = 9.997, so it cannot be the table's procedure.
    m, guesses, correct = 100_000, 2990, 2985
    mu = mu_lower_fdp(m, guesses, correct, 0.05)
    assert epsilon_from_mu(mu, 1.0, 1e-5) == pytest.approx(7.389, abs=0.01)
    assert epsilon_from_mu(mu, 1.0, 1e-6) == pytest.approx(8.173, abs=0.01)
    assert epsilon_from_mu(mu_lower_fdp(m, guesses, correct, 0.1), 1.0, 1e-5) == pytest.approx(7.836, abs=0.01)
    theory = epsilon_from_mu(2.0, 1.0, 1e-5)
    assert theory == pytest.approx(9.997, abs=1e-3)
    assert epsilon_from_mu(mu_lower_fdp(1056, 1056, 1055, 0.05), 1.0, 1e-5) > theory  # m = c′: not a valid test


@pytest.mark.parametrize("bad", [0.0, 1.5, -0.1])
def test_one_run_audit_names_a_sample_rate_out_of_range(bad):
    # was "math domain error" from the accountant; now the field, its range and its meaning
    scores, included = np.arange(10.0), np.arange(10) % 2 == 0
    with pytest.raises(ValueError, match=r"sample_rate=.* must satisfy 0 < q ≤ 1 \(the mechanism's Poisson"):
        _one_run_audit(scores, included, delta=1e-5, sample_rate=bad)
    with pytest.raises(ValueError, match="sample_rate"):
        fdp_rejects(10, 4, 4, np.array([0.5]), 0.05, bad)
    with pytest.raises(ValueError, match="must be 1-D: one value per canary"):
        _one_run_audit(np.zeros((3, 2)), np.zeros((3, 2), bool), delta=1e-5)
