"""Black-box audits of a PE release implementation (not of the specification).

Source: §2.1 Steps 2–5 of "Canaries in the Bank" (Eqs. 2–5, 14–15, 22, 28–35), with the trials run through
a *given* release function (``pe.release_protocol``) instead of the scalar projection of the specified
mechanism. The auditor controls the bank, the users (the canary sits at ``design.canary_position`` under H1,
the last user row by default, and is absent under H0) and the seeds; participation, routing, clipping and noise are the implementation's job.

The statistic is the kit's: weights from aux users *under the specification* (the reference mechanism's
contributions, Eqs. 31–35: m̂0, Σ̂_P for N = n_test users, w = Σ̂⁻¹v with v the canary's specified
contribution on P), score ℓ = wᵀ(Y_P − m̂0 − v/2) (Eq. 14; ℓ_mix = log[(1−q) + q e^ℓ] is monotone in ℓ, so a
threshold on either is the same test). A threshold is calibrated on calibration-user trials and ε_lower
(Eq. 28) bounded on fresh test-user trials with one-sided Clopper–Pearson endpoints at γ.

``violation = ε_lower > ε_theory``: ε_lower holds with probability ≥ 1 − 4γ (four one-sided bounds), so a
flagged row is a level-4γ test of "the implementation meets (ε_theory, δ)"; ``_audit_suite`` sets
γ = α/(4·n_audits) so that the whole suite's family-wise error is ≤ α by construction (Bonferroni).

Early stop (``looks`` = L > 1): the trials run in L looks of T/2^(L−1), …, T/2, T per hypothesis per split
(``look_sizes``). At each look the threshold is calibrated on the calibration trials drawn so far and ε_lower
bounded on the test trials drawn so far at γ/L, and the audit stops at the first look with ε_lower > ε_theory.
Test trials never choose the threshold, so each look's bound holds with probability ≥ 1 − 4γ/L, and all L of them
at once with probability ≥ 1 − 4γ (Bonferroni over the looks): the flag keeps level 4γ whatever the stopping rule.
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
from pe_kit.audit.moments import aux_moments, llr_weights, mixture_llr, null_moments
from pe_kit.audit.outcome import Audit
from pe_kit.audit.plan import announce_reach, audit_reach
from pe_kit.audit.release_runner import (CALL_CHUNK, check_audit_arguments, implementation_name,
                                         release_scores, seed_sequence)
from pe_kit.audit.trials import ScalarProblem, check_equal_populations, scalar_problem
from pe_kit.settings import MechanismConfig
from pe_kit.pe.release_protocol import ReferenceRelease, stack_users

__all__ = ["SpecStatistic", "spec_statistic", "implementation_scores", "audit_implementation", "look_sizes",
           "trials_needed", "MAX_TRIALS", "DEFAULT_DELTA"]

#: the per-hypothesis trial budget of one black-box audit (≤ 10⁵)
MAX_TRIALS = 100_000

#: δ of every black-box audit unless given (the suite's, ``study.implementation_audit.SUITE_DELTA``): the claimed
#: guarantee holds at every δ of its curve, and at 10⁻³ the tail events that separate a broken ε from ε_theory are
#: seen within 10⁵ trials (at 10⁻⁵ it missed 3 of 5 real violations it flags at 10⁻³)
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
    """The specification's LLR statistic of one design (Eqs. 14, 15, 31–35).

    Attributes:
        coords: int64 (|P|,). canary: float64 (|P|,) v (the canary's specified contribution on P).
        weights: float64 (|P|,) w = Σ̂⁻¹v. m0: float64 (|P|,) m̂0 for N = n_test. mu_eff: √(vᵀΣ̂⁻¹v).
        n_users: N. populations: split → CSR (N, |P|) specified contributions (calibration and test: N distinct
            users each, never resampled).
    """

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

    def scalar_problems(self, mechanism: MechanismConfig) -> tuple[ScalarProblem, ScalarProblem]:
        """(calibration, test) ``ScalarProblem`` of the specified mechanism on this design (for ``engine``)."""
        return tuple(scalar_problem(self.weights, self.populations[s], self.canary, self.m0, mechanism.noise_std,
                                    mechanism.sample_rate) for s in _SPLITS)


def spec_statistic(design, mechanism: MechanismConfig, *, shrinkage: float = 0.1, ridge: float = 1e-9,
                   rng: np.random.Generator | None = None) -> SpecStatistic:
    """The specification's statistic of a design: reference contributions → aux moments → w (Eqs. 14, 31–35).

    Args:
        design: duck-typed: ``bank`` float (p, d), ``coords`` int (|P|,), ``canary`` float (m, d) and ``aux``,
            ``calibration``, ``test`` lists of per-user float (n_u, d) (``attack.bug_canaries.ImplementationDesign``).
        mechanism: the settings the implementation claims (k, C, σ, q).
        shrinkage, ridge: Eq. 33 / Eq. 35 (0.1, 1e-9 in the paper).
        rng: unused (kept for callers): the calibration split is never resampled. The threshold is frozen on the
            statistic of N calibration users and evaluated on N test users (``trials.check_equal_populations``).

    Returns:
        ``SpecStatistic``.

    Raises:
        ValueError: on a malformed design, empty coordinates, a canary with no vote on P, σ = 0, or calibration
            and test splits of different sizes (the message names ``n_calibration`` / ``n_test``).
    """
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
    m0, sigma = null_moments(aux_moments(pops["aux"], shrinkage), n, mechanism, ridge)
    w = llr_weights(v, sigma)
    return SpecStatistic(coords, v, w, m0, float(np.sqrt(max(0.0, w @ v))), n,
                         {s: pops[s] for s in _SPLITS})


def implementation_scores(release, design, mechanism: MechanismConfig, stat: SpecStatistic, split: str,
                          hypothesis: int, n_trials: int, rng: np.random.Generator, *, batch: int = 8192,
                          use_batch: bool | None = None, scheduler=None, call_chunk: int = CALL_CHUNK,
                          show_progress: bool | None = None) -> np.ndarray:
    """Scores of ``n_trials`` releases of ``release`` on one split under H0 (canary absent) or H1 (canary
    eligible at ``design.canary_position``, default the last user row). float64 (n_trials,).

    Uses ``release.release_batch`` on P (``batch`` releases per call) when the implementation offers it and
    ``use_batch`` is not False; otherwise one full ``release(...)`` call per trial, read on P, ``call_chunk`` per
    chunk (a progress bar per stream). Chunk j draws from ``rng.spawn`` child j, so ``scheduler`` (a
    ``dask.distributed.Client``) gives the same scores as serial (``release_runner.release_scores``).

    Raises:
        ValueError: on a bad split / hypothesis / n_trials, or a release that returns None, another shape or
            non-finite values (the message names the implementation, the form and the expected shape).
    """
    if split not in _SPLITS or hypothesis not in (0, 1):
        raise ValueError(f"split={split!r} must be one of {_SPLITS} and hypothesis={hypothesis!r} 0 or 1")
    if int(n_trials) != n_trials or n_trials < 1:
        raise ValueError(f"n_trials={n_trials} must be an integer ≥ 1")
    batched = hasattr(release, "release_batch") if use_batch is None else bool(use_batch)
    return release_scores(release, design, mechanism, stat, split, hypothesis, int(n_trials), rng, batched=batched,
                          chunk=batch if batched else call_chunk, scheduler=scheduler, show_progress=show_progress)


def audit_implementation(release, design, mechanism: MechanismConfig, *, trials: int = MAX_TRIALS,
                         gamma: float = 0.0025, delta: float = DEFAULT_DELTA, seed=0, looks: int = 1,
                         shrinkage: float = 0.1, ridge: float = 1e-9, batch: int = 8192, use_batch: bool | None = None,
                         stat: SpecStatistic | None = None, return_scores: bool = False, scheduler=None,
                         call_chunk: int = CALL_CHUNK, show_progress: bool | None = None, announce: bool = True):
    """Audit a PE release implementation through its own function (module docstring; §2.1 Steps 2–5).

    Args:
        release: a ``pe.release_protocol.PERelease`` (optionally with ``release_batch``), e.g. the reference,
            a ``pe.mutants`` mutant, or a ``HistogramAdapter`` around third-party code.
        design: duck-typed design (``spec_statistic``). mechanism: the settings the implementation claims; ε_theory
            is computed from them at ``delta``.
        trials: trials per hypothesis per split (calibration and test each), ≥ 1. gamma: one-sided Clopper–Pearson
            tail in (0, 1). delta: δ in (0, 1), default ``DEFAULT_DELTA`` = 10⁻³ (the suite's).
        seed: int / sequence / SeedSequence; the four trial streams are its spawns (calibration H0, H1, test H0, H1).
        looks: L ≥ 1 looks with early stop, each bound at γ/L (module docstring; ``look_sizes``); 1: one look at γ.
        shrinkage, ridge: of the specification's Σ̂. batch, use_batch: see ``implementation_scores``.
        stat: a precomputed ``spec_statistic`` of this design and mechanism (saves the routing).
        return_scores: also return {(split, hypothesis): scores} (those drawn up to the last look run).
        scheduler: None (serial) or a ``dask.distributed.Client``: the releases of each stream fan out over its
            workers in chunks, with the same scores as serial (``release_runner.release_scores``).
        call_chunk, show_progress: releases per chunk without ``release_batch``; a progress bar per stream (None:
            only without ``release_batch``).
        announce: before the trials, print the budget's reach to stderr (unless ``show_progress`` is False) and
            warn when it cannot flag a violation (``audit.plan.announce_reach``).

    Returns:
        ``Audit`` of the test trials of the last look run (calibration record attached, ε_theory the claimed ε at σ,
        q, δ, μ_eff the specification's; and the scores dict if asked). ``info`` in row order: ``implementation``
        and ``design`` (names), ``epsilon_ceiling`` (PRV ε at noise multiplier 1/μ_eff: the most a threshold test on
        this statistic can show against the specified mechanism), ``tightness`` (ε_lower / ceiling, NaN when it is
        0), ``violation`` (ε_lower > ε_theory; repeated releases are judged by ``release_checks.repeat_check``),
        ``expected_violation`` (the implementation's ``breaks_guarantee``, None without one), ``threshold_mix``,
        ``trials`` (the budget T), ``looks``, ``looks_run``, ``releases`` (4 × the trials drawn), ``gamma`` (the
        bounds' tail, γ/L), ``delta``, ``batched`` (``release_batch`` used), ``seconds``, the calibration → test FPR
        check (``population_shift``, ``fpr_calibration``, ``fpr_test``; a warning, not a flag: it also fires when
        the two user splits differ), the reach at γ/L (``audit.plan.Reach.as_row``) and ``flagged`` (= violation).

    Raises:
        TypeError: on swapped or mistyped arguments (``release_runner.check_audit_arguments``).
        ValueError: on bad γ, δ, trials, looks or design, or a release that returns None / another shape / NaN
            (naming the implementation); errors of the implementation propagate.
    """
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
    """Trials per hypothesis per split drawn by each of ``looks`` looks: ⌈T/2^(L−j)⌉ for j = 1 … L (T/4, T/2, T at
    L = 3; module docstring).

    Raises:
        ValueError: on trials or looks that are not integers ≥ 1, or trials < 2^(L−1) (a look that adds no trial).
    """
    if int(trials) != trials or trials < 1:
        raise ValueError(f"trials={trials} must be an integer ≥ 1")
    if int(looks) != looks or looks < 1 or trials < 2 ** (looks - 1):
        raise ValueError(f"looks={looks} must be an integer ≥ 1 with 2^(looks − 1) ≤ trials={trials} (each look "
                         "doubles the trials of the one before); pass fewer looks or more trials")
    return [-(-int(trials) // 2 ** (int(looks) - j)) for j in range(1, int(looks) + 1)]


def _row_info(release, design, mechanism: MechanismConfig, stat: SpecStatistic, cal, tst, eps_theory: float, *,
              trials: int, looks: int, run: int, delta: float, batched: bool, seconds: float, reach) -> dict:
    """The black-box columns of ``audit_implementation``'s row (its docstring), in row order."""
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
    """Audit several (release, design) pairs with a family-wise level α (γ = α/(4·len(cases))).

    Args:
        cases: sequence of (release, design).
        mechanism, trials, delta: as ``audit_implementation``. alpha: family-wise error in (0, 1).
        seed: the i-th case uses ``SeedSequence(seed).spawn`` child i (independent, reproducible).
        options: further ``audit_implementation`` keywords.

    Returns:
        list of ``Audit``, one per case, in order.

    Raises:
        ValueError: on an empty suite or α outside (0, 1).
    """
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
    """The smallest trial budget of ``ladder`` at which ``release`` is flagged (the tightness curve of a mutant).

    Every rung is a fresh audit (its own seed spawn) at γ/len(ladder), so the ladder as a whole keeps the
    level 4γ of one audit (Bonferroni over the rungs). Stops at the first flagged rung.

    Returns:
        (trials or None if never flagged, the audits run).

    Raises:
        ValueError: on an empty or non-increasing ladder.
    """
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
