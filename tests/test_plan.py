"""Planning an audit before it runs (``pe_kit.audit.plan``): the reach of a trial budget in closed form, the
budget ``trials="auto"`` picks, the warning when a budget cannot flag a violation, errors about the user's release
before any world is built, and a battery's progress and partial result."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

import pe_kit as pk
from pe_kit.attack.bug_canaries import concentrated_design
from pe_kit.attack.design_battery import battery_designs
from pe_kit.audit.accounting import epsilon_theory
from pe_kit.audit.battery import audit_battery, battery_gamma
from pe_kit.audit.blackbox import audit_implementation
from pe_kit.audit.expectations import expected_epsilon, separable_epsilon
from pe_kit.audit.plan import announce_reach, audit_reach, auto_trials
from pe_kit.audit.release_runner import dry_call
from pe_kit.pe.release_protocol import HistogramAdapter, ReferenceRelease

GAMMA7 = 0.05 / 29  # a battery of 7 designs plus the batch-vs-call test
MECH = pk.MechanismConfig(noise_multiplier=0.8, sample_rate=0.05, top_k=5, clip_norm=0.1)


def test_reach_of_the_issue_budget_is_below_epsilon_theory():
    """σ = 0.8, q = 0.05, δ = 10⁻⁶, 2,000 trials, γ = 0.05/29: a perfectly separable canary's expected ε_lower is
    log((p_L(100) − δ)/(1 − γ^{1/2000})) = 2.45 < ε_theory 2.566; the ceiling canary (μ_eff = 1/σ) expects 0."""
    r = audit_reach(MECH, 2_000, gamma=GAMMA7, delta=1e-6)
    closed = math.log((special.betaincinv(100, 1901, GAMMA7) - 1e-6) / (1 - GAMMA7 ** (1 / 2000)))
    assert r.reach == pytest.approx(closed, abs=1e-12) and round(r.reach, 2) == 2.45
    assert r.reach == pytest.approx(expected_epsilon(40.0, 0.05, 2_000, GAMMA7, 1e-6), abs=1e-9)  # the μ → ∞ limit
    assert round(r.epsilon_theory, 3) == 2.566 and not r.can_flag
    assert r.mu_eff == 1 / 0.8 and r.reach_ceiling == 0.0 and r.clip_binds


def test_clip_that_never_binds_lowers_the_ceiling():
    """C = 1, k = 3: a vote vector has norm ≤ 1/√3 < C, so μ_eff ≤ 1/(√3·σ) (the DPSDA mapping)."""
    r = audit_reach(pk.MechanismConfig(noise_multiplier=1.0, sample_rate=1.0, top_k=3, clip_norm=1.0), 10_000,
                    gamma=0.0025, delta=1e-3)
    assert not r.clip_binds and r.mu_eff == pytest.approx(1 / math.sqrt(3))
    assert r.reach_ceiling == pytest.approx(expected_epsilon(1 / math.sqrt(3), 1.0, 10_000, 0.0025, 1e-3))
    assert "C never binds" in r.line()


def test_warning_names_the_budget_and_delta_that_would_flag(capsys):
    r = audit_reach(MECH, 2_000, gamma=GAMMA7, delta=1e-6)
    need = auto_trials(MECH, gamma=GAMMA7, delta=1e-6)
    with pytest.warns(UserWarning) as rec:
        announce_reach(r, MECH)
    msg = str(rec[0].message)
    assert msg.startswith("this audit cannot flag a violation by ε: 2,000 trials per hypothesis certify at most "
                          "ε_lower 2.45 (a perfectly separable canary) < ε_theory 2.566; use trials ≥ "
                          f"{need:,}, or delta=1e-05 (ε_theory falls to ")
    assert capsys.readouterr().err.startswith("reach: 2,000 trials per hypothesis (γ = 0.00172, δ = 1e-06) certify at "
                                              "most ε_lower 2.45")


def test_auto_trials_is_the_smallest_budget_that_reaches_the_target():
    n = auto_trials(MECH, gamma=GAMMA7, delta=1e-6)
    theory = epsilon_theory(0.8, 0.05, 1e-6)
    assert separable_epsilon(0.05, n, GAMMA7, 1e-6) >= theory > separable_epsilon(0.05, n - 1, GAMMA7, 1e-6)
    assert 2_000 < n < 3_000
    with pytest.raises(ValueError, match=r"target=50.000 is out of reach: at trials=100,000 \(the most trials='auto' "
                                         r"picks\) the separable reach is 6.626 \(ε_theory 2.566\); it stays out of "
                                         r"reach even at 1,000,000,000 trials: lower the target or raise delta$"):
        auto_trials(MECH, gamma=GAMMA7, delta=1e-6, target=50)
    beyond = auto_trials(MECH, gamma=GAMMA7, delta=1e-6, target=7, max_trials=10**7)
    with pytest.raises(ValueError, match=rf"reach is 6.626 \(ε_theory 2.566\); pass trials={beyond:,} explicitly to "
                                         r"reach it, or lower the target"):
        auto_trials(MECH, gamma=GAMMA7, delta=1e-6, target=7)
    for bad in (float("nan"), 0, -1.0, float("inf")):  # nan once picked 100,000 trials, ≤ 0 one trial
        with pytest.raises(ValueError, match=rf"target={bad!r} must be a finite ε > 0 .*target=2.57 \(ε_theory\)"):
            auto_trials(MECH, gamma=GAMMA7, delta=1e-6, target=bad)
    with pytest.raises(ValueError, match=r"as trials → ∞ it tends to 2\.5"):  # the ceiling canary never reaches ε_theory
        auto_trials(MECH, gamma=GAMMA7, delta=1e-6, basis="ceiling")


def test_audit_implementation_puts_reach_on_its_row():
    design = concentrated_design(np.random.default_rng(0), n_aux=10, n_test=10)
    mech = pk.MechanismConfig()
    a = audit_implementation(ReferenceRelease(), design, mech, trials=300, show_progress=False)
    row = a.row
    assert row["reach"] == pytest.approx(separable_epsilon(0.1, 300, 0.0025, 1e-3)) and row["clip_binds"] is True


# ------------------------------------------------------------------------------ errors before any world is built

class _Batched(ReferenceRelease):
    name = "batched"


def test_errors_about_the_release_come_before_the_world():
    missing = "no/such/corpus.jsonl"  # a world would fail on it: each error below comes first
    with pytest.raises(TypeError, match=r"release is the class _Batched, not an implementation: pass an instance, "
                                        r"_Batched\(\)"):
        pk.audit_release(_Batched, missing)
    with pytest.raises(TypeError, match=r"mechanism=\{'noise_multiplier': 0.8\} is not a MechanismConfig \(it is a "
                                        r"dict\): pass pe_kit.MechanismConfig\(\*\*mechanism\)"):
        pk.audit_release(_Batched(), missing, mechanism={"noise_multiplier": 0.8})
    with pytest.raises(TypeError, match=r"audit_release\(\) got progress=, which it does not take: did you mean "
                                        r"show_progress=\?"):
        pk.audit_release(_Batched(), missing, progress=False)
    with pytest.raises(ValueError, match=r"study=\{'n_tset': …\} is no StudyConfig field: did you mean 'n_test'\?"):
        pk.audit_release(_Batched(), missing, study={"n_tset": 10}, show_progress=False)


def test_argument_errors_come_before_the_world_and_name_the_fix():
    """Each mistake below used to surface only after the world was built (minutes of embedding)."""
    missing, rel = "no/such/corpus.jsonl", _Batched()
    with pytest.raises(ValueError, match=r"variant='nonc' is unknown \(did you mean 'nonce'\?\); use one of"):
        pk.audit_release(rel, missing, variant="nonc", show_progress=False)
    with pytest.raises(ValueError, match=r"axes has the key 'populaton', which is unknown: did you mean 'population'\? "
                                        r"use bank, population, position, records, sensitivity$"):
        pk.audit_release(rel, missing, axes={"populaton": (1,)}, show_progress=False)
    with pytest.raises(ValueError, match=r"design_options has the key 'pool', which is unknown: did you mean "
                                        r"'pool_size'\? use audit, generator, pool_size, r$"):
        pk.audit_release(rel, missing, design_options={"pool": 8}, show_progress=False)
    with pytest.raises(ValueError, match=r"seed='abc' is not a seed \(.*\); pass an int ≥ 0"):
        pk.audit_release(rel, missing, seed="abc", show_progress=False)
    for typo, meant in (("trails", "trials"), ("mechansim", "mechanism"), ("varaint", "variant")):
        with pytest.raises(TypeError, match=rf"audit_release\(\) got {typo}=, which it does not take: did you mean "
                                            rf"{meant}=\?"):
            pk.audit_release(rel, missing, **{typo: 1})
    with pytest.raises(ValueError, match=r"target=1.0 is used only by trials='auto', but trials=300; pass "
                                        r"trials='auto' .* or drop target"):
        pk.audit_release(rel, missing, trials=300, target=1.0, show_progress=False)
    with pytest.raises(ValueError, match=r"target=nan must be a finite ε > 0"):
        pk.audit_release(rel, missing, trials="auto", target=float("nan"), show_progress=False)


def test_histogram_adapter_keywords_refused_by_the_function_are_named():
    def hist(private, synthetic, *, noise, clip, top, q, seed):  # none of the adapter's default keywords
        return np.zeros(len(synthetic))

    with pytest.raises(TypeError, match=r"HistogramAdapter\(hist\) called hist with keywords \['k', 'clip', "
                                        r"'noise_multiplier', 'sample_rate', 'rng'\] and it refused .*its signature is "
                                        r"hist\(private, synthetic, \*, noise, clip, top, q, seed\).*settings=.*rng_arg="):
        dry_call(HistogramAdapter(hist), pk.MechanismConfig())
    ok = HistogramAdapter(hist, settings={"top_k": "top", "clip_norm": "clip", "noise_multiplier": "noise",
                                          "sample_rate": "q"}, rng_arg=None, seed_arg="seed")
    dry_call(ok, pk.MechanismConfig())  # mapped: no error


def test_an_error_inside_the_release_is_noted_with_the_dry_call():
    def broken(bank, records, owner, n_users, config, rng):
        return config.noise_std * np.ones(len(bank)) + config.missing_field

    with pytest.raises(AttributeError) as info:
        dry_call(broken, pk.MechanismConfig())
    assert "raised by a dry call of " in info.value.__notes__[0]
    assert "n_users=3, config=MechanismConfig, rng=numpy Generator" in info.value.__notes__[0]


# --------------------------------------------------------------------------------- a battery that fails midway

class _FailsOnLargeBank(ReferenceRelease):
    name = "fails_on_large_bank"

    def release_batch(self, bank, *args, **kwargs):
        if np.shape(bank)[0] > 1000:
            raise RuntimeError("out of memory")
        return super().release_batch(bank, *args, **kwargs)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_failing_design_keeps_the_finished_ones(monkeypatch, capsys):
    for key, value in (("PE_KIT_HEADLESS", "1"), ("PE_KIT_PROGRESS_INTERVAL", "0"), ("PE_KIT_PROGRESS", "")):
        monkeypatch.setenv(key, value)
    mech = pk.MechanismConfig()
    base = concentrated_design(np.random.default_rng(0), n_aux=10, n_test=10)
    designs = battery_designs(base, mech, np.random.default_rng(1), axes={"population": (1,), "bank": ("large",)})
    with pytest.raises(RuntimeError, match="out of memory") as info:
        audit_battery(_FailsOnLargeBank(), designs, mech, trials=200, check_calls=20, show_progress=True)
    partial = info.value.partial
    assert [r["setting"] for r in partial.rows] == ["base", "1"]
    assert partial.gamma == battery_gamma(0.05, 3, _FailsOnLargeBank())
    assert partial.reach.trials == 200
    assert "fails_on_large_bank raised on design 3 of 3 (bank=8192), 'concentrated|bank=8192'" in info.value.__notes__[0]
    lines = capsys.readouterr().err
    assert "fails_on_large_bank: design 2 of 3 (population=1): 800/2400 release (33%) [" in lines


def test_cli_explore_prints_the_reach(capsys):
    from pe_kit.run.cli import main

    assert main(["explore", "--sigma", "0.8", "--q", "0.05", "--trials", "2000", "--delta", "1e-6"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "reach (any canary)  2.524  the most these trials can certify (a perfectly separable canary); below "
        "ε_theory: no violation can be shown")  # γ = 0.05/20: separable_epsilon(0.05, 2000, 0.0025, 1e-6)


def test_audit_release_auto_picks_the_budget_and_prints_its_pilot_estimate(capsys):
    mech = pk.MechanismConfig()
    base = concentrated_design(np.random.default_rng(0), n_aux=10, n_test=10)
    battery = battery_designs(base, mech, np.random.default_rng(1), axes={"population": (1,)})
    gamma = battery_gamma(0.05, 2, ReferenceRelease())  # 0.05/(4·2 + 2): the repeat check and batch vs call
    assert gamma == 0.05 / 10
    r = pk.audit_release(ReferenceRelease(), designs=(battery, battery[1]), mechanism=mech, trials="auto",
                         target=1.0, check_calls=20)
    assert r.trials == auto_trials(mech, gamma=gamma, delta=1e-3, target=1.0) == r.reach.trials
    assert separable_epsilon(0.1, r.trials, gamma, 1e-3) >= 1.0 > separable_epsilon(0.1, r.trials - 1, gamma, 1e-3)
    err = capsys.readouterr().err
    assert f"trials='auto': {r.trials:,} per hypothesis per split (2 designs, {8 * r.trials:,} releases); about " in err
    assert err.index("reach: ") < err.index("trials='auto'") and not r.flagged
    with pytest.raises(ValueError, match="target=9.000 is out of reach"):
        pk.audit_release(ReferenceRelease(), designs=(battery, battery[1]), mechanism=mech, trials="auto", target=9)
