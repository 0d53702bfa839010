"""Inputs real users pass to the public calls: each is refused naming the field, the value and the fix, or gives the
right number (never a silently wrong one). Found by trying to break ``pe_kit.audit_*`` (complex / string scores,
NaN one-run scores, a string δ, a tiny σ, a corpus with too few records per user, a missing file, a misspelt
variant, a release function with another signature)."""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

import pe_kit as pk
from pe_kit.attack.variants import VARIANTS, unknown_variant
from pe_kit.audit.accounting import (PRV_MIN_SIGMA, _prv_epsilon, epsilon_ceiling, epsilon_one_release,
                                     epsilon_theory)
from pe_kit.data.records import Corpus, User
from pe_kit.data.splits import empty_arm_message, make_arm

TINY_DATA = Path(__file__).parent / "data" / "blogs-tiny.jsonl.gz"  # 80 bloggers × 16 posts
STUDY = dict(n_canary=5, n_aux=20, n_calibration=25, n_test=25, bank_size=1024, max_probes=16, max_seq_length=32)


def _one_run_game(m: int = 1000, seed: int = 0):
    rng = np.random.default_rng(seed)
    included = rng.random(m) < 0.5
    return rng.normal(0, 1, m) + 2 * included, included


# ------------------------------------------------------------------------------------------ scores-level calls

def test_audit_scores_refuses_complex_and_text_scores_naming_the_argument():
    s = np.random.default_rng(0).normal(size=100)
    with pytest.raises(ValueError, match=r"in_scores holds complex numbers.*z\.real"):
        pk.audit_scores(s + 1j, s)  # numpy alone would drop the imaginary part with a warning
    with pytest.raises(ValueError, match=r"out_scores is not an array of numbers.*'a'.*one float score per trial"):
        pk.audit_scores(s, ["a", "b", "c"])


def test_audit_one_run_nan_and_string_delta_are_named_and_inf_ranks_first():
    scores, included = _one_run_game()
    with pytest.raises(ValueError, match=r"scores holds 1 NaN score\(s\)"):
        pk.audit_one_run(np.r_[scores[:-1], np.nan], included)
    with pytest.raises(ValueError, match=r"delta='1e-5' is not a number.*delta=1e-5"):
        pk.audit_one_run(scores, included, delta="1e-5")
    with pytest.raises(ValueError, match="scores holds complex numbers"):
        pk.audit_one_run(scores + 0j, included)
    # +inf is a rank, not a value: the same bound as the largest finite score in its place
    top = int(np.argmax(scores))
    with_inf, with_big = scores.copy(), scores.copy()
    with_inf[top], with_big[top] = np.inf, 1e300
    a, b = pk.audit_one_run(with_inf, included), pk.audit_one_run(with_big, included)
    assert a.epsilon_lower == b.epsilon_lower > 4 and a.mu_eff == b.mu_eff


def test_audit_one_run_warns_when_the_scores_look_reversed():
    scores, included = _one_run_game()
    with pytest.warns(UserWarning, match=r"ε_lower = 0, but -scores would give 5\.18.*pass -scores.*halve alpha"):
        r = pk.audit_one_run(-scores, included)  # a loss-like statistic: lower = "in"
    assert r.epsilon_lower == 0.0  # the bound asked for is kept; the warning only names the likely mistake
    assert pk.audit_one_run(scores, included).epsilon_lower == pytest.approx(5.1817, abs=1e-3)
    null = np.random.default_rng(1).normal(size=included.size)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no signal either way: no warning
        assert pk.audit_one_run(null, included).epsilon_lower == 0.0


# ------------------------------------------------------------------------------------------ ε_theory at tiny σ

def _remove_delta(eps: float, sigma: float, q: float) -> float:
    """δ(ε) of (1−q)N(0,σ²) + qN(1,σ²) vs N(0,σ²), by quadrature on a fine grid (an independent reference)."""
    x = np.linspace(-12 * sigma, 1 + 12 * sigma, 400_001)
    p = (1 - q) * norm.pdf(x, 0, sigma) + q * norm.pdf(x, 1, sigma)
    return float(np.trapezoid(np.maximum(p - math.exp(eps) * norm.pdf(x, 0, sigma), 0), x))


