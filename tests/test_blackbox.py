"""Black-box implementation audits (issue 15): the release protocol, the seeded-bug mutants and their derived
verdicts, the bug-targeted canaries, the suite's flags, agreement with the scalar engine, and the adapter."""
import numpy as np
import pytest
from scipy import stats

from pe_kit.attack.bug_canaries import ImplementationDesign, concentrated_design, design_for, displacement_design
from pe_kit.audit.blackbox import audit_implementation, implementation_scores, spec_statistic
from pe_kit.audit.bounds import clopper_pearson
from pe_kit.audit.engine import TrialEngine
from pe_kit.audit.trials import scalar_problem
from pe_kit.settings import MechanismConfig
from pe_kit.pe import mutants
from pe_kit.pe.mechanism import contributions, topk_routes
from pe_kit.pe.release_protocol import (
    BatchedPERelease,
    HistogramAdapter,
    PERelease,
    ReferenceRelease,
    reference_release,
    stack_users,
    user_records,
)
from pe_kit.report.results import epsilon_interval
from steps.implementation_audit import SUITE_DELTA, SUITE_MECHANISM, control_repeats, run_suite
from tests.oracles import engine_scores

MECH = SUITE_MECHANISM
SMALL = {"n_aux": 20, "n_calibration": 25, "n_test": 25, "bank_size": 64}
VIOLATING = {"no_clipping", "canary_always_included", "fixed_size_sample", "fixed_noise_seed", "noise_on_nonzero_only"}


def _toy(seed=0, n_users=6, records=3, p=40, d=8):
    rng = np.random.default_rng(seed)
    bank = rng.normal(size=(p, d)).astype(np.float32)
    rec = rng.normal(size=(n_users * records, d)).astype(np.float32)
    owner = np.repeat(np.arange(n_users), records)
    return bank, rec, owner, n_users


# ------------------------------------------------------------------------------------------ protocol

def test_reference_pipeline_matches_mechanism_moments():
    bank, rec, owner, n = _toy()
    ref = ReferenceRelease()
    assert isinstance(ref, PERelease) and isinstance(ref, BatchedPERelease)
    c = contributions(topk_routes(rec, bank, MECH.top_k), owner, n, bank.shape[0], MECH.clip_norm).toarray()
    np.testing.assert_array_equal(ref.prepare(bank, rec, owner, n, MECH).toarray(), c)
    y = ref.release_batch(bank, rec, owner, n, MECH, np.random.default_rng(1), 40_000, np.arange(bank.shape[0]))
    # E[Y] = qΣc_u, Var[Y_j] = q(1−q)Σc_uj² + (σC)² (Eqs. 8–9): 4 standard errors
    q, s2 = MECH.sample_rate, MECH.noise_std ** 2
    mean, var = q * c.sum(0), q * (1 - q) * (c ** 2).sum(0) + s2
    assert np.all(np.abs(y.mean(0) - mean) < 4 * np.sqrt(var / y.shape[0]))
    assert np.all(np.abs(y.var(0) / var - 1) < 4 * np.sqrt(2 / y.shape[0]) + 0.05)
    one = reference_release(bank, rec, owner, n, MECH, np.random.default_rng(2))
    assert one.shape == (bank.shape[0],) and one.dtype == np.float64
    assert ref(bank, rec, owner, n, MECH, np.random.default_rng(2)).shape == (bank.shape[0],)


def test_protocol_input_errors_name_the_field():
    bank, rec, owner, n = _toy()
    ref = ReferenceRelease()
    with pytest.raises(ValueError, match="owner"):
        ref(bank, rec, owner[:-1], n, MECH, np.random.default_rng(0))
    with pytest.raises(ValueError, match="same d"):
        ref(bank[:, :4], rec, owner, n, MECH, np.random.default_rng(0))
    with pytest.raises(ValueError, match="coords"):
        ref.release_batch(bank, rec, owner, n, MECH, np.random.default_rng(0), 3, [bank.shape[0]])
    with pytest.raises(ValueError, match="n_releases"):
        ref.release_batch(bank, rec, owner, n, MECH, np.random.default_rng(0), 0, [0])
    users = user_records(rec, owner, n)
    assert [len(u) for u in users] == [3] * n
    r2, o2, n2 = stack_users(users)
    np.testing.assert_array_equal(r2, rec) and np.testing.assert_array_equal(o2, owner)
    with pytest.raises(ValueError, match="empty"):
        stack_users([])


