"""The composed audit of a multi-round PE transcript (App. D, App. E.8 Eq. 36): each frozen bank of the canary-free
run gets the single-release audit and a T-round trial scores Σ_t ℓ_mix,t (Eqs. 4, 22), each prefix bounded by
Eq. 28. Every trial reuses the frozen banks (a non-adaptive instance; ``audit.adaptive`` lifts this).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from pe_kit.audit.accounting import epsilon_theory_prefixes
from pe_kit.audit.bounds import calibrate_threshold, evaluate_threshold
from pe_kit.audit.moments import design_moments, mixture_llr, restrict
from pe_kit.audit.outcome import Audit
from pe_kit.audit.trials import ScalarProblem, scalar_problem, simulate_scores
from pe_kit.settings import AuditConfig, MechanismConfig
from pe_kit.pe.multiround import FrozenBank, Population, Transcript
from pe_kit.progress import progress


@dataclass(frozen=True)
class RoundProblem:
    """The frozen single-release audit of round t's bank (§2.1 Steps 2–3 on S^(t)): inspected ``coords`` P_t, μ_eff
    (Eq. 15), ‖v_{t,P}‖₂ and the ``ScalarProblem`` of both populations (N = n_test each)."""

    round: int
    coords: np.ndarray
    mu_eff: float
    canary_norm: float
    calibration: ScalarProblem
    test: ScalarProblem


def round_problems(transcript: Transcript, canary: Population, aux: Population, calibration: Population,
                   test: Population, mechanism: MechanismConfig, audit: AuditConfig,
                   rng: np.random.Generator) -> list[RoundProblem]:
    """Per-round ``RoundProblem`` s of a transcript (``bank_problem``; calibration resized to n_test users once).
    Raises ValueError if the canary is not one user, a split is empty, or it votes on no coordinate of a round."""
    if canary.n_users != 1:
        raise ValueError(f"canary must be one user; got n_users={canary.n_users}")
    if min(aux.n_users, calibration.n_users, test.n_users) == 0:
        raise ValueError("aux, calibration and test populations need at least one user each")
    resize = _resize(calibration, test, rng)
    return [bank_problem(rec.bank, rec.round, canary, aux, calibration, test, mechanism, audit, resize)
            for rec in transcript.rounds]


def _resize(calibration: Population, test: Population, rng: np.random.Generator) -> np.ndarray | None:
    """int64 (n_test,) calibration rows drawn with replacement when the splits differ in size, else None."""
    return rng.integers(0, calibration.n_users, size=test.n_users) if calibration.n_users != test.n_users else None


def bank_problem(bank: FrozenBank, round_: int, canary: Population, aux: Population, calibration: Population,
                 test: Population, mechanism: MechanismConfig, audit: AuditConfig,
                 resize: np.ndarray | None = None) -> RoundProblem:
    """The single-release audit of one frozen bank (§2.1 Steps 2–3; Eqs. 14, 31–35) on P = its probe positions (or
    the canary's nonzero coordinates); ``resize``: int64 (n_test,) calibration rows. Raises ValueError if the canary
    votes on no coordinate."""
    v_full = np.asarray(canary.contributions(bank, mechanism).todense()).ravel()
    coords = bank.probe_positions if bank.probe_positions.size else np.flatnonzero(v_full)
    coords = np.sort(np.asarray(coords, dtype=np.int64))
    if coords.size == 0:
        raise ValueError(f"round {round_}: the canary votes on no coordinate")
    v = v_full[coords]
    aux_p = restrict(aux.contributions(bank, mechanism), coords)
    m0, w, mu = design_moments(v, aux_p, test.n_users, mechanism, audit.shrinkage, audit.ridge)
    cal = restrict(calibration.contributions(bank, mechanism), coords)
    if resize is not None:
        cal = cal[resize]
    tst = restrict(test.contributions(bank, mechanism), coords)
    q, ns = mechanism.sample_rate, mechanism.noise_std
    return RoundProblem(round_, coords, mu, float(np.linalg.norm(v)),
                        scalar_problem(w, cal, v, m0, ns, q), scalar_problem(w, tst, v, m0, ns, q))


def _prefix_audit(cal_h0: np.ndarray, cal_h1: np.ndarray, test_h0: np.ndarray, test_h1: np.ndarray,
                  audit: AuditConfig) -> Audit:
    """Threshold calibrated on calibration trials, ε_lower bounded on test trials (Eq. 28); ``info`` ``branch``. No
    sample rate reaches the rule: the one-release Gaussian model does not describe summed LLRs (its fallback decides).
    """
    cal = calibrate_threshold(cal_h0, cal_h1, audit.gamma, audit.delta, rule=audit.threshold_rule)
    test = evaluate_threshold(test_h0, test_h1, cal.threshold, audit.gamma, audit.delta, cal.direction)
    return replace(test, calibration=cal, info={"branch": test.branch})


def _composed_audit(problems: Sequence[RoundProblem], mechanism: MechanismConfig, audit: AuditConfig,
                    rng: np.random.Generator) -> list[dict]:
    """ε_lower of every prefix t = 1..T from summed per-round mixture LLRs Σ_{s≤t} ℓ_mix,s (Eq. 36, ``_prefix_audit``),
    with ε_theory(t): T dicts (``mu_eff_composed`` = √Σμ²). Raises ValueError if ``problems`` is empty or σ = 0."""
    if not problems:
        raise ValueError("problems is empty: audit at least one round")
    q, n = mechanism.sample_rate, audit.trials
    eps_theory = epsilon_theory_prefixes(mechanism.noise_multiplier, q, audit.delta, len(problems))
    scores = {(s, h): np.zeros(n) for s in ("calibration", "test") for h in (0, 1)}
    rows, mu2 = [], 0.0
    t0 = time.perf_counter()
    for t, prob in enumerate(progress(problems, desc=f"composed audit ({n:,} trials per hypothesis)", unit="round")):
        for split in ("calibration", "test"):
            sp_ = getattr(prob, split)
            for h in (0, 1):
                scores[split, h] += mixture_llr(simulate_scores(sp_, h, n, rng), q)
        mu2 += prob.mu_eff ** 2
        row = {"releases": t + 1, "epsilon_theory": eps_theory[t], "mu_eff_round": prob.mu_eff,
               "mu_eff_composed": float(np.sqrt(mu2)), "canary_norm": prob.canary_norm,
               "n_coords": int(prob.coords.size), "background_voters": int(prob.test.projections.size),
               "trials": n, "seconds": time.perf_counter() - t0,
               **_prefix_audit(scores["calibration", 0], scores["calibration", 1], scores["test", 0],
                               scores["test", 1], audit).row}
        rows.append(row)
    return rows
