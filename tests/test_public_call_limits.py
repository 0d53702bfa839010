"""What a user passes at the edge of the public calls: an ``Audit`` built by hand, a release count or a trial count
beyond what the computation can take, a core-only install. Each is refused naming the field, the value and the fix,
before any long work; never a silent wrong number, a hang or a bare traceback."""
from __future__ import annotations

import copy
import dataclasses
import pickle
import re

import pytest

import pe_kit as pk


@pytest.mark.parametrize("eps", [None, -0.1, float("nan"), True, "1.2"])
def test_an_audit_refuses_an_epsilon_lower_that_is_no_bound(eps):
    with pytest.raises(ValueError) as err:
        pk.Audit(epsilon_lower=eps)
    assert str(err.value) == (f"epsilon_lower={eps!r} must be a number ≥ 0 (natural log; 0 when the trials show no "
                              "leakage): pass the bound of Eq. 28 or of a one-run audit")


def test_an_audits_info_is_read_only_and_its_row_unchanged():
    given = {"variant": "nonce", "seed": 0}
    a = pk.Audit(epsilon_lower=0.0, mu_eff=1.0, info=given)
    given["seed"] = 7  # the caller's dict is not the audit's
    with pytest.raises(TypeError, match="does not support item assignment"):
        a.info["seed"] = 7
    assert a.row == {"epsilon_lower": 0.0, "mu_eff": 1.0, "variant": "nonce", "seed": 0} and type(a.row) is dict
    changed = dataclasses.replace(a, info={**a.info, "seed": 7})
    assert changed.row["seed"] == 7 and a.row["seed"] == 0
    for back in (pickle.loads(pickle.dumps(a)), copy.deepcopy(a)):  # a read-only view alone would not pickle
        assert repr(back) == repr(a) and back.row == a.row


def test_a_release_count_beyond_the_prv_grid_is_refused_not_a_memory_error():
    with pytest.raises(ValueError) as err:  # 5.4·10⁹ grid points: a MemoryError (or the OOM killer) before
        pk.epsilon_theory(1, 0.1, 1e-5, releases=1e6)
    assert str(err.value) == (
        "releases=1000000 at noise_multiplier=1, sample_rate=0.1, delta=1e-05: the PRV accountant's grid would hold "
        "5.4e+09 points (≈ 1,073 GB), more than the 2e+07 it computes here (σ = 1, q = 0.1: up to ≈ 10,000 releases); "
        "use fewer releases or a larger eps_error (the grid shrinks as 1/eps_error), or bound ε from above with "
        "opacus.accountants.RDPAccountant (valid, looser)")
    from pe_kit.audit.accounting import epsilon_ceiling

    with pytest.raises(ValueError, match=r"^releases=100000 at noise_multiplier=1, .* 2e\+08 points"):
        epsilon_ceiling(1.0, 0.1, 1e-5, releases=10**5)  # the ceiling's accountant, at σ = 1/μ_eff
    assert pk.epsilon_theory(1, 0.1, 1e-5, releases=3) == pytest.approx(2.0972, abs=1e-3)  # a few releases: as before


def test_trials_beyond_the_expected_epsilons_range_are_refused_not_a_hang(capsys):
    from pe_kit.audit.expectations import expected_epsilon
    from pe_kit.run.cli import main

    assert main(["explore", "--trials", "1e30"]) == 2  # hung in scipy's betaincinv before
    assert capsys.readouterr().err == ("pe-kit: trials=1e+30 is out of range: use an integer ≥ 1, at most 2**53 = "
                                       "9,007,199,254,740,992 (larger integers are not exact in float64)\n")
    assert main(["explore", "--trials", "1e13"]) == 2  # an exact integer, beyond what expected_epsilon computes
    assert capsys.readouterr().err == (
        "pe-kit: trials=1e+13 is out of range: an expected ε_lower is computed for 1 to 1e+12 trials per hypothesis "
        "(its Clopper–Pearson inverses do not return for far more); for more, use trials=None, the n → ∞ limit they "
        "approach (pe-kit explore: the line 'ε as trials → ∞')\n")
    with pytest.raises(ValueError, match=r"^trials=1e\+13 is out of range"):
        expected_epsilon(1.0, 0.1, 10**13)
    at_most = expected_epsilon(1.0, 0.1, 10**12)  # the range's end: within 0.002 of the n → ∞ limit (1.6845)
    assert at_most == pytest.approx(1.6831, abs=1e-4) and at_most < expected_epsilon(1.0, 0.1, None)


