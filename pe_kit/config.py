"""Frozen settings objects shared by the mechanism and the audit (design.md "Data classes").

Defaults are the paper's (§3, App. D): k=5, C=0.1, σ=1, q=0.1, δ=1e-5, m=64, α=0.05, five canaries.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

__all__ = ["MechanismConfig", "AuditConfig"]


def _check(cond: bool, field: str, value, fix: str) -> None:
    if not cond:
        raise ValueError(f"{field}={value!r} is invalid: {fix}")


@dataclass(frozen=True)
class MechanismConfig:
    """One PE histogram release (Eq. 1, Alg. A.1 lines 8–20).

    Attributes:
        top_k: k, votes per record (int ≥ 1).
        clip_norm: C, L2 clip of a user's normalized vote vector (float > 0).
        noise_multiplier: σ; the release noise is N(0, (σC)² I) (float ≥ 0).
        sample_rate: q, independent Bernoulli participation probability (0 < q ≤ 1).
        record_cap: m, records kept per user (int ≥ 1).

    Raises:
        ValueError: naming the field and the admissible range.
    """

    top_k: int = 5
    clip_norm: float = 0.1
    noise_multiplier: float = 1.0
    sample_rate: float = 0.1
    record_cap: int = 64

    def __post_init__(self) -> None:
        _check(int(self.top_k) == self.top_k and self.top_k >= 1, "top_k", self.top_k, "use an integer ≥ 1")
        _check(self.clip_norm > 0 and math.isfinite(self.clip_norm), "clip_norm", self.clip_norm, "use a finite C > 0")
        _check(self.noise_multiplier >= 0 and math.isfinite(self.noise_multiplier), "noise_multiplier",
               self.noise_multiplier, "use a finite σ ≥ 0")
        _check(0 < self.sample_rate <= 1, "sample_rate", self.sample_rate, "use 0 < q ≤ 1")
        _check(int(self.record_cap) == self.record_cap and self.record_cap >= 1, "record_cap", self.record_cap,
               "use an integer ≥ 1")

    @property
    def noise_std(self) -> float:
        """Standard deviation σ·C of each histogram coordinate's Gaussian noise."""
        return self.noise_multiplier * self.clip_norm

    def as_dict(self) -> dict:
        """Plain dict of the settings (for result rows)."""
        return asdict(self)


@dataclass(frozen=True)
class AuditConfig:
    """Audit statistics settings (§2.1 Steps 2–5, App. E.6–E.7).

    Attributes:
        trials: trials per hypothesis, for calibration and again for the test (int ≥ 1).
        alpha: family-wise error over the canaries of one variant (0 < α < 1).
        delta: δ of the (ε, δ) statement (0 ≤ δ < 1).
        n_canaries: canaries per variant; γ = α / (n_canaries · 4) (Eq. 30 ff.).
        shrinkage: diagonal shrinkage of the aux second moment (Eq. 33), 0.1 in the paper.
        ridge: numerical ridge added to Σ̂ (Eq. 35), 1e-9 in the paper.

    Raises:
        ValueError: naming the field and the admissible range.
    """

    trials: int = 1_000_000
    alpha: float = 0.05
    delta: float = 1e-5
    n_canaries: int = 5
    shrinkage: float = 0.1
    ridge: float = 1e-9

    def __post_init__(self) -> None:
        _check(int(self.trials) == self.trials and self.trials >= 1, "trials", self.trials, "use an integer ≥ 1")
        _check(0 < self.alpha < 1, "alpha", self.alpha, "use 0 < α < 1")
        _check(0 <= self.delta < 1, "delta", self.delta, "use 0 ≤ δ < 1")
        _check(int(self.n_canaries) == self.n_canaries and self.n_canaries >= 1, "n_canaries", self.n_canaries,
               "use an integer ≥ 1")
        _check(0 <= self.shrinkage <= 1, "shrinkage", self.shrinkage, "use 0 ≤ shrinkage ≤ 1")
        _check(self.ridge >= 0, "ridge", self.ridge, "use ridge ≥ 0")

    @property
    def gamma(self) -> float:
        """Tail probability of each one-sided Clopper–Pearson bound: α / (n_canaries · 4) (App. E.6)."""
        return self.alpha / (self.n_canaries * 4)

    def as_dict(self) -> dict:
        """Plain dict of the settings (for result rows)."""
        return asdict(self)
