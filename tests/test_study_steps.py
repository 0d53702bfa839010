"""The notebooks' steps on the tiny real-data world: designs, audits with resume, sweeps, App. E checks."""
import numpy as np
import pytest

from pe_kit.settings import AuditConfig, MechanismConfig
from pe_kit.report.results import StepCache
from pe_kit.study import setup
from steps import ablations, audits, checks, designs
from pe_kit.attack.variants import VARIANTS, resolve_variants

MECH = MechanismConfig(record_cap=16)


def test_variants_and_slots():
    assert resolve_variants("all")[0] == "ordinary" and len(resolve_variants("all")) == 8
    assert resolve_variants("nonce, ordinary,nonce") == ["nonce", "ordinary"]
    # what --set / get_preset hand over: a list of names, of comma strings, or ["all"]
    assert resolve_variants(["all"]) == list(VARIANTS)
    assert resolve_variants(["nonce,ordinary", "exact"]) == ["nonce", "ordinary", "exact"]
    with pytest.raises(ValueError, match="'bogus'"):
        resolve_variants(["bogus"])
    # real variants get disjoint blocks of canaries when the split holds them (paper: 40 = 8 × 5) …
    assert designs.canary_slots("ordinary", 5, 40) == [0, 1, 2, 3, 4] and designs.canary_slots("exact", 5, 40) == [5, 6, 7, 8, 9]
    assert designs.canary_slots("paraphrase-mu_eff", 5, 25) == [20, 21, 22, 23, 24]
    # … and share them otherwise; nonce slots only index the synthetic draws
    assert designs.canary_slots("exact", 5, 5) == [0, 1, 2, 3, 4] and designs.canary_slots("nonce-norm", 2, 5) == [0, 1]
    with pytest.raises(ValueError, match="per_variant"):
        designs.canary_slots("ordinary", 0, 5)


def test_study_config_from_params(tiny_config):
    params = {**tiny_config.as_dict(), "bank": "public"}
    cfg = setup.study_config(params, arm="short")
    assert cfg.arm == "short" and cfg.bank == "public" and cfg.n_test == 25 and cfg.max_seq_length == 32
    with pytest.raises(ValueError, match="n_aux"):
        setup.study_config({k: v for k, v in params.items() if k != "n_aux"})
    a = setup.audit_from({"trials": 1000}, 5)
    assert a.trials == 1000 and a.gamma == pytest.approx(0.0025)


def test_design_summary_nonce_reaches_ceiling(tiny_world):
    audit = AuditConfig(trials=10)
    nonce = designs.design_for(tiny_world, "nonce", 0, 0, seed=0, mechanism=MECH)
    s = designs.design_summary(tiny_world, nonce, MECH, audit)
    assert s["canary_votes_on_P"] == pytest.approx(1.0) and s["canary_norm"] == pytest.approx(0.1)
    assert 0.95 < s["mu_eff"] <= s["mu_eff_ceiling"] == 1.0 and s["n_coords"] == 64
    ordinary = designs.design_for(tiny_world, "ordinary", 0, 0, seed=0, mechanism=MECH)
    o = designs.design_summary(tiny_world, ordinary, MECH, audit)
    assert o["canary_votes_on_P"] == pytest.approx(1.0) and o["mu_eff"] < s["mu_eff"]
    assert o["background_voters"] > s["background_voters"]  # natural coordinates are shared with other users


def test_audit_variants_resume_and_shortfall(tiny_world, tmp_path, monkeypatch):
    cache = StepCache(tmp_path / ".steps")
    audit = AuditConfig(trials=2000, n_canaries=2)
    rows, skipped = audits.audit_variants(tiny_world, ["ordinary", "nonce"], 2, MECH, audit, 0, cache, progress=False,
                                     extra={"experiment": "table2"})
    assert [r["variant"] for r in rows] == ["ordinary", "ordinary", "nonce", "nonce"] and skipped == []
    assert [r["canary_slot"] for r in rows[:2]] == [0, 1] and all(r["experiment"] == "table2" for r in rows)
    assert all(0 <= r["epsilon_lower"] <= r["epsilon_theory"] for r in rows) and cache.misses == 4
    again, _ = audits.audit_variants(tiny_world, ["ordinary", "nonce"], 2, MECH, audit, 0, cache, progress=False)
    assert cache.hits == 4 and [r["epsilon_lower"] for r in again] == [r["epsilon_lower"] for r in rows]

    from pe_kit.text.generators.base import PoolShortfallError

    real = designs.make_design

    def flaky(world, variant, slot, rng, **kw):
        if slot == 1:
            raise PoolShortfallError("paraphrase pool: 3 of 64 slots still missing", [], np.zeros(0), 3)
        if variant == "exact":
            raise NotImplementedError("exact is not implemented yet")
        return real(world, variant, slot, rng, **kw)

    monkeypatch.setattr(designs, "make_design", flaky)
    with pytest.warns(UserWarning, match="skipped"):
        rows, skipped = audits.audit_variants(tiny_world, ["exact", "ordinary"], 2, MECH, audit, 1, None, progress=False)
    assert [(r["variant"], r["canary_slot"]) for r in rows] == [("ordinary", 0)]
    assert skipped[0] == "exact" and skipped[1].startswith("ordinary#1: pool shortfall")