def test_audit_mechanism_on_a_core_install_names_the_study_extra(monkeypatch):
    """``pip install -e .`` (numpy + scipy) lacks opacus (ε_theory): the call says which extra to install, before any
    work."""
    import sys

    monkeypatch.setitem(sys.modules, "opacus", None)  # import opacus → ModuleNotFoundError, as without it
    with pytest.raises(ImportError) as err:
        pk.audit_mechanism("no-such-corpus.jsonl")
    assert type(err.value) is ImportError and str(err.value) == (
        "pe_kit.audit_mechanism needs opacus, which this install lacks: auditing a corpus needs the study extra, "
        'pip install -e ".[study]" (or the main install, scripts/bootstrap.sh)')


def test_looks_and_trials_that_are_no_count_are_refused_naming_them():
    """None, NaN, ∞, a bool or a string for ``looks`` or ``trials`` name the argument (were raw TypeError /
    OverflowError from ``int()``) in the settings check's words; numpy integers are counts."""
    import numpy as np

    from pe_kit.audit.blackbox import look_sizes

    said = {None: "=null is not accepted: use an integer ≥ 1", float("nan"): "=nan is not an integer ≥ 1 (must be "
            "finite)", float("inf"): "=inf is not an integer ≥ 1 (must be finite)", True: "=True is not an integer ≥ 1 "
            "(true/false is not a number): pass an integer", "3": "='3' is not an integer ≥ 1: pass an integer",
            1.5: "=1.5 is not an integer ≥ 1 (no fractional part allowed: use 1 or 2)"}  # settings.check_param's words
    for bad, words in said.items():
        with pytest.raises(ValueError, match=rf"^looks{re.escape(words)}$"):
            look_sizes(1000, bad)
        example = ", e.g. 1000000" if words.endswith("pass an integer") else ""  # trials is a declared setting
        with pytest.raises(ValueError, match=rf"^trials{re.escape(words + example)}$"):
            look_sizes(bad, 1)
    assert look_sizes(np.int64(1001), np.int64(3)) == [251, 501, 1001]


def test_auto_trials_hold_every_look():
    """``trials="auto"`` with more looks than its pick can double into runs at 2^(looks − 1) trials (one per look)
    instead of refusing a budget the user never passed, after the battery was built."""
    import numpy as np

    from pe_kit.attack.bug_canaries import concentrated_design
    from pe_kit.pe.release_protocol import ReferenceRelease
    from pe_kit.study.release_audit import audit_release
    from steps.implementation_audit import SUITE_MECHANISM

    small = {"n_aux": 20, "n_calibration": 25, "n_test": 25, "bank_size": 64}
    d1, d2 = (concentrated_design(np.random.default_rng(s), **small) for s in (0, 1))
    r = audit_release(ReferenceRelease(), None, mechanism=SUITE_MECHANISM, designs=([d1, d2], d1), trials="auto",
                      looks=10, check_calls=50, show_progress=False)
    assert [(row["trials"], row["looks"]) for row in r.rows] == [(512, 10), (512, 10)]


def test_tiny_sigma_and_huge_counts_are_refused_naming_the_field():
    """σ below 10⁻⁸ (float64 overflowed inside the one-release root-finder: a raw OverflowError) and an int beyond
    float64 are refused by name."""
    from pe_kit.audit.accounting import epsilon_ceiling
    from pe_kit.settings import check_param

    for call in (lambda: pk.epsilon_theory(1e-12, 0.1, 1e-5), lambda: pk.epsilon_theory(1e-12, 0.1, 1e-5, releases=2),
                 lambda: epsilon_ceiling(1e12, 0.1, 1e-3)):
        with pytest.raises(ValueError, match=r"^noise_multiplier=1e-12 is below 1e-08: ε ≈ 1/\(2σ²\) > 10¹⁵"):
            call()
    assert pk.epsilon_theory(1e-8, 0.1, 1e-5) == pytest.approx(5.0e15, rel=1e-3)
    with pytest.raises(ValueError, match=r"^trials=1000000000000.* is not an integer ≥ 1 .*\(must be finite\)"):
        check_param("trials", 10**400)


def test_a_deep_copy_of_an_audit_shares_nothing():
    from pe_kit.audit.outcome import Audit

    a = Audit(0.3, info={"lst": [1]}, calibration=Audit(0.2, info={"c": [0]}))
    c = copy.deepcopy(a)
    c.info["lst"].append(9)
    c.calibration.info["c"].append(9)
    assert a.info["lst"] == [1] and a.calibration.info["c"] == [0] and c.calibration is not a.calibration


def test_canaries_none_and_an_unknown_multiround_variant_are_refused_by_name():
    """``canaries=None`` is no count (it does not fall back to the audit's default), and notebook 06's ``variant``
    takes only the two canaries it designs, at ``--set`` before any notebook runs."""
    from pe_kit.run.presets import get_preset

    with pytest.raises(ValueError, match=r"^n_canaries=null is not accepted"):
        pk.audit_mechanism(canaries=None)
    with pytest.raises(ValueError, match=r"variant='Nonce' is not accepted: use one of nonce, ordinary"):
        get_preset("tiny", {"variant": "Nonce"})