def test_epsilon_one_release_matches_prv_and_quadrature_and_the_analytic_gaussian():
    for sigma, q in [(1.0, 0.1), (0.5, 0.1), (2.0, 0.3), (1.0, 1.0), (0.1, 0.1)]:
        exact, prv = epsilon_one_release(sigma, q, 1e-5), _prv_epsilon.__wrapped__(sigma, q, 1e-5, 1, 0.01)
        assert exact <= prv + 1e-9 and prv - exact < 0.015  # PRV: eps_error 0.01, an upper estimate (0.012 at σ = 0.1)
    # q = 1: the analytic Gaussian mechanism (Balle & Wang 2018), δ(ε) = Φ(−εσ + 1/2σ) − e^ε Φ(−εσ − 1/2σ)
    e = epsilon_one_release(1.0, 1.0, 1e-5)
    assert norm.cdf(-e + 0.5) - math.exp(e) * norm.cdf(-e - 0.5) == pytest.approx(1e-5, rel=1e-6)
    e = epsilon_one_release(0.3, 0.2, 1e-3)
    assert _remove_delta(e, 0.3, 0.2) == pytest.approx(1e-3, rel=1e-4)


def test_tiny_sigma_no_longer_saturates_near_707_or_allocates_gigabytes():
    # the PRV accountant said 707.49 for both σ = 0.02 and σ = 0.01 and needed > 8 GB below σ ≈ 0.005
    e02, e01 = epsilon_theory(0.02, 0.1, 1e-5), epsilon_theory(0.01, 0.1, 1e-5)
    assert e02 == pytest.approx(1432.684, abs=0.01) and e01 > 3 * e02
    # small-σ asymptote: the q·N(1, σ²) tail carries δ, so ε ≈ (½ + σ z)/σ² + log q with z = Φ̄⁻¹(δ/q)
    for sigma in (0.02, 1e-3, 1e-4):
        approx = (0.5 + sigma * norm.isf(1e-4)) / sigma ** 2 + math.log(0.1)
        assert epsilon_theory(sigma, 0.1, 1e-5) == pytest.approx(approx, rel=2e-3)
    # the attack ceiling of a σ = 0 mechanism (μ_eff in the thousands) goes the same way, in milliseconds
    assert epsilon_ceiling(1e4, 0.1, 1e-5) == pytest.approx(epsilon_one_release(1e-4, 0.1, 1e-5))
    assert epsilon_theory(PRV_MIN_SIGMA, 0.1, 1e-5) == pytest.approx(271.176, abs=0.01)  # PRV from σ = 0.05 up
    with pytest.raises(ValueError, match=r"noise_multiplier=0.01 over releases=3.*σ ≥ 0.05"):
        epsilon_theory(0.01, 0.1, 1e-5, releases=3)


# ------------------------------------------------------------------------------------------ data and variants

def test_a_corpus_without_record_cap_records_names_the_record_cap_that_fits():
    users = [User(f"u{i}", tuple(f"t{j}" for j in range(16 - i % 3)), "x") for i in range(30)]
    corpus = Corpus(users, "own.jsonl")
    msg = empty_arm_message(corpus, "long", 64)
    assert not make_arm(corpus, "long", 64).users
    assert "30 users but none with exactly record_cap=64" in msg and "most records of a user: 16" in msg
    assert "MechanismConfig(record_cap=16)" in msg and "--set record_cap=16" in msg and "record_cap=0" not in msg
    assert "none with 20–40 records" in empty_arm_message(corpus, "short", 40)
    assert "holds no users" in empty_arm_message(Corpus([], "empty.jsonl"), "long", 64)
    # the bundled tiny corpus (16 posts per blogger) with the default m = 64: before, "has 0 users … record_cap=0"
    with pytest.raises(ValueError, match=r"has 80 users but none with exactly record_cap=64.*"
                                         r"MechanismConfig\(record_cap=16\)"):
        pk.audit_mechanism(str(TINY_DATA), study=STUDY, trials=100)


def test_a_missing_file_or_a_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="data file .*nope.jsonl does not exist"):
        pk.audit_mechanism(str(tmp_path / "nope.jsonl"), study=STUDY, trials=100)
    (tmp_path / "mine.jsonl").write_text("")
    with pytest.raises(IsADirectoryError, match=r"is a folder.*mine\.jsonl"):
        pk.audit_mechanism(str(tmp_path), study=STUDY, trials=100)


