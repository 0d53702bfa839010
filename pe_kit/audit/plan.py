"""Plan an audit before it runs: its reach and the budget that reaches a target (closed forms of
``audit.expectations``: Eqs. 16–19, 23 in Eqs. 29–30, then Eq. 28):

* ``reach``: the expected ε_lower of a perfectly separable canary (``expectations.separable_epsilon``), the most
  any audit at n trials and γ can certify; below ε_theory it cannot flag a violation by ε.
* ``reach_ceiling``: the expected ε_lower at the claimed mechanism's attack ceiling μ_eff = min(1, 1/(√k·C))/σ
  (Eq. 20; h̄_u has norm ≤ 1/√k by Eq. 1, so for C ≥ 1/√k clipping never binds).
"""
from __future__ import annotations

import bisect
import math
import sys
import warnings
from dataclasses import dataclass

import numpy as np

from pe_kit.audit.accounting import epsilon_theory, epsilon_theory_or_inf
from pe_kit.audit.expectations import expected_epsilon, separable_epsilon
from pe_kit.settings import MechanismConfig

__all__ = ["Reach", "audit_reach", "announce_reach", "auto_trials", "mu_eff_reachable", "clip_binds"]


def clip_binds(mechanism: MechanismConfig) -> bool:
    """Whether some vote vector can reach norm C: 1/√k > C (module docstring)."""
    return 1.0 / math.sqrt(mechanism.top_k) > mechanism.clip_norm


def mu_eff_reachable(mechanism: MechanismConfig) -> float:
    """The attack ceiling of the claimed mechanism: min(1, 1/(√k·C))/σ (Eq. 20; module docstring)."""
    return min(1.0, 1.0 / (math.sqrt(mechanism.top_k) * mechanism.clip_norm)) / mechanism.noise_multiplier


@dataclass(frozen=True)
class Reach:
    """What an audit's budget can certify (module docstring); ``mu_eff``: ``mu_eff_reachable``."""

    trials: int
    gamma: float
    delta: float
    epsilon_theory: float
    reach: float
    mu_eff: float
    reach_ceiling: float
    clip_binds: bool

    @property
    def can_flag(self) -> bool:
        """reach > ε_theory: some release could be flagged by ε at this budget."""
        return self.reach > self.epsilon_theory

    def line(self) -> str:
        """The reach beside ε_theory, and whether C binds, in one line."""
        clip = ("C binds" if self.clip_binds else
                "C never binds: no vote vector exceeds 1/√k < C, so the ceiling is below 1/σ")
        return (f"reach: {self.trials:,} trials per hypothesis (γ = {self.gamma:.3g}, δ = {self.delta:g}) certify at "
                f"most ε_lower {self.reach:.2f} (a perfectly separable canary), {self.reach_ceiling:.2f} expected "
                f"at the attack ceiling μ_eff = {self.mu_eff:.3f} ({clip}); ε_theory = {self.epsilon_theory:.3f}")

    def as_row(self) -> dict:
        """Columns for a results row: ``reach``, ``reach_ceiling``, ``reach_mu_eff``, ``clip_binds``."""
        return {"reach": self.reach, "reach_ceiling": self.reach_ceiling, "reach_mu_eff": self.mu_eff,
                "clip_binds": self.clip_binds}


def audit_reach(mechanism: MechanismConfig, trials: int, *, gamma: float, delta: float) -> Reach:
    """The ``Reach`` of ``mechanism`` at ``trials``, γ, δ (closed forms); ValueError on out-of-range arguments."""
    mu = mu_eff_reachable(mechanism)
    return Reach(int(trials), float(gamma), float(delta),
                 epsilon_theory_or_inf(mechanism.noise_multiplier, mechanism.sample_rate, delta),
                 separable_epsilon(mechanism.sample_rate, trials, gamma, delta), mu,
                 expected_epsilon(mu, mechanism.sample_rate, trials, gamma, delta), clip_binds(mechanism))


