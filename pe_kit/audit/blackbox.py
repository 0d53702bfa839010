"""Black-box audits of a PE release implementation: §2.1 Steps 2–5 (Eqs. 2–5, 14–15, 22, 28–35) with the trials
run through a given release function (``pe.release_protocol``); the auditor controls the bank, the users (the canary
at ``design.canary_position`` under H1, default last) and the seeds.

Weights come from aux users under the specification (Eqs. 31–35), ℓ = wᵀ(Y_P − m̂0 − v/2) (Eq. 14); a threshold
calibrated on calibration trials, ε_lower (Eq. 28) bounded on fresh test trials at γ. ``violation = ε_lower >
ε_theory`` is a level-4γ test. With ``looks`` = L > 1 the audit stops at the first of L looks (``look_sizes``) with
ε_lower > ε_theory, each bounded at γ/L (Bonferroni over the looks).
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from pe_kit.audit.accounting import epsilon_ceiling, epsilon_theory
from pe_kit.audit.bounds import calibrate_threshold, evaluate_threshold, population_shift
from pe_kit.audit.moments import design_moments, mixture_llr
from pe_kit.audit.outcome import Audit
from pe_kit.audit.plan import announce_reach, audit_reach
from pe_kit.audit.release_runner import (CALL_CHUNK, check_audit_arguments, implementation_name,
                                         release_scores, seed_sequence)
from pe_kit.audit.trials import check_equal_populations
from pe_kit.settings import COUNT, MechanismConfig, check_param
from pe_kit.pe.release_protocol import ReferenceRelease, stack_users

__all__ = ["SpecStatistic", "spec_statistic", "implementation_scores", "audit_implementation", "look_sizes",
           "trials_needed", "MAX_TRIALS", "DEFAULT_DELTA"]

#: the per-hypothesis trial budget of one black-box audit (≤ 10⁵)
MAX_TRIALS = 100_000

#: δ of every black-box audit unless given: the claim holds at every δ of its curve, and at 10⁻³ violations show
#: within 10⁵ trials
DEFAULT_DELTA = 1e-3

_SPLITS = ("calibration", "test")
#: the four trial streams of an audit, in seed-spawn order
_STREAMS = tuple((s, h) for s in _SPLITS for h in (0, 1))


def _users(design, split: str) -> list:
    users = getattr(design, split, None)
    if users is None or len(users) == 0:
        raise ValueError(f"design.{split} must be a non-empty list of per-user (n_u, d) record embeddings")
    return list(users)


@dataclass(frozen=True)
class SpecStatistic:
    """The specification's LLR statistic of one design (Eqs. 14, 15, 31–35): ``coords`` P, ``canary`` v, ``weights``
    w = Σ̂⁻¹v, ``m0`` m̂0, ``mu_eff`` √(vᵀΣ̂⁻¹v), ``n_users`` N, ``populations`` (split → CSR (N, |P|))."""

    coords: np.ndarray
    canary: np.ndarray
    weights: np.ndarray
    m0: np.ndarray
    mu_eff: float
    n_users: int
    populations: dict

    def score(self, y_p: np.ndarray) -> np.ndarray:
        """ℓ = (Y_P − m̂0 − v/2)·w for float (t, |P|) releases restricted to P; float64 (t,)."""
        return (np.asarray(y_p, dtype=np.float64) - self.m0 - self.canary / 2) @ self.weights



def spec_statistic(design, mechanism: MechanismConfig, *, shrinkage: float = 0.1,
                   ridge: float = 1e-9) -> SpecStatistic:
    """The specification statistic of a design at the claimed ``mechanism``; ``shrinkage``, ``ridge``: Eqs. 33 / 35.
    Raises ValueError on a malformed design, empty coordinates, a canary with no vote on P, σ = 0, or calibration and
    test splits of different sizes."""
    if mechanism.noise_multiplier <= 0:
        raise ValueError("mechanism.noise_multiplier must be > 0: a black-box audit needs a finite ε_theory")
    bank = np.asarray(design.bank, dtype=np.float32)
    coords = np.asarray(design.coords, dtype=np.int64).ravel()
    if coords.size == 0 or coords.min() < 0 or coords.max() >= bank.shape[0]:
        raise ValueError(f"design.coords must be non-empty bank positions in [0, {bank.shape[0]})")
    ref = ReferenceRelease()

    def contribs(users):
        rec, own, n = stack_users(users)
        return sp.csr_matrix(ref.prepare(bank, rec, own, n, mechanism)[:, coords])

    v = np.asarray(contribs([np.asarray(design.canary)]).todense()).ravel()
    if not np.any(v):
        raise ValueError("the canary casts no vote on design.coords under the specification: redesign the probes")
    check_equal_populations(len(_users(design, "calibration")), len(_users(design, "test")))
    pops = {s: contribs(_users(design, s)) for s in ("aux",) + _SPLITS}
    n = pops["test"].shape[0]
    m0, w, mu = design_moments(v, pops["aux"], n, mechanism, shrinkage, ridge)
    return SpecStatistic(coords, v, w, m0, mu, n, {s: pops[s] for s in _SPLITS})


def implementation_scores(release, design, mechanism: MechanismConfig, stat: SpecStatistic, split: str,
                          hypothesis: int, n_trials: int, rng: np.random.Generator, *, batch: int = 8192,
                          use_batch: bool | None = None, scheduler=None, call_chunk: int = CALL_CHUNK,
                          show_progress: bool | None = None) -> np.ndarray:
    """float64 (n_trials,) scores of ``release`` on one split under H0 or H1: through ``release_batch`` (``batch`` per
    call) unless ``use_batch`` is False, else one call per trial in chunks of ``call_chunk``
    (``release_runner.release_scores``). Raises ValueError on a bad split / hypothesis / n_trials or release output."""
    if split not in _SPLITS or hypothesis not in (0, 1):
        raise ValueError(f"split={split!r} must be one of {_SPLITS} and hypothesis={hypothesis!r} 0 or 1")
    n_trials = check_param("n_trials", n_trials, COUNT)
    batched = hasattr(release, "release_batch") if use_batch is None else bool(use_batch)
    return release_scores(release, design, mechanism, stat, split, hypothesis, n_trials, rng, batched=batched,
                          chunk=batch if batched else call_chunk, scheduler=scheduler, show_progress=show_progress)


def audit_implementation(release, design, mechanism: MechanismConfig, *, trials: int = MAX_TRIALS,
                         gamma: float = 0.0025, delta: float = DEFAULT_DELTA, seed=0, looks: int = 1,
                         shrinkage: float = 0.1, ridge: float = 1e-9, batch: int = 8192, use_batch: bool | None = None,
                         stat: SpecStatistic | None = None, return_scores: bool = False, scheduler=None,
                         call_chunk: int = CALL_CHUNK, show_progress: bool | None = None, announce: bool = True):
    """Audit a PE release implementation through its own function (module docstring).

    ``release``: a ``PERelease`` (optionally with ``release_batch``); ``mechanism``: the claimed settings (ε_theory
    at ``delta``); ``trials``: per hypothesis per split; ``seed``: its four spawns are calibration H0, H1, test H0,
    H1; ``stat``: a precomputed ``spec_statistic``; ``return_scores``: also return {(split, hypothesis): scores};
    ``scheduler``: None or a ``dask.distributed.Client`` (same scores as serial); ``announce``: print the budget's
    reach (``audit.plan.announce_reach``).

    Returns the ``Audit`` of the last look's test trials, its ``info`` with the columns of ``_row_info``.
    Raises TypeError on swapped or mistyped arguments; ValueError on bad γ, δ, trials, looks or design, or a release
    returning None / another shape / NaN."""
    check_audit_arguments(release, design, mechanism)
    if not 0 < gamma < 1:
        raise ValueError(f"gamma={gamma} must lie in (0, 1) (α / (4·n_audits))")
    if not 0 < delta < 1:
        raise ValueError(f"delta={delta} must lie in (0, 1)")
    sizes, tail = look_sizes(trials, looks), gamma / looks
    reach = audit_reach(mechanism, int(trials), gamma=tail, delta=delta)
    if announce:
        announce_reach(reach, mechanism, show=show_progress is not False)
    t0 = time.perf_counter()
    stat = stat or spec_statistic(design, mechanism, shrinkage=shrinkage, ridge=ridge)
    gens = [np.random.Generator(np.random.PCG64(s)) for s in seed_sequence(seed).spawn(4)]
    eps_theory = epsilon_theory(mechanism.noise_multiplier, mechanism.sample_rate, delta)
    scores = {k: np.empty(0) for k in _STREAMS}
    for run, n in enumerate(sizes, 1):  # each look draws the streams' next trials (the next chunks of their seeds)
        for (split, h), g in zip(_STREAMS, gens):
            more = implementation_scores(release, design, mechanism, stat, split, h, n - scores[(split, h)].size, g,
                                         batch=batch, use_batch=use_batch, scheduler=scheduler,
                                         call_chunk=call_chunk, show_progress=show_progress)
            scores[(split, h)] = np.concatenate([scores[(split, h)], more])
        cal = calibrate_threshold(scores[("calibration", 0)], scores[("calibration", 1)], tail, delta,
                                  sample_rate=mechanism.sample_rate)  # threshold_rules.DEFAULT_RULE
        tst = evaluate_threshold(scores[("test", 0)], scores[("test", 1)], cal.threshold, tail, delta,
                                 direction=cal.direction)  # the event frozen on calibration, direction included
        if tst.epsilon_lower > eps_theory:
            break
    batched = hasattr(release, "release_batch") if use_batch is None else bool(use_batch)
    info = _row_info(release, design, mechanism, stat, cal, tst, eps_theory, trials=trials, looks=looks, run=run,
                     delta=delta, batched=batched, seconds=time.perf_counter() - t0, reach=reach)
    out = replace(tst, epsilon_theory=eps_theory, mu_eff=stat.mu_eff, calibration=cal, info=info)
    return (out, scores) if return_scores else out


def look_sizes(trials: int, looks: int = 1) -> list[int]:
    """Trials per hypothesis per split at each look: ⌈T/2^(L−j)⌉ for j = 1 … L. Raises ValueError on trials or looks
    that are not integers ≥ 1, or trials < 2^(L−1)."""
    trials, looks = check_param("trials", trials, COUNT), check_param("looks", looks, COUNT)
    if trials < 2 ** (looks - 1):
        raise ValueError(f"looks={looks} must be an integer ≥ 1 with 2^(looks − 1) ≤ trials={trials} (each look "
                         "doubles the trials of the one before); pass fewer looks or more trials")
    return [-(-trials // 2 ** (looks - j)) for j in range(1, looks + 1)]


def _row_info(release, design, mechanism: MechanismConfig, stat: SpecStatistic, cal, tst, eps_theory: float, *,
              trials: int, looks: int, run: int, delta: float, batched: bool, seconds: float, reach) -> dict:
    """The black-box columns of an audit's row: ``epsilon_ceiling`` (PRV ε at noise multiplier 1/μ_eff), ``tightness``,
    ``violation``, ``expected_violation``, ``gamma`` (γ/L), the FPR shift check (a warning, not a flag), the reach."""
    ceiling = epsilon_ceiling(stat.mu_eff, mechanism.sample_rate, delta)
    expected = getattr(release, "breaks_guarantee", None)
    name = implementation_name(release)
    shift = population_shift(cal, tst, tst.gamma)
    if shift["population_shift"]:
        warnings.warn(f"{name}: the frozen threshold's FPR moved from {shift['fpr_calibration']:.3g} (calibration) to "
                      f"{shift['fpr_test']:.3g} (test), outside both Clopper–Pearson intervals: the calibration did "
                      "not carry over (different user splits, or releases that change between streams, e.g. a clock "
                      "seed)", stacklevel=3)
    violation = bool(tst.epsilon_lower > eps_theory)
    return {"implementation": name, "design": str(getattr(design, "name", "")), "epsilon_ceiling": ceiling,
            "tightness": (tst.epsilon_lower / ceiling) if ceiling > 0 else math.nan, "violation": violation,
            "expected_violation": None if expected is None else bool(expected(mechanism, stat.n_users + 1)),
            "threshold_mix": float(mixture_llr(cal.threshold, mechanism.sample_rate)), "trials": int(trials),
            "looks": int(looks), "looks_run": int(run), "releases": 4 * int(tst.n_h1), "gamma": float(tst.gamma),
            "delta": float(delta), "batched": batched, "seconds": seconds,
            "population_shift": bool(shift["population_shift"]), "fpr_calibration": float(shift["fpr_calibration"]),
            "fpr_test": float(shift["fpr_test"]), **reach.as_row(), "flagged": violation}


def _audit_suite(cases: Sequence[tuple], mechanism: MechanismConfig, *, trials: int = MAX_TRIALS, alpha: float = 0.05,
                delta: float = DEFAULT_DELTA, seed=0, **options) -> list[Audit]:
    """Audit (release, design) ``cases`` at family-wise α (γ = α/(4·len(cases))), case i seeded by spawn child i.
    Raises ValueError on an empty suite or α outside (0, 1)."""
    if len(cases) == 0:
        raise ValueError("cases is empty: give (release, design) pairs")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha} must lie in (0, 1)")
    gamma = alpha / (4 * len(cases))
    if options.pop("announce", True):
        announce_reach(audit_reach(mechanism, int(trials), gamma=gamma, delta=delta), mechanism,
                       show=options.get("show_progress") is not False)
    seeds = np.random.SeedSequence(seed).spawn(len(cases))
    return [audit_implementation(r, d, mechanism, trials=trials, gamma=gamma, delta=delta, seed=s, announce=False,
                                 **options) for (r, d), s in zip(cases, seeds)]


def trials_needed(release, design, mechanism: MechanismConfig, *, ladder: Sequence[int] = (1_000, 3_000, 10_000,
                  30_000, 100_000), gamma: float = 0.0025, delta: float = DEFAULT_DELTA, seed=0,
                  **options) -> tuple[int | None, list[Audit]]:
    """(the smallest rung of ``ladder`` at which ``release`` is flagged or None, the audits run), each rung a fresh
    audit at γ/len(ladder). Raises ValueError on an empty or non-increasing ladder."""
    ladder = [int(t) for t in ladder]
    if not ladder or any(b <= a for a, b in zip(ladder, ladder[1:])):
        raise ValueError(f"ladder={ladder} must be a non-empty increasing sequence of trial counts")
    stat = options.pop("stat", None) or spec_statistic(design, mechanism)
    options.setdefault("announce", False)  # each rung's reach is the point of the ladder, not a warning
    seeds = np.random.SeedSequence(seed).spawn(len(ladder))
    runs = []
    for t, s in zip(ladder, seeds):
        runs.append(audit_implementation(release, design, mechanism, trials=t, gamma=gamma / len(ladder), delta=delta,
                                         seed=s, stat=stat, **options))
        if runs[-1].violation:
            return t, runs
    return None, runs
