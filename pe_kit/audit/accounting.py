"""ε_theory: the formal (ε, δ) guarantee of T Poisson-subsampled Gaussian releases (paper §2.1, App. D), by
``opacus.accountants.PRVAccountant`` (Gopi et al., 2021); user-level, for :data:`NEIGHBOURING_RELATION` (Poisson
sampling, App. E.2, not a fixed-size sample). ``docs/your_mechanism.md`` maps another PE library onto (σ, q, C, k).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import lru_cache

from pe_kit.settings import COUNT, check_param

__all__ = ["NEIGHBOURING_RELATION", "GaussianReleases", "epsilon_theory", "epsilon_theory_or_inf",
           "epsilon_theory_prefixes", "epsilon_one_release", "PRV_MIN_SIGMA", "PRV_MAX_GRID", "epsilon_ceiling",
           "epsilon_ceiling_rounded", "tightness"]

#: The neighbouring relation ε_theory is stated for (named in results.md and docs/your_mechanism.md).
NEIGHBOURING_RELATION = ("add/remove of one user (all of that user's records), each user in a release independently "
                         "with probability q (Poisson sampling), user vote vectors clipped to L2 norm C, Gaussian "
                         "noise of std σC")


@dataclass(frozen=True)
class GaussianReleases:
    """T ≥ 1 releases (PE rounds) of a Poisson-subsampled Gaussian histogram, noise std σC for sensitivity C (σ > 0)
    and per-user participation probability q in (0, 1]; an integral float T (3.0) becomes an int, 2.5 is refused."""

    noise_multiplier: float
    sample_rate: float
    releases: int = 1

    def __post_init__(self) -> None:
        for name in ("noise_multiplier", "sample_rate"):  # a bool or a str is refused, never taken as a number
            object.__setattr__(self, name, check_param(name, getattr(self, name)))
        if not self.noise_multiplier > 0:
            raise ValueError(f"noise_multiplier={self.noise_multiplier} must be finite and > 0 for a finite ε_theory "
                             "(σ = ∞ is no release: its ε is 0 without an accountant)")
        object.__setattr__(self, "releases", check_param("releases", self.releases, COUNT))


def _check_delta(delta) -> float:
    if not 0 < check_param("delta", delta) < 1:
        raise ValueError(f"delta={delta} must satisfy 0 < δ < 1")
    return float(delta)


def epsilon_theory(noise_multiplier: float, sample_rate: float, delta: float, releases: int = 1,
                   eps_error: float = 0.01) -> float:
    """ε_theory of ``releases`` Poisson-subsampled Gaussian releases at ``delta`` (:data:`NEIGHBOURING_RELATION`;
    σ = noise std / per-user L2 sensitivity; ``eps_error``: the PRV accountant's discretization error): 1.695 for
    σ=1, q=0.1, δ=1e-5, T=1. Raises ValueError on an out-of-range argument; ImportError without Opacus."""
    event = GaussianReleases(noise_multiplier, sample_rate, releases)
    delta = _check_delta(delta)
    return _prv_epsilon(event.noise_multiplier, event.sample_rate, delta, event.releases, float(eps_error))


def epsilon_theory_or_inf(noise_multiplier, sample_rate: float, delta: float) -> float:
    """``epsilon_theory`` of one release; NaN when σ is None (not told), ∞ for σ = 0 or δ ≤ 0 (no finite ε)."""
    if noise_multiplier is None:
        return math.nan
    sigma = check_param("noise_multiplier", noise_multiplier)
    return epsilon_theory(sigma, sample_rate, delta) if sigma > 0 and delta > 0 else math.inf


#: Below this σ the PRV accountant fails (ε saturates near 707, GBs of grid): one release is exact, several raise.
PRV_MIN_SIGMA = 0.05
#: The most points the PRV accountant's grid may hold (≈ 4 GB; σ = 1, q = 0.1, δ = 1e-5 reaches it near T = 10,000).
PRV_MAX_GRID = 20_000_000


def _log_delta_gap(eps: float, sigma: float, q: float, delta: float) -> float:
    """δ(ε) − δ of the "remove" pair (P = (1−q)·N(0, σ²) + q·N(1, σ²) against Q = N(0, σ²)), one release."""
    from scipy.stats import norm

    # {P > e^ε Q} = {x > x*}: the likelihood ratio (1−q) + q·exp((x − ½)/σ²) is increasing in x
    log_w = eps + math.log1p((q - 1.0) * math.exp(-eps))  # log(e^ε − 1 + q)
    x_star = sigma ** 2 * (log_w - math.log(q)) + 0.5
    return q * norm.sf((x_star - 1.0) / sigma) - math.exp(log_w + norm.logsf(x_star / sigma)) - delta


#: The smallest σ whose one-release ε :func:`epsilon_one_release` computes (≈ 5·10¹⁵ there).
ONE_RELEASE_MIN_SIGMA = 1e-8


def epsilon_one_release(noise_multiplier: float, sample_rate: float, delta: float) -> float:
    """Exact ε at δ of one Poisson-subsampled Gaussian release, by ``brentq`` on the hockey-stick divergence δ(ε)
    of the "remove" pair (1−q)·N(0, σ²) + q·N(1, σ²) vs N(0, σ²) (Zhu, Dong, Wang 2022, Prop. 30): exact whenever
    ε ≥ −log(1−q) (always for σ < :data:`PRV_MIN_SIGMA`), else a lower bound; 1434.5 for σ=0.02, q=0.1, δ=1e-5.
    Raises ValueError on an out-of-range argument or σ < :data:`ONE_RELEASE_MIN_SIGMA`."""
    from scipy.optimize import brentq

    event = GaussianReleases(noise_multiplier, sample_rate)
    delta = _check_delta(delta)
    sigma, q = event.noise_multiplier, event.sample_rate
    if sigma < ONE_RELEASE_MIN_SIGMA:
        raise ValueError(f"noise_multiplier={sigma:g} is below {ONE_RELEASE_MIN_SIGMA:g}: ε ≈ 1/(2σ²) > 10¹⁵ there, "
                         "beyond what float64 root-finding resolves; such a release is not private in any useful "
                         f"sense (use σ ≥ {ONE_RELEASE_MIN_SIGMA:g})")
    if _log_delta_gap(0.0, sigma, q, delta) <= 0:
        return 0.0
    hi = 1.0
    while _log_delta_gap(hi, sigma, q, delta) > 0:
        hi *= 2.0
    eps = brentq(_log_delta_gap, 0.0, hi, args=(sigma, q, delta), xtol=1e-9, rtol=1e-12)
    return max(float(eps), 0.0)


@lru_cache(maxsize=1024)
def _prv_epsilon(sigma: float, q: float, delta: float, releases: int, eps_error: float) -> float:
    if sigma < PRV_MIN_SIGMA:
        if releases == 1:
            return epsilon_one_release(sigma, q, delta)
        raise ValueError(f"noise_multiplier={sigma:g} over releases={releases}: below σ = {PRV_MIN_SIGMA} the PRV "
                         f"accountant's ε saturates near 707 and its grid needs GBs; one release is exact "
                         f"(epsilon_one_release: {epsilon_one_release(sigma, q, delta):.4g}), several are ≥ that "
                         "(use σ ≥ 0.05 or account for one release)")
    try:
        from opacus.accountants import PRVAccountant
    except ImportError as exc:  # core pe_kit is numpy + scipy; the accountant is an extra
        raise ImportError(f"ε_theory needs Opacus' PRV accountant ({exc}): pip install 'pe_kit[accounting]' "
                          "(or the main install, scripts/bootstrap.sh)") from exc

    class Accountant(PRVAccountant):
        def _get_domain(self, *args, **kwargs):  # sized before any grid is allocated
            domain = super()._get_domain(*args, **kwargs)
            if domain.size > PRV_MAX_GRID:
                raise ValueError(
                    f"releases={releases} at noise_multiplier={sigma:g}, sample_rate={q:g}, delta={delta:g}: the PRV "
                    f"accountant's grid would hold {domain.size:.2g} points (≈ {domain.size * 200 / 1e9:,.0f} GB), "
                    f"more than the {PRV_MAX_GRID:.0e} it computes here (σ = 1, q = 0.1: up to ≈ 10,000 releases); "
                    "use fewer releases or a larger eps_error (the grid shrinks as 1/eps_error), or bound ε from "
                    "above with opacus.accountants.RDPAccountant (valid, looser)")
            return domain

    acc = Accountant()
    acc.history = [(sigma, q, releases)]  # what ``releases`` calls of acc.step(sigma, q) record
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eps = float(acc.get_epsilon(delta=delta, eps_error=eps_error))
    # ε ≥ 0: the PRV grid can return a small negative value (−0.03 at σ = 5, q = 1, δ = 0.1)
    return max(eps, 0.0)


def epsilon_theory_prefixes(noise_multiplier: float, sample_rate: float, delta: float, rounds: int) -> list[float]:
    """ε_theory after each prefix t = 1..rounds of releases (App. D): ``rounds`` floats (1.345, 1.540, … for
    σ=1.1088, q=0.1, δ=1e-5)."""
    rounds = check_param("rounds", rounds, COUNT)
    return [epsilon_theory(noise_multiplier, sample_rate, delta, t) for t in range(1, rounds + 1)]


def epsilon_ceiling(mu_eff: float, sample_rate: float, delta: float, releases: int = 1,
                    eps_error: float | None = None) -> float:
    """The attack ceiling: ε of the Poisson-subsampled Gaussian mechanism at noise multiplier 1/μ_eff, the pair an
    LLR statistic of separation μ_eff is (Eqs. 15–17, 21–23; App. E.4); ε_theory at μ_eff = 1/σ (Eq. 20).
    ``eps_error`` defaults to min(0.01, 0.01·μ_eff) floored at 1e-3 (bounded grid at tiny μ_eff).
    Raises ValueError on μ_eff < 0 or non-finite, or an out-of-range q, δ, T."""
    mu = float(mu_eff)
    if not (math.isfinite(mu) and mu >= 0):
        raise ValueError(f"mu_eff={mu_eff} must be finite and ≥ 0 (√(vᵀΣ⁻¹v), Eq. 15)")
    releases = GaussianReleases(1.0, sample_rate, releases).releases  # validates q and T
    delta = _check_delta(delta)
    if mu == 0:
        return 0.0
    err = float(eps_error) if eps_error is not None else max(1e-3, min(0.01, 0.01 * mu))
    return max(0.0, _prv_epsilon(1.0 / mu, float(sample_rate), delta, releases, err))


def epsilon_ceiling_rounded(mu_eff: float, sample_rate: float, delta: float, releases: int = 1) -> float:
    """``epsilon_ceiling`` at μ_eff rounded to 4 decimals (cached across a table's rows; < 10⁻³ relative for
    μ_eff ≥ 0.05, below the accountant's eps_error)."""
    return epsilon_ceiling(round(float(mu_eff), 4), sample_rate, delta, releases)


def tightness(epsilon_lower: float, ceiling: float) -> float:
    """ε_lower / epsilon_ceiling: the fraction of the attack ceiling an audit reached (NaN if the ceiling is 0)."""
    return float(epsilon_lower) / float(ceiling) if ceiling > 0 else float("nan")
