"""The public calls (pe_kit.audit_scores / audit_one_run / audit_mechanism) give the kit's own numbers.

Each is checked against the path it wraps on the same inputs (the two-call calibrate_threshold + evaluate_threshold,
one_run._one_run_audit, the World → make_design → audit_design chain), plus null / direction invariants and the
import footprint of scores-only use.
"""
from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import numpy as np
import pytest

import pe_kit
from pe_kit.audit.bounds import calibrate_threshold, evaluate_threshold
from pe_kit.audit.one_run import idealised_scores

TINY = dict(n_canary=5, n_aux=20, n_calibration=25, n_test=25, bank_size=1024, max_probes=16, max_seq_length=32)


def _gaussian_llr(mu: float, n: int, seed: int):
    rng = np.random.default_rng(seed)
    return rng.normal(mu * mu / 2, mu, n), rng.normal(-mu * mu / 2, mu, n)


@pytest.mark.parametrize("n_canaries", [1, 5])
def test_audit_scores_agrees_with_the_two_call_path(n_canaries):
    """Same scores, the split audit_scores documents (a seeded permutation of each hypothesis, in-scores first),
    γ = α/(4·n_canaries): ε_lower, threshold, direction and every count equal calibrate + evaluate by hand."""
    s1, s0 = _gaussian_llr(1.0, 40_001, 3)
    r = pe_kit.audit_scores(s1, s0, delta=1e-5, alpha=0.05, n_canaries=n_canaries, seed=7)
    rng = np.random.default_rng(7)
    p1, p0 = rng.permutation(s1.size), rng.permutation(s0.size)
    c = round(s1.size * 0.5)
    gamma = 0.05 / (4 * n_canaries)
    # the same threshold rule at the same q (audit_scores' default sample_rate = 1; threshold_rules, issue 33)
    cal = calibrate_threshold(s0[p0[:c]], s1[p1[:c]], gamma, 1e-5, sample_rate=1.0)
    test = evaluate_threshold(s0[p0[c:]], s1[p1[c:]], cal.threshold, gamma, 1e-5, cal.direction)
    assert r.epsilon_lower == test.epsilon_lower > 0.5 and r.row["calibration_rule"] == cal.rule
    assert (r.threshold, r.direction, r.tpr, r.fpr) == (cal.threshold, cal.direction, test.tpr, test.fpr)
    assert dict(r.counts) == {"true_pos": test.true_pos, "false_pos": test.false_pos, "n_h1": 20_001, "n_h0": 20_001}
    assert r.row["gamma"] == gamma and r.settings["audit_n_canaries"] == n_canaries
    assert math.isnan(r.epsilon_theory) and math.isnan(r.mu_eff)


def test_audit_scores_null_gives_zero_and_direction_is_found():
    """Null (no signal): ε_lower = 0. Negated scores (H1 below H0): the same bound, through direction −1."""
    rng = np.random.default_rng(1)
    null = pe_kit.audit_scores(rng.normal(0, 1, 20_000), rng.normal(0, 1, 20_000), delta=1e-5)
    assert null.epsilon_lower == 0.0
    s1, s0 = _gaussian_llr(1.0, 20_000, 2)
    up, down = pe_kit.audit_scores(s1, s0), pe_kit.audit_scores(-s1, -s0)
    assert up.direction == 1 and down.direction == -1
    # not bit-equal: {−s ≤ −t} is {s ≥ t}, one order statistic more than {s > t}, and the bound sits in a tail of a
    # few counts (here 2.06 against 2.15)
    assert down.epsilon_lower == pytest.approx(up.epsilon_lower, abs=0.15) and up.epsilon_lower > 1.5


def test_audit_scores_with_the_mechanism_reports_epsilon_theory():
    s1, s0 = _gaussian_llr(1.0, 2_000, 0)
    r = pe_kit.audit_scores(s1, s0, delta=1e-5, noise_multiplier=1.0, sample_rate=0.1)
    assert r.epsilon_theory == pytest.approx(1.695, abs=0.003)  # paper: σ=1, q=0.1, δ=1e-5
    assert r.row["mech_noise_multiplier"] == 1.0 and r.row["mech_sample_rate"] == 0.1


