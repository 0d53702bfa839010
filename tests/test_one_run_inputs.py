"""One-run audits (issue 16) under inputs real users give: out-of-range sample rates, probe budgets too small for
one canary, near-equal probe budgets, notebook 08's published-check parameters, and malformed guesser inputs. Each
test pins an error that names the field and the fix, or the correct numbers."""
import sys
from pathlib import Path

import numpy as np
import pytest

from pe_kit.audit.one_run import abstaining_guesses, fdp_rejects, idealised_scores, mu_lower_fdp, _one_run_audit

sys.path.insert(0, str(Path(__file__).parent))


def _scores(m=200, mu=1.0, q=1.0, seed=0):
    return idealised_scores(mu, q, m, np.random.default_rng(seed))


@pytest.mark.parametrize("q", [0.0, 1.5, -0.1, float("nan"), float("inf")])
def test_one_run_audit_rejects_a_sample_rate_outside_0_1(q):
    # before: q = 0 and 1.5 raised "math domain error"; q = NaN returned ε_lower = 0 for the f-DP bound silently
    s, inc = _scores()
    with pytest.raises(ValueError, match="sample_rate"):
        _one_run_audit(s, inc, delta=1e-5, sample_rate=q)
    with pytest.raises(ValueError, match="sample_rate"):
        fdp_rejects(200, 100, 80, np.array([0.5]), 0.05, sample_rate=q)
    with pytest.raises(ValueError, match="sample_rate"):
        mu_lower_fdp(200, 100, 80, 0.05, sample_rate=q)


def test_one_run_audit_sample_rate_one_as_int_or_numpy_float_is_q_equal_one():
    # q = 1 exactly, as int 1, numpy float32 1.0 or a float a hair below 1: the same μ-GDP bound (continuity)
    s, inc = _scores()
    ref = _one_run_audit(s, inc, delta=1e-5, sample_rate=1.0)["fdp"].epsilon_lower
    assert ref > 0
    for q in (1, np.float32(1.0)):
        assert _one_run_audit(s, inc, delta=1e-5, sample_rate=q)["fdp"].epsilon_lower == ref
    assert _one_run_audit(s, inc, delta=1e-5, sample_rate=1 - 1e-7)["fdp"].epsilon_lower == pytest.approx(ref, rel=1e-3)


def _study_world():
    from test_one_run import _world

    world = _world(n_test=60, n_aux=40)
    world.records["calibration"] = _world(n_test=60, n_aux=1, seed=1).records["test"]
    return world


def _params(**kw):
    return {"seed": 0, "trials": 200, "one_run_qs": [1.0], "one_run_variants": ["nonce"], "copies": None, **kw}


def test_one_run_study_names_probe_shares_when_no_canary_fits():
    # before: probe_shares=0.001 on p = 600 with k = 5 copies fits m = 0 canaries; every row was skipped and the
    # multi-trial design then failed with "n_canaries=0, records_per_canary=1, copies=5 must all be ≥ 1"
    from pe_kit.settings import MechanismConfig
    from steps.one_run import one_run_study

    mech = MechanismConfig(top_k=5, clip_norm=0.1, noise_multiplier=1.0, sample_rate=1.0)
    with pytest.raises(ValueError, match=r"probe_shares=\[0\.001\].*copies=5.*p=600.*≥ 0\.00833"):
        one_run_study(_study_world(), _params(probe_shares=[0.001]), mech)
    # copies larger than the bank (08.copies=700 on p = 600): no share can fit one canary, so the fix is copies
    with pytest.raises(ValueError, match=r"copies=700.*p=600.*lower copies to ≤ 600"):
        one_run_study(_study_world(), _params(probe_shares=[1.0], copies=700), mech)


def test_one_run_study_marks_the_largest_share_when_two_shares_fit_the_same_m():
    # p = 600, 5 copies: shares 0.5 and 0.505 both fit m = 60 canaries; the headline rows (largest_share) are the
    # m = 60 rows. Before: the 0.505 row was dropped as a duplicate m and the kept row was marked largest_share=False,
    # so notebook 08's headline table (nonce rows at the largest share) held only the multi-trial row.
    from pe_kit.settings import MechanismConfig
    from steps.one_run import one_run_study

    mech = MechanismConfig(top_k=5, clip_norm=0.1, noise_multiplier=1.0, sample_rate=1.0)
    rows = one_run_study(_study_world(), _params(probe_shares=[0.25, 0.5, 0.505]), mech)
    one = [r for r in rows if r["experiment"] == "one_run"]
    assert sorted({r["m"] for r in one}) == [30, 60]
    head = [r for r in one if r["largest_share"]]
    assert sorted(r["method"] for r in head) == ["fdp", "steinke"] and {r["m"] for r in head} == {60}
    assert not any(r["largest_share"] for r in one if r["m"] == 30)


