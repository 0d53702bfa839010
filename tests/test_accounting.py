"""ε_theory from Opacus's PRV accountant against the paper's numbers (§3, App. D)."""
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


def test_more_noise_less_epsilon():
    assert epsilon_theory(2.0, 0.1, 1e-5) < epsilon_theory(1.0, 0.1, 1e-5) < epsilon_theory(0.8, 0.1, 1e-5)


@pytest.mark.parametrize("kwargs, field", [
    (dict(noise_multiplier=0.0, sample_rate=0.1), "noise_multiplier"),
    (dict(noise_multiplier=1.0, sample_rate=0.0), "sample_rate"),
    (dict(noise_multiplier=1.0, sample_rate=0.1, releases=0), "releases"),
])
def test_bad_event_names_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        GaussianReleases(**kwargs)


def test_bad_delta():
    with pytest.raises(ValueError, match="delta"):
        epsilon_theory(1.0, 0.1, 0.0)
