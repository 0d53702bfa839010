"""The composed audit of a multi-round PE transcript (Eq. 36): per-round LLRs on each round's frozen bank, summed.

Source: "Canaries in the Bank", App. D "Multi-round accounting" (ε_theory per prefix from a fresh PRV
accountant; "the empirical audit composes the same prefixes by summing their mixture log-likelihood
ratios"), App. E.8 Eq. 36 (chain rule of the transcript likelihood ratio). The loop itself is
``pe_kit.pe.multiround``.

The composed audit (``round_problems`` → ``_composed_audit``). Design decision (documented
approximation): the transcript is run once, *without* the canary (as under H0), and its banks are
frozen. For each round's bank the single-release audit is rebuilt exactly as ``pe_kit.audit.moments``: aux
moments on the inspected coordinates P_t (the probe positions; the canary's own top-k support when
there are no probes) → (m̂0, Σ̂) for N test users → w_t = Σ̂⁻¹v_t → scalar projections of the
calibration and test populations (``ScalarProblem``). A T-round trial then draws, independently per
round, background participation, the canary's participation J_t ~ Bernoulli(q) (under H1; J ≡ 0 under
H0) and the DP noise, and scores Σ_t ℓ_mix,t with ℓ_mix,t = log[(1−q) + q e^{ℓ_t}] (Eqs. 4, 22, 36).
Thresholds are calibrated and bounded per prefix as in the single release
(``bounds.calibrate_threshold`` / ``evaluate_threshold``, Eq. 28).
What is approximated: (i) in the real adaptive process bank t depends on Y^(<t), which depends on
the canary's earlier participation; here every trial reuses the one frozen bank sequence, i.e. the
audit is of T releases on these fixed banks (a non-adaptive instance of the same mechanism, so
ε_theory(T) still bounds it, and Eq. 36's conditional LLRs reduce to the per-round LLRs on the
realized banks) — ``pe_kit.audit.adaptive`` lifts this, letting the canary's sampled votes change
retention and the next bank, and reports the two side by side; (ii) each ℓ_t inherits the Gaussian approximation of Eq. 14 with aux-estimated
moments, as in the single-release audit.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from pe_kit.audit.accounting import epsilon_theory_prefixes
from pe_kit.audit.bounds import calibrate_threshold, evaluate_threshold
from pe_kit.audit.moments import (
    aux_moments,
    llr_weights,
    mixture_llr,
    null_moments,
    restrict,
)
from pe_kit.audit.outcome import Audit
from pe_kit.audit.trials import ScalarProblem, scalar_problem, simulate_scores
from pe_kit.settings import AuditConfig, MechanismConfig
from pe_kit.pe.multiround import FrozenBank, Population, Transcript
from pe_kit.progress import progress


# -------------------------------------------------------------------------------------- composed audit
@dataclass(frozen=True)
class RoundProblem:
    """The frozen single-release audit of one round's bank (§2.1 Steps 2–3 on S^(t)).

    Attributes:
        round: t. coords: int64 (|P_t|,) inspected coordinates.
        mu_eff: sqrt(v_tᵀ Σ̂_t⁻¹ v_t) (Eq. 15); canary_norm: ‖v_{t,P}‖₂.
        calibration, test: ``ScalarProblem`` of both populations (N = n_test users each).
    """

    round: int
    coords: np.ndarray
    mu_eff: float
    canary_norm: float
    calibration: ScalarProblem
    test: ScalarProblem


def round_problems(transcript: Transcript, canary: Population, aux: Population, calibration: Population,
                   test: Population, mechanism: MechanismConfig, audit: AuditConfig,
                   rng: np.random.Generator) -> list[RoundProblem]:
    """Per-round ``ScalarProblem`` s for the composed audit (see the module docstring).

    For each round's frozen bank: the canary's, aux, calibration and test contributions (exact routing);
    P_t = the probe positions (or the canary's nonzero coordinates without probes); aux moments →
    (m̂0, Σ̂_P) for N = n_test (Eqs. 31–35) → w_t → projections. The calibration population is resized
    to n_test users by one seeded draw with replacement, reused in every round (as ``_audit_canary``).

    Args:
        transcript: a ``run_pe`` result. canary: one user (n_users == 1).
        aux, calibration, test: populations. mechanism, audit: settings. rng: the resizing draw.

    Returns:
        list of T ``RoundProblem``.

    Raises:
        ValueError: if the canary population is not one user, a split is empty, or the canary votes on
        no coordinate of a probe-free round.
    """
    if canary.n_users != 1:
        raise ValueError(f"canary must be one user; got n_users={canary.n_users}")
    if min(aux.n_users, calibration.n_users, test.n_users) == 0:
        raise ValueError("aux, calibration and test populations need at least one user each")
    n_test = test.n_users
    resize = (rng.integers(0, calibration.n_users, size=n_test) if calibration.n_users != n_test else None)
    return [bank_problem(rec.bank, rec.round, canary, aux, calibration, test, mechanism, audit, resize)
            for rec in transcript.rounds]


def bank_problem(bank: FrozenBank, round_: int, canary: Population, aux: Population, calibration: Population,
                 test: Population, mechanism: MechanismConfig, audit: AuditConfig,
                 resize: np.ndarray | None = None) -> RoundProblem:
    """The single-release audit of one frozen bank (§2.1 Steps 2–3; Eqs. 14, 31–35) as a ``RoundProblem``.

    Args:
        bank: S^(t). round_: t (stored in the result). canary: one user. aux, calibration, test: populations.
        mechanism, audit: settings. resize: optional int64 (n_test,) rows drawn from the calibration users
            (only when the two splits differ in size; see ``round_problems``).

    Raises:
        ValueError: if the canary votes on no coordinate of a probe-free bank.
    """
    v_full = np.asarray(canary.contributions(bank, mechanism).todense()).ravel()
    coords = bank.probe_positions if bank.probe_positions.size else np.flatnonzero(v_full)
    coords = np.sort(np.asarray(coords, dtype=np.int64))
    if coords.size == 0:
        raise ValueError(f"round {round_}: the canary votes on no coordinate")
    v = v_full[coords]
    moments = aux_moments(restrict(aux.contributions(bank, mechanism), coords), audit.shrinkage)
    m0, sigma = null_moments(moments, test.n_users, mechanism, audit.ridge)
    w = llr_weights(v, sigma)
    cal = restrict(calibration.contributions(bank, mechanism), coords)
    if resize is not None:
        cal = cal[resize]
    tst = restrict(test.contributions(bank, mechanism), coords)
    q, ns = mechanism.sample_rate, mechanism.noise_std
    return RoundProblem(round_, coords, float(np.sqrt(max(0.0, w @ v))), float(np.linalg.norm(v)),
                        scalar_problem(w, cal, v, m0, ns, q), scalar_problem(w, tst, v, m0, ns, q))


def _prefix_audit(cal_h0: np.ndarray, cal_h1: np.ndarray, test_h0: np.ndarray, test_h1: np.ndarray,
                 audit: AuditConfig) -> Audit:
    """Threshold calibrated on calibration-split trials, ε_lower bounded on test-split trials (Eq. 28).

    Args: float (n,) summed mixture-LLR scores of one prefix per split and hypothesis; audit: γ, δ and
        ``threshold_rule``. No sample rate reaches the rule: the Gaussian model of one release's ℓ (Eqs. 16–19)
        does not describe a sum of mixture LLRs, so ``"gaussian_model"`` takes its model-free fallback here
        (recorded as ``calibration_rule = "gaussian_model>anchored_argmax"``).

    Returns:
        ``Audit`` of the test trials, calibration record attached; ``info``: ``branch`` (of Eq. 28).
    """
    cal = calibrate_threshold(cal_h0, cal_h1, audit.gamma, audit.delta, rule=audit.threshold_rule)
    test = evaluate_threshold(test_h0, test_h1, cal.threshold, audit.gamma, audit.delta, cal.direction)
    return replace(test, calibration=cal, info={"branch": test.branch})


def _composed_audit(problems: Sequence[RoundProblem], mechanism: MechanismConfig, audit: AuditConfig,
                   rng: np.random.Generator, chunk_size: int = 1 << 20) -> list[dict]:
    """ε_lower of every prefix t = 1..T from summed per-round mixture LLRs (Eq. 36), with ε_theory.

    For each hypothesis and each split (calibration, test), ``audit.trials`` T-round trials are drawn
    (``trials.simulate_scores`` per round: independent participation, canary inclusion J_t ~ Bernoulli(q)
    under H1, DP noise) and Σ_{s≤t} ℓ_mix,s accumulated; the prefix-t threshold is calibrated on the
    calibration trials (``calibrate_threshold``) and ε_lower bounded on the fresh test trials
    (``evaluate_threshold``, Eq. 28, γ = α/(4·n_canaries)). ε_theory(t) comes from one PRV accountant
    per prefix (``accounting.epsilon_theory_prefixes``).

    Args:
        problems: ``round_problems`` output (T rounds). mechanism, audit: settings.
        rng: the only source of randomness. chunk_size: trials per ``simulate_scores`` chunk.

    Returns:
        list of T dicts (one per prefix): ``releases``, ``epsilon_lower``, ``epsilon_theory``,
        ``mu_eff_round`` (this round's μ_eff), ``mu_eff_composed`` (sqrt Σ μ²), ``threshold``, ``tpr``,
        ``fpr``, ``branch``, ``trials``, ``seconds`` and the ``test_*`` / ``calibration_*`` counts.

    Raises:
        ValueError: if ``problems`` is empty or σ = 0 (ε_theory undefined).
    """
    if not problems:
        raise ValueError("problems is empty: audit at least one round")
    if mechanism.noise_multiplier <= 0:
        raise ValueError("noise_multiplier must be > 0 for ε_theory; use σ > 0")
    q, n = mechanism.sample_rate, audit.trials
    eps_theory = epsilon_theory_prefixes(mechanism.noise_multiplier, q, audit.delta, len(problems))
    scores = {(s, h): np.zeros(n) for s in ("calibration", "test") for h in (0, 1)}
    rows, mu2 = [], 0.0
    t0 = time.perf_counter()
    for t, prob in enumerate(progress(problems, desc=f"composed audit ({n:,} trials per hypothesis)", unit="round")):
        for split in ("calibration", "test"):
            sp_ = getattr(prob, split)
            for h in (0, 1):
                scores[split, h] += mixture_llr(simulate_scores(sp_, h, n, rng, chunk_size=chunk_size), q)
        mu2 += prob.mu_eff ** 2
        row = {"releases": t + 1, "epsilon_theory": eps_theory[t], "mu_eff_round": prob.mu_eff,
               "mu_eff_composed": float(np.sqrt(mu2)), "canary_norm": prob.canary_norm,
               "n_coords": int(prob.coords.size), "background_voters": int(prob.test.projections.size),
               "trials": n, "seconds": time.perf_counter() - t0,
               **_prefix_audit(scores["calibration", 0], scores["calibration", 1], scores["test", 0],
                              scores["test", 1], audit).row}
        rows.append(row)
    return rows
