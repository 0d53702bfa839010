"""ε_theory: the formal (ε, δ) guarantee of T Poisson-subsampled Gaussian releases.

Wraps ``opacus.accountants.PRVAccountant`` (Gopi et al., 2021; paper §2.1 and App. D,
"Multi-round accounting"). A PE run is described as data (``GaussianReleases``: what happened) and
then accounted for, in the style of google dp_accounting's events/accountants split.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["GaussianReleases", "epsilon_theory", "epsilon_theory_prefixes"]


@dataclass(frozen=True)
class GaussianReleases:
    """T releases of a Poisson-subsampled Gaussian histogram (the PE privacy event).

    Attributes:
        noise_multiplier: σ (> 0): noise std σC for sensitivity C.
        sample_rate: q in (0, 1]: independent per-user participation probability.
        releases: T ≥ 1 histogram releases (PE rounds).
    """

    noise_multiplier: float
    sample_rate: float
    releases: int = 1

    def __post_init__(self) -> None:
        if not self.noise_multiplier > 0:
            raise ValueError(f"noise_multiplier={self.noise_multiplier} must be > 0 for a finite ε_theory")
        if not 0 < self.sample_rate <= 1:
            raise ValueError(f"sample_rate={self.sample_rate} must satisfy 0 < q ≤ 1")
        if int(self.releases) != self.releases or self.releases < 1:
            raise ValueError(f"releases={self.releases} must be an integer ≥ 1")


def epsilon_theory(noise_multiplier: float, sample_rate: float, delta: float, releases: int = 1,
                   eps_error: float = 0.01) -> float:
    """ε_theory of ``releases`` Poisson-subsampled Gaussian releases at ``delta``.

    Args:
        noise_multiplier: σ (> 0).
        sample_rate: q in (0, 1].
        delta: δ in (0, 1).
        releases: T ≥ 1.
        eps_error: PRV accountant's ε discretization error (opacus default 0.01).

    Returns:
        float ε (e.g. 1.695 for σ=1, q=0.1, δ=1e-5, T=1).

    Raises:
        ValueError: on an out-of-range argument.

    Source: ``opacus.accountants.PRVAccountant``, stepped once per release, then ``get_epsilon``.
    """
    event = GaussianReleases(float(noise_multiplier), float(sample_rate), int(releases))
    if not 0 < delta < 1:
        raise ValueError(f"delta={delta} must satisfy 0 < δ < 1")
    return _prv_epsilon(event.noise_multiplier, event.sample_rate, float(delta), event.releases, float(eps_error))


@lru_cache(maxsize=1024)
def _prv_epsilon(sigma: float, q: float, delta: float, releases: int, eps_error: float) -> float:
    from opacus.accountants import PRVAccountant

    acc = PRVAccountant()
    for _ in range(releases):
        acc.step(noise_multiplier=sigma, sample_rate=q)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(acc.get_epsilon(delta=delta, eps_error=eps_error))


def epsilon_theory_prefixes(noise_multiplier: float, sample_rate: float, delta: float, rounds: int) -> list[float]:
    """ε_theory after each prefix t = 1..rounds of releases (App. D: a fresh accountant per prefix).

    Returns a list of ``rounds`` floats; for σ=1.1088, q=0.1, δ=1e-5:
    1.345, 1.540, 1.682, 1.800, 1.905, 2.000.
    """
    return [epsilon_theory(noise_multiplier, sample_rate, delta, t) for t in range(1, int(rounds) + 1)]