def test_notebook_08_audits_at_its_audit_settings():
    """Notebook 08's δ, shrinkage and ridge reach its one-run and multi-trial rows (``audit`` from the cell), not
    ``AuditConfig()``'s defaults: δ in every row, shrinkage in the one-run scores' μ_eff."""
    from pe_kit.settings import AuditConfig, MechanismConfig
    from steps.one_run import one_run_study

    mech = MechanismConfig(top_k=5, clip_norm=0.1, noise_multiplier=1.0, sample_rate=1.0)
    world, params = _study_world(), _params(probe_shares=[0.5])
    base = one_run_study(world, params, mech)
    rows = one_run_study(world, params, mech, AuditConfig(delta=1e-6, shrinkage=0.9, ridge=1e-6))
    assert {r["delta"] for r in rows if r["experiment"] == "one_run"} == {1e-6}
    assert [r["epsilon_theory"] for r in rows] != [r["epsilon_theory"] for r in base]  # ε_theory at δ = 1e-6
    mu = {(r["experiment"], r["method"]): r["mu_eff"] for r in rows}
    assert mu != {(r["experiment"], r["method"]): r["mu_eff"] for r in base}  # Σ̂ shrunk towards its diagonal


@pytest.mark.parametrize("override, match", [
    ("published_repeats=1", r"published_repeats=1 is out of range: use an integer ≥ 2"),
    ("published_repeats=1.5", r"published_repeats=1\.5 is not an integer"),
    ("published_repeats=abc", r"published_repeats='abc' is not an integer"),
    ("published_sigmas=3", r"published_sigmas=3 is not accepted: use one of 0\.5, 1\.0, 2\.0, 4\.0"),
    ("published_sigmas=abc", r"published_sigmas='abc' is not a list of numbers"),
])
def test_notebook_08_published_check_parameters_are_checked_at_parse_time(override, match):
    # before: both had no type, so `--set 08_one_run_audit.published_repeats=1` passed and failed after the world was
    # built, inside published_checks ("need mu > 0 and repeats ≥ 2"), 1.5 was truncated to 1, 'abc' hit int('abc')
    from pe_kit.settings import parse_override

    with pytest.raises(ValueError, match=match):
        parse_override(f"08_one_run_audit.{override}")


def test_notebook_08_published_check_parameters_accept_table_1_values():
    from pe_kit.run.presets import resolve_params
    from pe_kit.settings import parse_override

    assert parse_override("08_one_run_audit.published_sigmas=0.5,4") == ("08_one_run_audit.published_sigmas", [0.5, 4.0])
    assert parse_override("08_one_run_audit.published_repeats=2") == ("08_one_run_audit.published_repeats", 2)
    p = resolve_params("08_one_run_audit", "tiny")
    assert p["published_repeats"] == 10 and p["published_sigmas"] == [1.0, 2.0]


def test_published_sigmas_choices_are_the_rows_of_table_1():
    from steps.one_run_checks import TABLE1
    from pe_kit.settings import PARAM_TYPES

    assert PARAM_TYPES["published_sigmas"].choices == tuple(sorted(TABLE1))


def test_included_as_plus_minus_one_labels_is_refused_not_read_as_all_in():
    # the source's game labels canaries s_i ∈ {−1, +1}; before, bool(−1) = True made every canary "included" and the
    # audit counted every "out" guess wrong: here 10 correct of 20 instead of 18 (ε_lower 0 instead of > 0)
    rng = np.random.default_rng(3)
    s_pm = np.where(rng.random(200) < 0.5, 1, -1)
    scores = s_pm * 3.0 + rng.normal(size=200)
    with pytest.raises(ValueError, match=r"included.*0/1 or True/False.*included = \(s == 1\)"):
        abstaining_guesses(scores, s_pm, 10, 10)
    with pytest.raises(ValueError, match=r"included"):
        _one_run_audit(scores, s_pm, delta=1e-5)
    with pytest.raises(ValueError, match=r"included"):
        abstaining_guesses(scores, np.full(200, 0.3), 10, 10)  # probabilities are not the truth S_i
    # 0/1 integers and floats are the truth S_i as well as bools: the same counts
    r, v = abstaining_guesses(scores, s_pm == 1, 10, 10)
    assert (r, v) == abstaining_guesses(scores, (s_pm == 1).astype(int), 10, 10) \
        == abstaining_guesses(scores, (s_pm == 1).astype(float), 10, 10)
    assert r == 20 and v >= 18