# ------------------------------------------------------------------------------------------ mutants

def test_derived_verdicts_at_the_suite_setting_and_closed_cases():
    got = {m.name for m in mutants.all_implementations() if m.breaks_guarantee(MECH, 51)}
    assert got == VIOLATING
    assert mutants.NoiseStdNotScaled().breaks_guarantee(MechanismConfig(clip_norm=2.0), 51)  # σ/C < σ iff C > 1
    assert not mutants.NoClipping().breaks_guarantee(MechanismConfig(clip_norm=0.5, top_k=5), 51)  # 0.5 ≥ 1/√5
    assert not mutants.CanaryAlwaysIncluded().breaks_guarantee(MechanismConfig(sample_rate=1.0), 51)
    assert not mutants.FixedSizeSample().breaks_guarantee(MechanismConfig(sample_rate=1.0), 51)
    assert mutants.Float32Accumulation().breaks_guarantee(MECH, 92)  # 2N²u > 10⁻³ beyond N = 91
    assert not mutants.Float32Accumulation().breaks_guarantee(MECH, 91)
    # noise σC/√(#sampled): the canary alone is released at σC; from 5 others on, the projection on v already leaks
    shrinks = mutants.NoiseShrinksWithUsers()
    assert [shrinks.breaks_guarantee(MECH, n) for n in (1, 2, 5, 6, 26)] == [False, False, False, True, True]
    assert type(shrinks) not in mutants.MUTANTS and shrinks.name not in {m.name for m in mutants.all_implementations()}


def test_each_mutant_changes_only_its_step():
    bank, rec, owner, n = _toy(n_users=20)
    rng = np.random.default_rng
    # participation
    m = mutants.CanaryAlwaysIncluded().participation(n, MECH, rng(0), 500)
    assert m[:, -1].all() and 0.05 < m[:, :-1].mean() < 0.15
    f = mutants.FixedSizeSample().participation(n, MECH, rng(0), 500)
    assert (f.sum(1) == round(0.1 * n)).all() and abs(f.mean(0).mean() - 0.1) < 1e-12
    # noise
    totals = np.zeros((1, 3))
    y = mutants.NoiseOnNonzeroOnly().noise(np.array([[0.0, 1.0, 0.0]]), np.arange(3), 3, MECH, rng(0))
    assert y[0, 0] == 0 and y[0, 2] == 0 and y[0, 1] != 1.0
    same = mutants.FixedNoiseSeed().noise(totals, np.arange(3), bank.shape[0], MECH, rng(5))
    again = mutants.FixedNoiseSeed().noise(totals, np.arange(3), bank.shape[0], MECH, rng(6))
    np.testing.assert_array_equal(same, again)  # identical across releases whatever the generator
    assert np.all(same != 0)
    big = mutants.NoiseStdNotScaled().noise(np.zeros((20_000, 1)), [0], 1, MECH, rng(0))
    assert abs(big.std() - MECH.noise_multiplier) < 0.03
    # contributions: a user with every vote on the same k entries
    heavy = np.repeat(rec[:1], 4, axis=0)
    r = topk_routes(heavy, bank, MECH.top_k)
    no_clip = mutants.NoClipping().contributions(r, np.zeros(4, int), 1, bank.shape[0], MECH).toarray()
    assert np.isclose(np.linalg.norm(no_clip), 1 / np.sqrt(MECH.top_k))
    raw = mutants.RawCounts().contributions(r, np.zeros(4, int), 1, bank.shape[0], MECH).toarray()
    assert np.isclose(np.linalg.norm(raw), MECH.clip_norm) and np.allclose(raw[raw > 0], raw[raw > 0][0])
    # ties: a duplicated bank row goes to the highest index instead of the lowest
    b2 = np.concatenate([bank, bank[:1]])
    lo = ReferenceRelease().routes(b2, bank[:1], MECH)[0]
    hi = mutants.TiesHighestIndex().routes(b2, bank[:1], MECH)[0]
    assert list(lo[:2]) == [0, 40] and list(hi[:2]) == [40, 0] and set(lo) == set(hi)
    # noise shrinking with the sampled users: std σC/√max(1, M) per release
    y = mutants.NoiseShrinksWithUsers().release_batch(bank, rec, owner, n, MechanismConfig(sample_rate=1.0), rng(0),
                                                      20_000, [bank.shape[0] - 1])
    c_last = ReferenceRelease().prepare(bank, rec, owner, n, MECH)[:, bank.shape[0] - 1].sum()
    assert abs(y.std() / (MECH.noise_std / np.sqrt(n)) - 1) < 0.03 and abs(y.mean() - c_last) < 0.002
    # float32: the sum differs from float64 by rounding only
    c = ReferenceRelease().prepare(bank, rec, owner, n, MECH).toarray()
    mask = rng(0).random((100, n)) < 0.5
    d = mutants.Float32Accumulation().accumulate(mask, c) - ReferenceRelease().accumulate(mask, c)
    assert np.abs(d).max() < 1e-6 and np.abs(d).max() > 0