def test_more_probes_than_bank_entries_is_refused_naming_both():
    from pe_kit.study.world import StudyConfig

    # before: "r=5000 probes cannot come from a pool of pool_size=512; raise pool_size", after the world was built
    with pytest.raises(ValueError, match=r"max_probes=5000 > bank_size=1024.*lower max_probes \(e\.g\. 64\)"):
        pk.audit_mechanism(str(TINY_DATA), study=dict(STUDY, max_probes=5000), trials=100)
    assert StudyConfig(bank_size=64, max_probes=64).max_probes == 64  # r = p is allowed


@pytest.mark.parametrize("typo, meant", [("nonce_mu_eff", "nonce-mu_eff"), ("Nonce", "nonce"), ("nonse", "nonce"),
                                         ("paraphrase_norm", "paraphrase-norm")])
def test_a_misspelt_variant_gets_the_closest_name(typo, meant):
    assert f"did you mean {meant!r}" in str(unknown_variant(typo, VARIANTS))
    with pytest.raises(ValueError, match=f"variant={typo!r} is unknown \\(did you mean {meant!r}\\?\\); use one of"):
        pk.audit_mechanism(None, variant=typo)
    assert "did you mean" not in str(unknown_variant("xyz", VARIANTS))


# ------------------------------------------------------------------------------------------ release functions

def test_a_release_function_with_another_signature_is_refused_before_any_work():
    def two_args(bank, records):
        return np.zeros(len(bank))

    def keyword_only(*, bank, records, owner, n_users, config, rng):
        return np.zeros(len(bank))

    for fn, why in ((two_args, "too many positional arguments"), (keyword_only, "too many positional arguments")):
        # the data path does not exist: the signature check comes first, before the world is built
        with pytest.raises(TypeError, match=rf"{fn.__name__}\(.*\) cannot be called as a PERelease.*{why}.*wrap it"):
            pk.audit_release(fn, "/nonexistent/corpus.jsonl")
    with pytest.raises(FileNotFoundError):  # a right signature reaches the data check
        pk.audit_release(lambda bank, records, owner, n_users, config, rng: np.zeros(len(bank)), "/nonexistent/corpus.jsonl")


# ------------------------------------------------------------------------------------------ mechanisms beyond k = 5

def test_audit_mechanism_serves_any_top_k_and_delta_zero():
    # before: k = 10 failed inside with "NeighborIndex depth 21 < top_k + r = 26: rebuild it deeper" (the world's
    # index was built for k = 5), and δ = 0 (which AuditConfig accepts) failed in the accountant after all the work
    mech = pk.MechanismConfig(top_k=10, record_cap=16)
    r = pk.audit_mechanism(str(TINY_DATA), study=STUDY, trials=2000, mechanism=mech)
    assert r.row["mech_top_k"] == 10
    assert 0.9 < r.mu_eff <= 1 / mech.noise_multiplier + 1e-9  # a nonce canary reaches μ_eff ≈ 1/σ (Eq. 20)
    z = pk.audit_mechanism(str(TINY_DATA), study=STUDY, trials=2000, mechanism=pk.MechanismConfig(record_cap=16),
                           delta=0)
    assert z.epsilon_theory == math.inf and z.epsilon_lower >= 0 and z.row["audit_delta"] == 0


def test_audit_release_refuses_a_world_too_shallow_for_top_k(tiny_world):
    with pytest.raises(ValueError, match=r"mechanism.top_k=100: this World's neighbour index has depth \d+ < "
                                         r"top_k \+ max_probes"):
        pk.audit_release(lambda bank, records, owner, n_users, config, rng: np.zeros(len(bank)), tiny_world,
                         mechanism=pk.MechanismConfig(top_k=100, record_cap=16))


def test_a_shallow_index_names_top_k_and_how_to_build_the_world():
    from pe_kit.pe.mechanism import build_neighbor_index, routes_with_probes

    rng = np.random.default_rng(0)
    bank, records = rng.normal(size=(200, 8)), rng.normal(size=(30, 8))
    index = build_neighbor_index(records, bank, depth=5 + 4)  # built for k = 5 with r = 4 probes
    probes = rng.normal(size=(4, 8))
    assert routes_with_probes(index, records, probes, np.arange(4), top_k=5).shape == (30, 5)
    with pytest.raises(ValueError, match=r"depth 9 < top_k \+ r = 14 \(top_k=10\).*world_for\(config, top_k=10\)"):
        routes_with_probes(index, records, probes, np.arange(4), top_k=10)