def test_the_result_is_frozen_and_a_csv_row():
    s1, s0 = _gaussian_llr(1.0, 2_000, 0)
    r = pe_kit.audit_scores(s1, s0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.epsilon_lower = 9.0
    row = r.row
    row["epsilon_lower"] = 9.0  # a copy: the result keeps its own
    assert r.row["epsilon_lower"] == r.epsilon_lower != 9.0
    for k in ("epsilon_lower", "epsilon_theory", "mu_eff", "tpr", "fpr", "threshold", "test_true_pos",
              "test_false_pos", "test_n_h1", "test_n_h0", "gamma", "audit_delta"):
        assert k in r.row


def test_every_audit_is_one_type_whose_row_is_the_csv_row():
    """Threshold and one-run audits and a calibration record are all ``pe_kit.Audit``; ``row`` has the CSV's columns
    (fields left None have none), and ``Audit.from_row`` rebuilds the same row."""
    s1, s0 = _gaussian_llr(1.0, 2_000, 0)
    r = pe_kit.audit_scores(s1, s0, noise_multiplier=1.0, sample_rate=0.1)
    one = pe_kit.audit_one_run(*idealised_scores(2.0, 1.0, 200, np.random.default_rng(0)))
    assert all(isinstance(a, pe_kit.Audit) for a in (r, r.calibration, one)) and one.calibration is None
    split = ("threshold", "epsilon", "branch", "true_pos", "false_pos", "n_h1", "n_h0", "tpr", "fpr", "tpr_lower",
             "fpr_upper", "tnr_lower", "fnr_upper", "direction")
    shift = [f"fpr_{s}{b}" for s in ("calibration", "test") for b in ("", "_lower", "_upper")]
    assert list(r.row) == ["epsilon_lower", "epsilon_theory", "mu_eff", "threshold", "tpr", "fpr",
                           *(f"calibration_{k}" for k in (*split, "rule")), *(f"test_{k}" for k in split), "method",
                           *shift, "population_shift", "gamma", "audit_alpha", "audit_delta", "audit_n_canaries",
                           "calibration_fraction", "seed", "mech_noise_multiplier", "mech_sample_rate"]
    assert r.row["test_epsilon"] == r.epsilon_lower and r.row["calibration_epsilon"] == r.calibration.epsilon_lower
    assert (r.gamma, r.delta, r.rule, r.calibration.rule) == (0.05 / 4, 1e-5, "", r.row["calibration_rule"])
    assert pe_kit.Audit.from_row(r.row).row == r.row
    assert "test_true_pos" not in one.row and one.row["guesses"] == one.counts["guesses"] and one.true_pos is None
    assert not r.violation and r.epsilon_lower < r.epsilon_theory and not one.violation  # no ε_theory: no violation


@pytest.mark.parametrize("kwargs, match", [
    (dict(delta=1.5), r"delta=1.5 is out of range"),
    (dict(alpha=0), r"alpha=0 is out of range"),
    (dict(n_canaries=0), r"n_canaries=0 is out of range"),
    (dict(calibration_fraction=1.0), r"calibration_fraction=1.0 must lie in \(0, 1\)"),
])
def test_audit_scores_refuses_bad_settings_naming_them(kwargs, match):
    s1, s0 = _gaussian_llr(1.0, 100, 0)
    with pytest.raises(ValueError, match=match):
        pe_kit.audit_scores(s1, s0, **kwargs)


def test_audit_scores_refuses_bad_scores():
    with pytest.raises(ValueError, match="in_scores has 1 trial"):
        pe_kit.audit_scores([1.0], [0.0, 1.0])
    with pytest.raises(ValueError, match="out_scores holds 1 NaN"):
        pe_kit.audit_scores([1.0, 2.0], [0.0, np.nan])
    with pytest.raises(ValueError, match="1-D"):
        pe_kit.audit_scores(np.zeros((2, 2)), [0.0, 1.0])


@pytest.mark.parametrize("method", ["fdp", "steinke"])
def test_audit_one_run_is_one_run_audit(method):
    from pe_kit.audit.one_run import idealised_scores, _one_run_audit

    s, inc = idealised_scores(2.0, 1.0, 1000, np.random.default_rng(0))
    ref = _one_run_audit(s, inc, delta=1e-5, sample_rate=1.0)[method]
    r = pe_kit.audit_one_run(s, inc, delta=1e-5, sample_rate=1.0, method=method)
    assert r.epsilon_lower == ref.epsilon_lower > 2.0 and r.method == method
    assert dict(r.counts) == {"guesses": ref.info["guesses"], "correct": ref.info["correct"],
                              "k_plus": ref.info["k_plus"], "k_minus": ref.info["k_minus"], "m": 1000,
                              "n_included": int(inc.sum())}
    top = np.argsort(-s, kind="stable")[:ref.info["k_plus"]]  # the "in" guesses
    assert r.tpr == inc[top].sum() / inc.sum() and r.fpr == (~inc[top]).sum() / (~inc).sum()
    assert r.threshold == s[top[-1]]
    with pytest.raises(ValueError, match="method='gdp' is unknown"):
        pe_kit.audit_one_run(s, inc, method="gdp")


def test_scores_only_use_imports_no_torch_dask_onnx_or_jupyter():
    code = ("import sys, numpy as np, pe_kit\n"
            "rng = np.random.default_rng(0)\n"
            "pe_kit.audit_scores(rng.normal(1, 1, 1000), rng.normal(0, 1, 1000))\n"
            "from pe_kit.audit.one_run import idealised_scores\n"
            "pe_kit.audit_one_run(*idealised_scores(2.0, 1.0, 200, rng), method='steinke')\n"
            "heavy = ('torch', 'dask', 'distributed', 'onnx', 'onnxruntime', 'papermill', 'nbformat', 'jupyter_client',"
            " 'opacus', 'sentence_transformers', 'pandas', 'matplotlib')\n"
            "print(sorted(m for m in heavy if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    bare = subprocess.run([sys.executable, "-c", "import sys, pe_kit; print(sorted(m for m in sys.modules if "
                           "m.startswith('pe_kit')))"], capture_output=True, text=True, check=True).stdout
    assert bare.strip() == "['pe_kit']"


def test_audit_mechanism_is_the_world_design_audit_chain():
    """audit_mechanism at σ = 0.8, q = 0.05 equals build_world → make_design → audit_design with the same seeds; its
    ε_theory is the accountant's at (0.8, 0.05, δ) and the nonce canary's μ_eff is near the ceiling 1/σ."""
    from .conftest import TINY_DATA

    from pe_kit.audit.accounting import epsilon_theory
    from pe_kit.settings import AuditConfig
    from pe_kit.study.setup import world_for
    from pe_kit.study.world import StudyConfig, audit_design, make_design

    mech = pe_kit.MechanismConfig(noise_multiplier=0.8, sample_rate=0.05, record_cap=16)
    r = pe_kit.audit_mechanism(str(TINY_DATA), "nonce", mechanism=mech, trials=20_000, seed=0, study=TINY)
    world = world_for(StudyConfig(data=str(TINY_DATA), seed=0, record_cap=16, **TINY), progress=False)
    rng = np.random.default_rng([0, 30])
    audit = AuditConfig(trials=20_000, n_canaries=1)
    row = audit_design(world, make_design(world, "nonce", 0, rng, mechanism=mech, audit=audit), mech, audit, rng)
    assert r.epsilon_lower == row["epsilon_lower"] and r.mu_eff == row["mu_eff"] and r.threshold == row["threshold"]
    # the README's number (same settings); 0.38 with the argmax rule before issue 33, 0.385 with its default rule
    assert r.epsilon_lower == pytest.approx(0.385, abs=0.005)
    assert r.epsilon_theory == pytest.approx(epsilon_theory(0.8, 0.05, 1e-5)) and r.epsilon_theory > 1.8
    assert 0.95 / 0.8 < r.mu_eff <= 1 / 0.8 + 1e-9
    assert r.settings["mech_noise_multiplier"] == 0.8 and r.settings["mech_sample_rate"] == 0.05
    assert r.settings["audit_n_canaries"] == 1 and r.row["gamma"] == 0.05 / 4
    assert r.row["epsilon_lower_per_canary"] == [r.epsilon_lower]
    two = pe_kit.audit_mechanism(str(TINY_DATA), "nonce", mechanism=mech, trials=20_000, seed=0, study=TINY, canaries=2)
    per = two.row["epsilon_lower_per_canary"]  # two fresh nonce canaries at γ = α/8; the reported one is the larger
    assert len(per) == 2 and two.epsilon_lower == max(per) > 0.2 and two.row["canary_id"].startswith("nonce-")
    assert two.row["gamma"] == 0.05 / 8 and two.settings["audit_n_canaries"] == 2


def test_audit_mechanism_refuses_bad_arguments_before_any_work():
    with pytest.raises(ValueError, match="variant='nonse' is unknown"):
        pe_kit.audit_mechanism(None, "nonse")
    with pytest.raises(ValueError, match=r"study=\{'record_cap': …\} is not accepted"):
        pe_kit.audit_mechanism(None, "nonce", study={"record_cap": 8})
    with pytest.raises(TypeError, match="is not a MechanismConfig"):
        pe_kit.audit_mechanism(None, "nonce", mechanism={"noise_multiplier": 0.8})


def test_scores_only_use_runs_with_nothing_but_numpy_and_scipy_installed(tmp_path):
    """A site with only numpy, scipy and pe_kit (python -S: no site-packages): audit_scores and audit_one_run work,
    and asking for ε_theory says which extra to install."""
    from pathlib import Path

    import scipy

    site = tmp_path / "site"
    site.mkdir()
    for mod in (np, scipy):
        root = Path(mod.__file__).resolve().parent
        for p in (root, root.parent / f"{root.name}.libs"):
            if p.exists():
                (site / p.name).symlink_to(p)
    (site / "pe_kit").symlink_to(Path(pe_kit.__file__).resolve().parent)
    code = ("import numpy as np, pe_kit\n"
            "rng = np.random.default_rng(0)\n"
            "r = pe_kit.audit_scores(rng.normal(0.5, 1, 20000), rng.normal(-0.5, 1, 20000))\n"
            "from pe_kit.audit.one_run import idealised_scores\n"
            "o = pe_kit.audit_one_run(*idealised_scores(2.0, 1.0, 500, rng))\n"
            "print(r.epsilon_lower > 0.5, o.epsilon_lower > 1)\n"
            "try:\n    import torch\nexcept ImportError:\n    print('no torch')\n"
            "try:\n    pe_kit.audit_scores([1.0, 2.0], [0.0, 1.0], noise_multiplier=1.0)\n"
            "except ImportError as e:\n    print('pe_kit[accounting]' in str(e))\n")
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "no", "torch", "True"]


def test_audit_scores_tight_case_reaches_the_paper_level():
    """Tight case: a perfect nonce canary, μ_eff = 1, q = 0.1, γ = α/(5·4), 10⁶ trials per hypothesis per split:
    ε_lower lies in the simulated 0.72–1.32 band around the expected 0.99 (audit.expectations), below ε_theory = 1.695."""
    from pe_kit.audit.expectations import expected_epsilon
    from pe_kit.audit.trials import nonce_problem, simulate_scores

    prob = nonce_problem(1.0, 0.1)
    vals = []
    for seed in range(3):
        rng = np.random.default_rng(seed)
        s0, s1 = simulate_scores(prob, 0, 2_000_000, rng), simulate_scores(prob, 1, 2_000_000, rng)
        vals.append(pe_kit.audit_scores(s1, s0, delta=1e-5, alpha=0.05, n_canaries=5, seed=seed).epsilon_lower)
    assert expected_epsilon(1.0, 0.1, 1_000_000, 0.0025, 1e-5) == pytest.approx(0.99, abs=0.01)
    assert all(0.72 <= v <= 1.32 for v in vals) and max(vals) < 1.695
    assert np.median(vals) == pytest.approx(0.99, abs=0.1)  # measured: 0.974, 0.943, 1.043


def test_audit_mechanism_runs_the_beyond_paper_variant(monkeypatch):
    """composed-mu_eff is accepted by the one-call audit (it is in ALL_VARIANTS) and marked beyond the paper; its
    μ_eff stays under the ceiling 1/σ and ε_lower under ε_theory."""
    from .conftest import TINY_DATA

    import pe_kit.attack.composed_probes as composed

    monkeypatch.setattr(composed, "DEFAULT_CONFIG", composed.ComposedConfig(pool_size=96, hub_sizes=(2, 4),
                                                                            refine_rounds=0))
    mech = pe_kit.MechanismConfig(record_cap=16)
    r = pe_kit.audit_mechanism(str(TINY_DATA), "composed-mu_eff", mechanism=mech, trials=20_000, seed=0, study=TINY)
    assert r.row["variant"] == "composed-mu_eff" and r.row["beyond_paper"].startswith("beyond the paper")
    assert 0.5 < r.mu_eff <= 1 / mech.noise_multiplier and 0 <= r.epsilon_lower <= r.epsilon_theory
    with pytest.raises(ValueError, match="did you mean 'composed-mu_eff'"):
        pe_kit.audit_mechanism(str(TINY_DATA), "composed-mueff", mechanism=mech, study=TINY)