# ------------------------------------------------------------------------------------------ designs

def test_bug_canaries_have_the_derived_geometry():
    d = concentrated_design(np.random.default_rng(0), **SMALL)
    stat = spec_statistic(d, MECH)
    assert stat.coords.size == MECH.top_k and np.isclose(stat.mu_eff, 1 / MECH.noise_multiplier, rtol=1e-6)
    assert np.isclose(np.linalg.norm(stat.canary), MECH.clip_norm)
    assert all(stat.populations[s].nnz == 0 for s in ("calibration", "test"))  # nobody else votes on P
    x = displacement_design(np.random.default_rng(0), **SMALL)
    sx = spec_statistic(x, MECH)
    assert sx.coords.size == 2 * MECH.top_k
    a_side = np.isin(sx.coords, sx.coords[sx.canary > 0])
    assert (sx.weights[a_side] > 0).all() and (sx.weights[~a_side] < 0).all()  # w leans to v − c
    assert design_for(mutants.FixedSizeSample(), np.random.default_rng(0), **SMALL).name == "displacement"
    with pytest.raises(ValueError, match="bank_size"):
        concentrated_design(np.random.default_rng(0), bank_size=8)


def test_blackbox_splits_are_equal_size_and_never_resampled():
    """Issue 11: the black-box statistic scores N distinct calibration users and N distinct test users; a split of
    another size is refused (by the design builders and by spec_statistic), never resampled with replacement."""
    import dataclasses

    d = concentrated_design(np.random.default_rng(0), **SMALL)
    stat = spec_statistic(d, MECH)
    assert stat.n_users == 25 and all(stat.populations[s].shape == (25, MECH.top_k) for s in ("calibration", "test"))
    # the calibration population is exactly the design's calibration users, in order (no draw with replacement)
    idx = [id(u) for u in d.calibration]
    assert len(set(idx)) == 25 and not set(idx) & {id(u) for u in d.test}
    for builder in (concentrated_design, displacement_design):
        with pytest.raises(ValueError, match=r"n_calibration=10 but n_test=25.*n_calibration=25"):
            builder(np.random.default_rng(0), **{**SMALL, "n_calibration": 10})
        x = builder(np.random.default_rng(0), n_test=30, bank_size=64)  # n_calibration follows n_test
        assert len(x.calibration) == len(x.test) == 30 and not {id(u) for u in x.calibration} & {id(u) for u in x.test}
    short = dataclasses.replace(d, calibration=d.calibration[:10])
    with pytest.raises(ValueError, match=r"n_calibration=10 but n_test=25"):
        spec_statistic(short, MECH)
    with pytest.raises(ValueError, match=r"design.calibration has 10 users but .*N=25"):
        implementation_scores(ReferenceRelease(), short, MECH, stat, "calibration", 0, 10, np.random.default_rng(1))


# ------------------------------------------------------------------------------------------ the suite

