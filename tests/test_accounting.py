"""ε_theory from Opacus's PRV accountant against the paper's numbers (§3, App. D)."""
import numpy as np
import pytest

from pe_kit.audit.accounting import (
    GaussianReleases,
    epsilon_theory,
    epsilon_theory_prefixes,
)


def test_single_release_matches_paper():
    assert epsilon_theory(1.0, 0.1, 1e-5) == pytest.approx(1.695, abs=0.003)


def test_prefixes_match_paper_multi_round():
    expected = [1.345, 1.540, 1.682, 1.800, 1.905, 2.000]
    got = epsilon_theory_prefixes(1.1088, 0.1, 1e-5, 6)
    assert got == pytest.approx(expected, abs=0.003)


def test_epsilon_is_never_negative():
    """At σ = 5, q = 1, δ = 0.1 the Gaussian mechanism is (0, δ)-DP (exact ε is 0 for σ ≥ 3.98 at that δ); the PRV
    grid returns −0.031 there, which would flag any ε_lower ≥ 0 as a violation."""
    from pe_kit.audit.accounting import epsilon_one_release

    assert epsilon_theory(5.0, 1.0, 0.1) == 0.0 == epsilon_one_release(5.0, 1.0, 0.1)
    assert epsilon_theory(3.0, 1.0, 0.1) > 0


def test_more_noise_less_epsilon():
    assert epsilon_theory(2.0, 0.1, 1e-5) < epsilon_theory(1.0, 0.1, 1e-5) < epsilon_theory(0.8, 0.1, 1e-5)


@pytest.mark.parametrize("kwargs, field", [
    (dict(noise_multiplier=0.0, sample_rate=0.1), "noise_multiplier"),
    (dict(noise_multiplier=1.0, sample_rate=0.0), "sample_rate"),
    (dict(noise_multiplier=1.0, sample_rate=0.1, releases=0), "releases"),
    (dict(noise_multiplier=float("nan"), sample_rate=0.1), "noise_multiplier"),
    (dict(noise_multiplier=1.0, sample_rate=float("nan")), "sample_rate"),
])
def test_bad_event_names_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        GaussianReleases(**kwargs)


def test_bad_delta():
    with pytest.raises(ValueError, match="delta"):
        epsilon_theory(1.0, 0.1, 0.0)


@pytest.mark.parametrize("sigma, q, delta, match", [
    (float("inf"), 0.1, 1e-5, r"noise_multiplier=inf is not a number ≥ 0 \(must be finite\)"),  # ran for minutes
    (1.0, float("inf"), 1e-5, r"sample_rate=inf is not a number in \(0, 1\] \(must be finite\)"),
    (1.0, 0.1, float("nan"), r"delta=nan is not a number in \[0, 1\) \(must be finite\)"),
])
def test_non_finite_settings_refused_before_the_accountant(sigma, q, delta, match, monkeypatch):
    import pe_kit.audit.accounting as acc

    monkeypatch.setattr(acc, "_prv_epsilon", lambda *a: pytest.fail("the accountant ran"))
    with pytest.raises(ValueError, match=match):
        epsilon_theory(sigma, q, delta)


# ---------------------------------------------------------------------------------------------- attack ceiling

def _gaussian_epsilon(mu, delta):
    """ε of the (un-subsampled) Gaussian mechanism with μ = Δ/s at δ, from Balle & Wang (2018)'s exact
    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)."""
    from scipy import optimize, stats

    f = lambda e: stats.norm.cdf(-e / mu + mu / 2) - np.exp(e) * stats.norm.cdf(-e / mu - mu / 2) - delta
    return 0.0 if f(0.0) <= 0 else optimize.brentq(f, 0.0, 50.0)


@pytest.mark.parametrize("sigma, q, delta", [(1.0, 0.1, 1e-5), (1.1088, 0.1, 1e-5), (2.0, 0.3, 1e-3)])
def test_ceiling_at_perfect_canary_is_epsilon_theory(sigma, q, delta):
    from pe_kit.audit.accounting import epsilon_ceiling

    # equal up to the accountant's eps_error (1/(1/σ) may differ from σ in the last bit: another PRV grid)
    assert epsilon_ceiling(1 / sigma, q, delta) == pytest.approx(epsilon_theory(sigma, q, delta), abs=0.01)