def announce_reach(reach: Reach, mechanism: MechanismConfig, *, show: bool = True) -> Reach:
    """Print ``reach.line()`` to stderr (when ``show``) and warn (``UserWarning``) when the budget cannot flag a
    violation, naming the trials and the δ that would. Returns ``reach``."""
    if show:
        print(reach.line(), file=sys.stderr, flush=True)
    if not reach.can_flag and math.isfinite(reach.epsilon_theory):
        q = mechanism.sample_rate
        need = _smallest(lambda n: separable_epsilon(q, n, reach.gamma, reach.delta), reach.epsilon_theory, 10**9)
        fix = f"trials ≥ {need:,}" if need else "far more trials (over 10⁹)"
        for d in (d for d in (1e-5, 1e-4, 1e-3, 1e-2) if d > reach.delta):
            theory = epsilon_theory(mechanism.noise_multiplier, q, d)
            if separable_epsilon(q, reach.trials, reach.gamma, d) > theory:
                fix += f", or delta={d:g} (ε_theory falls to {theory:.3f})"
                break
        warnings.warn(f"this audit cannot flag a violation by ε: {reach.trials:,} trials per hypothesis certify at "
                      f"most ε_lower {reach.reach:.2f} (a perfectly separable canary) < ε_theory "
                      f"{reach.epsilon_theory:.3f}; use {fix} (trials='auto' picks the budget)", stacklevel=3)
    return reach


def _smallest(f, target: float, hi: int) -> int | None:
    """The smallest n in [1, hi] with f(n) ≥ target for f non-decreasing in n; None when f(hi) < target."""
    return None if f(hi) < target else 1 + bisect.bisect_left(range(1, hi + 1), target, key=f)


_FAR_TRIALS = 10**9  # how far an out-of-reach target is searched for the explicit trials that reach it


def auto_trials(mechanism: MechanismConfig, *, gamma: float, delta: float, target: float | None = None,
                basis: str = "separable", max_trials: int = 100_000) -> int:
    """The smallest trials per hypothesis (≤ ``max_trials``) whose reach is ≥ ``target`` (default ε_theory at δ);
    ``basis``: ``"separable"`` (``Reach.reach``) or ``"ceiling"`` (``Reach.reach_ceiling``). Raises ValueError on an
    unknown basis, a target that is not a finite ε > 0, or one out of reach (naming the trials that would reach it)."""
    if basis not in ("separable", "ceiling"):
        raise ValueError(f"basis={basis!r} must be 'separable' or 'ceiling'")
    theory = epsilon_theory(mechanism.noise_multiplier, mechanism.sample_rate, delta)
    if target is not None and not (np.isfinite(float(target)) and float(target) > 0):
        raise ValueError(f"target={target!r} must be a finite ε > 0 (the ε trials='auto' must be able to certify); "
                         f"pass e.g. target={theory:.3g} (ε_theory) or leave it None")
    target = theory if target is None else float(target)
    mu, q = mu_eff_reachable(mechanism), mechanism.sample_rate
    f = ((lambda n: separable_epsilon(q, n, gamma, delta)) if basis == "separable"
         else (lambda n: expected_epsilon(mu, q, n, gamma, delta)))
    n = _smallest(f, target, int(max_trials))
    if n is None:
        beyond = _smallest(f, target, _FAR_TRIALS)
        fix = (f"pass trials={beyond:,} explicitly to reach it, or" if beyond is not None else
               f"it stays out of reach even at {_FAR_TRIALS:,} trials:")
        limit = ("" if basis == "separable" else
                 f"; as trials → ∞ it tends to {expected_epsilon(mu, q, None, gamma, delta):.3f}")
        raise ValueError(f"target={target:.3f} is out of reach: at trials={int(max_trials):,} (the most trials='auto' "
                         f"picks) the {basis} reach is {f(int(max_trials)):.3f}{limit} (ε_theory {theory:.3f}); "
                         f"{fix} lower the target or raise delta")
    return n