@pytest.mark.slow
def test_every_violating_mutant_flagged_and_no_other():
    """Every violating mutant but fixed-size sampling is flagged at 10⁴ trials, and no other. Fixed-size sampling's
    √2 displacement needs more: on this design at 10⁴ trials its ε_lower was 0.39–0.67 over 6 seeds (flagged once),
    at 3·10⁴ 0.54–0.75 (issue 31 measurement; ε_theory 0.66), so it is checked at 10⁵ by the next test."""
    rows = run_suite(10_000, seed=0, sizes=SMALL)
    flagged = {r["implementation"] for r in rows if r["violation"]}
    assert VIOLATING - {"fixed_size_sample"} <= flagged <= VIOLATING
    assert all(r["expected_violation"] == (r["implementation"] in VIOLATING) for r in rows)
    for r in rows:
        assert r["epsilon_ceiling"] <= r["epsilon_theory"] + 0.02  # μ_eff ≤ 1/σ (Eq. 20) on every design
        if r["implementation"] in ("no_clipping", "fixed_noise_seed", "noise_on_nonzero_only"):
            assert r["epsilon_lower"] > 3 * r["epsilon_theory"]


@pytest.mark.slow
def test_fixed_size_sample_flagged_at_1e5_trials():
    impl = mutants.FixedSizeSample()
    d = design_for(impl, np.random.default_rng(3), n_aux=20, bank_size=64)
    a = audit_implementation(impl, d, MECH, trials=100_000, gamma=0.05 / 44, delta=SUITE_DELTA, seed=11)
    assert a.info["expected_violation"] and a.violation and a.epsilon_lower > a.epsilon_theory


@pytest.mark.slow
def test_controls_never_flagged_in_20_repeats():
    tally = control_repeats(20, 5_000, seed=1, sizes=SMALL)
    names = {t["implementation"] for t in tally}
    assert names == {"reference", "noise_std_not_scaled", "raw_counts", "ties_highest_index", "float32_accumulation"}
    assert all(t["repeats"] >= 20 for t in tally)
    assert sum(t["times_flagged"] for t in tally) == 0, tally


# ------------------------------------------------------------------------------------------ agreement

def _shared_design(seed=0):
    """Concentrated canary, with a third of the test/calibration users also voting on its probes."""
    d = concentrated_design(np.random.default_rng(seed), **SMALL)
    rng = np.random.default_rng(seed + 1)
    centre = d.bank[d.coords].mean(axis=0)

    def mix(users):
        out = list(users)
        for i in range(0, len(out), 3):
            out[i] = np.concatenate([out[i][:2], (centre + 0.01 * rng.normal(size=(2, centre.size))).astype(np.float32)])
        return out

    return ImplementationDesign("shared", d.bank, d.coords, d.canary, mix(d.aux), mix(d.calibration), mix(d.test))


def test_blackbox_reference_agrees_with_scalar_engine():
    d = _shared_design()
    stat = spec_statistic(d, MECH)
    assert 0.2 < stat.mu_eff < 0.99 and stat.populations["test"].nnz > 0
    n, g, delta = 20_000, 0.0025, SUITE_DELTA
    bb, scores = audit_implementation(ReferenceRelease(), d, MECH, trials=n, gamma=g, delta=delta, seed=5, stat=stat,
                                      return_scores=True)
    test_p = scalar_problem(stat.weights, stat.populations["test"], stat.canary, stat.m0, MECH.noise_std,
                            MECH.sample_rate)
    eng = TrialEngine(test_p, method="sample")
    for h in (0, 1):  # two-sample test on the scores
        assert stats.ks_2samp(scores[("test", h)], engine_scores(eng, h, n, seed=[9, h])).pvalue > 1e-3
    # the same frozen threshold on fresh scalar trials: counts within each other's Clopper–Pearson noise
    tp_s, fp_s = eng.count_above(1, n, bb.threshold, seed=[10, 1]), eng.count_above(0, n, bb.threshold, seed=[10, 0])
    for x_bb, x_s in ((bb.true_pos, tp_s), (bb.false_pos, fp_s)):
        lo, hi = clopper_pearson(x_s, n, 0.0005, "lower"), clopper_pearson(x_s, n, 0.0005, "upper")
        assert lo * n <= x_bb <= hi * n
    # ε_lower is itself a γ-level lower bound on its own counts: compare it with a wide band of the scalar counts
    lo, _, hi = epsilon_interval(tp_s, fp_s, n, n, delta, level=0.9999)
    assert lo - 1e-9 <= bb.epsilon_lower <= hi + 1e-9