def test_ceiling_vanishes_with_mu_eff():
    from pe_kit.audit.accounting import epsilon_ceiling, tightness

    mus = [0.3, 0.1, 0.03, 0.01]
    ceil = [epsilon_ceiling(m, 0.1, 1e-5) for m in mus]
    assert all(a > b for a, b in zip(ceil, ceil[1:]))  # strictly decreasing as μ_eff → 0
    for m, c in zip(mus, ceil):  # subsampling only helps: ≤ the full Gaussian's ε at μ, which → 0 like μ√(2 log 1/δ)
        assert 0 < c <= _gaussian_epsilon(m, 1e-5) + 0.01 * m
    assert ceil[-1] < 0.005 and epsilon_ceiling(0.0, 0.1, 1e-5) == 0.0
    assert tightness(0.5, 1.0) == 0.5 and np.isnan(tightness(0.0, 0.0))
    with pytest.raises(ValueError, match="mu_eff"):
        epsilon_ceiling(-1.0, 0.1, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        epsilon_ceiling(1.0, 0.1, 0.0)


def test_tidy_rows_carry_ceiling_and_tightness():
    from pe_kit.report.results import tidy

    rows = tidy([{"epsilon_lower": 0.9, "mu_eff": 1.0, "mech_sample_rate": 0.1, "audit_delta": 1e-5},
                 {"epsilon_lower": 0.2, "mu_eff": 0.5, "sample_rate": 0.1, "delta": 1e-5}, {"value": 1.0}], "nb", "x")
    assert rows[0]["epsilon_ceiling"] == pytest.approx(1.695, abs=0.003)
    assert rows[0]["tightness"] == pytest.approx(0.9 / rows[0]["epsilon_ceiling"])
    assert 0 < rows[1]["epsilon_ceiling"] < rows[0]["epsilon_ceiling"] and "epsilon_ceiling" not in rows[2]


@pytest.mark.parametrize("call", [
    lambda r: epsilon_theory(1.0, 0.1, 1e-5, releases=r),
    lambda r: epsilon_theory_prefixes(1.0, 0.1, 1e-5, rounds=r),
    lambda r: __import__("pe_kit.audit.accounting", fromlist=["x"]).epsilon_ceiling(1.0, 0.1, 1e-5, releases=r),
])
def test_fractional_count_is_refused_not_truncated(call):
    # int(2.5) == 2 gave ε of 2 releases (1.9277) for 2.5; the count is refused, naming the field and two fixes
    with pytest.raises(ValueError) as exc:
        call(2.5)
    assert str(exc.value).split("=")[0] in ("releases", "rounds")
    assert "=2.5 is not an integer ≥ 1 (no fractional part allowed: use 2 or 3)" in str(exc.value)


def test_integral_float_count_is_the_integer():
    assert epsilon_theory(1.0, 0.1, 1e-5, releases=3.0) == epsilon_theory(1.0, 0.1, 1e-5, releases=3)
    assert epsilon_theory(1.0, 0.1, 1e-5, releases=3) == pytest.approx(2.0972, abs=1e-3)
    assert GaussianReleases(1.0, 0.1, 3.0).releases == 3 and type(GaussianReleases(1.0, 0.1, 3.0).releases) is int
    assert epsilon_theory_prefixes(1.0, 0.1, 1e-5, 2.0) == [epsilon_theory(1.0, 0.1, 1e-5, t) for t in (1, 2)]


@pytest.mark.parametrize("call", [
    lambda: epsilon_theory(1.0, True, 1e-5),
    lambda: GaussianReleases(1.0, True),
    lambda: __import__("pe_kit.audit.accounting", fromlist=["x"]).epsilon_ceiling(1.0, True, 1e-5),
])
def test_a_bool_is_not_a_sample_rate(call):
    # True was taken as q = 1 (ε 4.387 for σ = 1); now refused with the field, the value and the fix
    with pytest.raises(ValueError, match=r"^sample_rate=True is not a number in \(0, 1\] \(true/false is not a "
                                         r"number\): pass a float, e\.g\. 0\.1$"):
        call()


@pytest.mark.parametrize("call", [
    lambda: epsilon_theory(1.0, 0.1, "1e-5"),
    lambda: __import__("pe_kit.audit.accounting", fromlist=["x"]).epsilon_one_release(1.0, 0.1, "1e-5"),
    lambda: __import__("pe_kit.audit.accounting", fromlist=["x"]).epsilon_ceiling(1.0, 0.1, "1e-5"),
])
def test_a_str_delta_is_refused_naming_the_fix(call):
    # was TypeError: '<' not supported between instances of 'int' and 'str'
    with pytest.raises(ValueError, match=r"^delta='1e-5' is not a number in \[0, 1\): pass a float, e\.g\. 1e-05$"):
        call()