def test_sweep_keeps_the_design_and_moves_the_setting(tiny_world):
    audit = AuditConfig(trials=2000, n_canaries=1)
    rows, _ = ablations.sweep(tiny_world, ["nonce"], "noise_multiplier", [0.5, 2.0], MECH, audit, 0)
    assert [r["mech_noise_multiplier"] for r in rows] == [0.5, 2.0] and rows[0]["canary_id"] == rows[1]["canary_id"]
    assert rows[0]["mu_eff"] > 1.5 and rows[1]["mu_eff"] < 0.5  # μ_eff ≤ 1/σ, near it for a nonce canary
    assert rows[0]["epsilon_theory"] > rows[1]["epsilon_theory"] and rows[0]["experiment"] == "sigma_sweep"
    with pytest.raises(ValueError, match="field"):
        ablations.sweep(tiny_world, ["nonce"], "top_k", [1], MECH, audit, 0)


def test_llr_checks_identities_hold_on_real_contributions(tiny_world):
    both = [designs.design_for(tiny_world, v, 0, 0, seed=0, mechanism=MECH) for v in ("ordinary", "nonce")]
    rows, draws = checks.llr_checks(tiny_world, both, MECH, AuditConfig(trials=10), 20_000,
                               np.random.default_rng(0), ceiling_sigmas=(0.5, 1.0), full_path_trials=500)
    by = {(r["variant"], r["check"]): r for r in rows}
    for v in ("ordinary", "nonce"):
        for check in ("h0_mean", "h0_var", "inc_mean", "inc_var", "mixture_identity", "canary_norm",
                      "mu_eff_ceiling_sigma0.5", "mu_eff_ceiling_sigma1", "full_vs_scalar"):
            assert by[(v, check)]["passed"], (v, check, by[(v, check)])
        mu = draws[v]["mu"]
        assert by[(v, "h0_mean")]["expected"] == pytest.approx(-mu * mu / 2)
    assert by[("nonce", "gaussian_ks")]["observed"] < 0.02  # nonce scores are essentially Gaussian


def test_tightness_uses_the_engine(tiny_world):
    rows = ablations.tightness(tiny_world, "nonce", [1000, 20_000], MECH, AuditConfig(trials=10, n_canaries=1), 0)
    assert [r["trials"] for r in rows] == [1000, 20_000] and rows[0]["source"] == "pe_kit.audit.sweep.tightness_curve"
    assert rows[0]["epsilon_expected"] <= rows[1]["epsilon_expected"] < rows[1]["epsilon_theory"]
    assert all(0 <= r["epsilon_lower"] <= r["epsilon_theory"] for r in rows)
    with pytest.raises(ValueError, match="tightness_trials"):
        ablations.tightness(tiny_world, "nonce", [], MECH, AuditConfig(trials=10), 0)


def test_paraphrase_examples_pair_each_probe_with_its_source(tiny_world):
    from pe_kit.study.world import make_design

    design = make_design(tiny_world, "paraphrase", 0, np.random.default_rng(0), pool_size=64)
    ex = designs.paraphrase_examples(design, n=4)
    assert len(ex) == 4 and ex["record"].is_unique  # one per distinct source record first
    for r in ex.itertuples():
        assert r.source == design.canary_texts[r.record] and r.paraphrase in design.probe_texts
        assert r.paraphrase != r.source and r.generator == design.info["pool_generator"]
    with pytest.raises(ValueError, match="paraphrase"):
        designs.paraphrase_examples(make_design(tiny_world, "ordinary", 0, np.random.default_rng(0)))


def test_audit_from_refuses_a_fractional_or_zero_canary_count():
    # max(1, int(n)) turned 2.5 into 2 canaries (γ = α/8, not α/10) and 0 into 1, both silently
    with pytest.raises(ValueError, match=r"n_canaries=2.5 is not an integer ≥ 1 \(no fractional part allowed: use 2 or 3\)"):
        setup.audit_from({"trials": 1000}, 2.5)
    with pytest.raises(ValueError, match=r"n_canaries=0 is out of range: use an integer ≥ 1"):
        setup.audit_from({"trials": 1000}, 0)
    assert setup.audit_from({"trials": 1000}, 5.0).n_canaries == 5