def test_unbatched_path_equals_batched_in_distribution():
    d = concentrated_design(np.random.default_rng(2), **SMALL)
    stat = spec_statistic(d, MECH)
    a = implementation_scores(reference_release, d, MECH, stat, "test", 1, 1_500, np.random.default_rng(0))
    b = implementation_scores(ReferenceRelease(), d, MECH, stat, "test", 1, 1_500, np.random.default_rng(1))
    assert stats.ks_2samp(a, b).pvalue > 1e-3


# ------------------------------------------------------------------------------------------ adapter

def _third_party(private, synthetic, *, k, clip, noise_multiplier, sample_rate, rng):
    """A DPSDA-style histogram: per-user nearest-neighbour votes, normalised, clipped, Poisson, Gaussian."""
    counts = np.zeros(len(synthetic))
    for user in private:
        if rng.random() >= sample_rate:
            continue
        d = ((user[:, None, :] - synthetic[None, :, :]) ** 2).sum(-1)
        h = np.bincount(np.argsort(d, axis=1, kind="stable")[:, :k].ravel(), minlength=len(synthetic)) / (len(user) * k)
        counts += h * min(1.0, clip / np.linalg.norm(h))
    return counts + rng.normal(0, noise_multiplier * clip, size=len(synthetic))


def test_histogram_adapter_audits_third_party_code():
    adapter = HistogramAdapter(_third_party)
    d = concentrated_design(np.random.default_rng(4), n_aux=10, n_calibration=10, n_test=10, bank_size=32)
    a = audit_implementation(adapter, d, MECH, trials=400, gamma=0.0025, delta=SUITE_DELTA, seed=0)
    assert not a.info["batched"] and a.info["implementation"] == "_third_party" and not a.violation
    assert a.info["expected_violation"] is None
    with pytest.raises(ValueError, match="not MechanismConfig fields"):
        HistogramAdapter(_third_party, settings={"sigma": "noise_multiplier"})
    bad = HistogramAdapter(lambda private, synthetic, **kw: np.zeros(3), name="bad")
    with pytest.raises(ValueError, match="bad: histogram_fn returned shape"):
        bad(d.bank, *stack_users(d.test), MECH, np.random.default_rng(0))
    column = HistogramAdapter(lambda private, synthetic, **kw: np.ones((len(synthetic), 1)), name="column")
    assert column(d.bank, *stack_users(d.test), MECH, np.random.default_rng(0)).shape == (32,)
    folded = HistogramAdapter(lambda private, synthetic, **kw: np.ones((2, 16)), name="folded")
    with pytest.raises(ValueError, match=r"folded: histogram_fn returned shape \(2, 16\)"):
        folded(d.bank, *stack_users(d.test), MECH, np.random.default_rng(0))


def test_plot_mutant_suite(tmp_path):
    import pandas as pd

    from steps import extension_plots, plots

    df = pd.DataFrame({"implementation": ["reference", "no_clipping"], "design": ["concentrated"] * 2,
                       "epsilon_lower": [0.3, 6.0], "epsilon_ci_low": [0.3, 6.0], "epsilon_ci_high": [0.6, np.inf],
                       "epsilon_theory": [0.66, 0.66], "violation": [False, True], "expected_violation": [False, True],
                       "band_level": [0.9955] * 2})
    needed = pd.DataFrame({"implementation": ["no_clipping"], "trials_needed": [1000]})
    fig = extension_plots.plot_mutant_suite(df, needed)
    assert len(fig.axes) == 2 and all(p.stat().st_size > 1000 for p in plots.save_figure(fig, tmp_path, "suite"))
    with pytest.raises(ValueError, match="violation"):
        extension_plots.plot_mutant_suite(df.drop(columns="violation"))