def test_guess_counts_given_as_integral_floats_work_and_fractions_are_named():
    # before: k_plus=10.0 raised "slice indices must be integers"; a fractional count is a user error, named
    s, inc = _scores()
    assert abstaining_guesses(s, inc, 10.0, np.int64(5)) == abstaining_guesses(s, inc, 10, 5)
    with pytest.raises(ValueError, match=r"k_plus=10\.5.*integer"):
        abstaining_guesses(s, inc, 10.5, 0)
    with pytest.raises(ValueError, match=r"pairs.*\(10\.7, 0\).*integer"):
        _one_run_audit(s, inc, delta=1e-5, pairs=[(10.7, 0)])  # before: silently truncated to (10, 0)


def test_empty_run_and_a_method_given_as_a_string():
    s, inc = _scores()
    with pytest.raises(ValueError, match=r"scores.*included.*empty.*at least one canary"):
        _one_run_audit(np.array([]), np.array([], dtype=bool), delta=1e-5)
    # methods="fdp" (one name, not a tuple): before, it was split into letters ("methods ['d', 'f', 'p'] unknown")
    out = _one_run_audit(s, inc, delta=1e-5, methods="fdp")
    assert list(out) == ["fdp"]
    assert out["fdp"].epsilon_lower == _one_run_audit(s, inc, delta=1e-5)["fdp"].epsilon_lower


@pytest.mark.parametrize("q", [1.0, 0.1])
def test_epsilon_from_mu_of_a_noiseless_release_is_infinite(q):
    # μ = ∞ (σ = 0: no noise): a participating canary is seen exactly, so δ(ε) = q at every ε and ε = ∞ for δ < q,
    # 0 for δ ≥ q. Before: OverflowError "math range error" at q = 1 and "noise_multiplier=0.0 must be > 0" from the
    # accountant at q < 1
    from pe_kit.audit.one_run import epsilon_from_mu

    assert epsilon_from_mu(float("inf"), q, 1e-5) == float("inf")
    assert epsilon_from_mu(float("inf"), q, 0.5) == (float("inf") if q == 1 else 0.0)
    assert epsilon_from_mu(1.0, 1.0, 1e-5) == pytest.approx(4.377, abs=1e-3)  # finite μ unchanged (Table 1: 4.37)


@pytest.mark.parametrize("n_in", [200, 0, 150])
def test_inclusion_far_from_bernoulli_half_is_refused(n_in):
    # both bounds assume S_i ~ Bernoulli(½) drawn independently. Before: with null canaries (no signal, μ = 0) and
    # every canary marked included, the audit reported ε_lower = 2.797 (Steinke et al.) and 4.687 (f-DP): the "in"
    # guesses are right by construction, a false positive. 200 of 200 (or 0, or 150) has two-sided binomial p < 1e-6.
    s, _ = _scores(mu=0.0)
    inc = np.arange(200) < n_in
    np.random.default_rng(0).shuffle(inc)
    with pytest.raises(ValueError, match=rf"included has {n_in} of 200 canaries in.*Bernoulli\(½\).*rng\.random\(m\) < 0\.5"):
        _one_run_audit(s, inc, delta=1e-5)


def test_inclusion_check_passes_a_fair_draw_and_small_runs():
    # a fair draw passes (false-refusal rate 1e-6), and small m where even all-in is plausible is audited (to 0)
    for seed in range(20):
        s, inc = _scores(mu=0.0, seed=seed)
        assert _one_run_audit(s, inc, delta=1e-5)["steinke"].epsilon_lower == 0.0
    out = _one_run_audit(np.arange(10.0), np.ones(10, dtype=bool), delta=1e-5)  # P[10 of 10] = 2⁻⁹ two-sided
    assert all(a.epsilon_lower == 0.0 for a in out.values())


def test_max_canaries_is_not_cut_by_float_rounding_of_the_share():
    # 0.29·100 = 28.999999999999996 and 0.58·100 = 57.99999999999999 in binary floats; before: 28 and 28 canaries
    from steps.one_run_design import max_canaries

    assert max_canaries(100, 0.29, copies=1) == 29
    assert max_canaries(100, 0.58, copies=2) == 29
    assert max_canaries(8192, 0.07, copies=1) == 573  # 573.44: still floored
    assert max_canaries(600, 1.0, copies=5) == 120 and max_canaries(600, 0.001, copies=5) == 0


@pytest.mark.parametrize("tol", [0.0, -1e-3, float("nan")])
def test_steinke_bisection_tolerance_must_be_positive(tol):
    # before: tol = 0 looped forever once lo and hi were adjacent floats (the bisection never shrank below tol)
    from pe_kit.audit.one_run import epsilon_lower_steinke

    with pytest.raises(ValueError, match=r"tol=.*> 0"):
        epsilon_lower_steinke(100, 50, 45, 1e-5, 0.05, tol=tol)
    assert epsilon_lower_steinke(100, 50, 45, 1e-5, 0.05, tol=1e-9) == pytest.approx(
        epsilon_lower_steinke(100, 50, 45, 1e-5, 0.05), abs=1e-6)


@pytest.mark.parametrize("kw", [{"grid": 1}, {"grid": 0}, {"mu_max": 1e-4}])
def test_mu_lower_fdp_grid_must_span_an_interval(kw):
    # before: grid = 1 tested only μ = 1e-3 and returned mu_max = 20 (the bound at 20/20 correct of m = 100 is 0.769):
    # an overclaim; grid = 0 raised IndexError
    with pytest.raises(ValueError, match=r"grid|mu_max"):
        mu_lower_fdp(100, 20, 20, 0.05, **kw)
    assert mu_lower_fdp(100, 20, 20, 0.05, grid=2) <= mu_lower_fdp(100, 20, 20, 0.05) == pytest.approx(0.769, abs=1e-3)


@pytest.mark.parametrize("call, message", [
    (lambda: __import__("steps.one_run_checks", fromlist=["x"]).idealised_correct(
        1.0, 100, [10], 2.5, np.random.default_rng(0)), "repeats=2.5 is not an integer ≥ 2 (no fractional part allowed: use 2 or 3)"),
    (lambda: __import__("steps.one_run_checks", fromlist=["x"]).idealised_correct(
        1.0, 100.5, [10], 2, np.random.default_rng(0)), "m=100.5 is not an integer ≥ 1 (no fractional part allowed: use 100 or 101)"),
    (lambda: __import__("steps.one_run", fromlist=["x"]).idealised_rows(1.0, 1.0, [100], 0, repeats=1.5),
     "repeats=1.5 is not an integer ≥ 1 (no fractional part allowed: use 1 or 2)"),
    (lambda: __import__("steps.one_run", fromlist=["x"]).idealised_rows(1.0, 1.0, [99.5], 0),
     "m=99.5 is not an integer ≥ 1 (no fractional part allowed: use 99 or 100)"),
])
def test_fractional_game_sizes_are_refused_not_truncated(call, message):
    # int() ran 2 games for repeats=2.5 and 100 canaries for m=100.5 without a word
    with pytest.raises(ValueError) as exc:
        call()
    assert str(exc.value) == message


def test_idealised_rows_take_integral_floats():
    from steps.one_run import idealised_rows

    rows = idealised_rows(1.0, 1.0, [100.0], 0, repeats=1.0)
    assert {r["m"] for r in rows} == {100} and all(type(r["m"]) is int for r in rows)


def test_audit_one_run_refuses_a_bool_sample_rate():
    # True was taken as q = 1 (every user in every release): the bound of another mechanism, without a word
    import pe_kit as pk

    scores, included = np.arange(100.0), np.arange(100) % 2 == 0
    with pytest.raises(ValueError, match=r"^sample_rate=True is not a number in \(0, 1\] \(true/false is not a "
                                         r"number\): pass a float, e\.g\. 0\.1$"):
        pk.audit_one_run(scores, included, delta=1e-5, sample_rate=True)
    assert pk.audit_one_run(scores, included, delta=1e-5, sample_rate=1).epsilon_lower == \
        pk.audit_one_run(scores, included, delta=1e-5, sample_rate=1.0).epsilon_lower
