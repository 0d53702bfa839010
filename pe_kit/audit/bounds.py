"""From confusion counts to a confidence-bounded empirical ε lower bound (App. E.6, Eqs. 28–30; §2.1 Step 5).

A threshold and direction ({score > t} or {score ≤ t}: DP bounds both orderings of a neighbouring pair) are frozen
on calibration trials by a ``threshold_rules.ThresholdRule``; fresh test trials bound that one event at γ.
"""
from __future__ import annotations

import numpy as np

from pe_kit.audit.confusion import (  # noqa: F401 (re-exported: the Eq. 28–30 primitives live in confusion)
    _epsilon_from_bounds, best_threshold_from_counts, clopper_pearson, cp_bounds, epsilon_lower_from_counts)
from pe_kit.audit.outcome import Audit
from pe_kit.audit.threshold_rules import CalibrationCounts, ThresholdRule, moments_from_counts, rule_named

__all__ = ["clopper_pearson", "epsilon_lower_from_counts", "calibrate_threshold",
           "evaluate_threshold", "candidate_thresholds", "threshold_audit_from_counts", "best_threshold_from_counts",
           "calibrate_from_counts", "population_shift"]


def candidate_thresholds(scores_h0: np.ndarray, scores_h1: np.ndarray, per_tail: int = 400) -> np.ndarray:
    """Candidate thresholds: sorted unique order statistics log-spaced from both tails of both samples.
    Eq. 28's bound is attained in the tails, which this covers finely and the bulk coarsely."""
    out = []
    for s in (np.sort(scores_h0), np.sort(scores_h1)):
        n = s.size
        ranks = np.unique(np.round(np.logspace(0, np.log10(max(n, 1)), per_tail)).astype(np.int64)) - 1
        ranks = ranks[(ranks >= 0) & (ranks < n)]
        out.extend([s[ranks], s[n - 1 - ranks]])
    return np.unique(np.concatenate(out))


def _counts_above(sorted_scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    return sorted_scores.size - np.searchsorted(sorted_scores, thresholds, side="right")


def calibrate_threshold(scores_h0: np.ndarray, scores_h1: np.ndarray, gamma: float, delta: float, *,
                        rule: ThresholdRule | None = None, sample_rate: float | None = None) -> Audit:
    """Choose the threshold (among ``candidate_thresholds``) and direction on calibration trials with ``rule`` (a
    ``ThresholdRule`` or its name; None → ``DEFAULT_RULE``; ``sample_rate`` q for the Gaussian model) (§2.1 Step 5).
    Returns the calibration trials' ``Audit`` at that event (no positive bound: the H0 median, +1, ε 0).
    Raises ValueError if a sample is empty or has NaN.
    """
    s0, s1 = _check_scores(scores_h0, "scores_h0"), _check_scores(scores_h1, "scores_h1")
    cand = candidate_thresholds(s0, s1)
    tp, fp = _counts_above(np.sort(s1), cand), _counts_above(np.sort(s0), cand)
    moments = (float(s0.mean()), float(s0.std()), float(s1.mean()), float(s1.std()))
    counts = CalibrationCounts(cand, tp, fp, s1.size, s0.size, gamma, delta, sample_rate, moments)
    choice = rule_named(rule).select(counts)
    if choice.index < 0:
        return evaluate_threshold(s0, s1, float(np.median(s0)), gamma, delta, rule=choice.rule)
    return evaluate_threshold(s0, s1, float(cand[choice.index]), gamma, delta, choice.direction, rule=choice.rule)


def evaluate_threshold(scores_h0: np.ndarray, scores_h1: np.ndarray, threshold: float, gamma: float,
                       delta: float, direction: int = 1, *, rule: str = "") -> Audit:
    """Counts, point rates and Clopper–Pearson bounds of A = {score > threshold} (Eqs. 28–30), or of
    A = {score ≤ threshold} with ``direction=-1`` (the direction a calibration chose); ``rule`` is recorded."""
    s0, s1 = _check_scores(scores_h0, "scores_h0"), _check_scores(scores_h1, "scores_h1")
    tp, fp = int((s1 > threshold).sum()), int((s0 > threshold).sum())
    return threshold_audit_from_counts(threshold, tp, fp, s1.size, s0.size, gamma, delta, direction, rule=rule)


def threshold_audit_from_counts(threshold: float, tp: int, fp: int, n1: int, n0: int, gamma: float,
                                delta: float, direction: int = 1, *, rule: str = "") -> Audit:
    """``Audit`` from counts alone: ``tp``, ``fp``: #H1 / #H0 trials with score > threshold (``direction=-1``:
    the event {score ≤ threshold}, stored as n1 − tp and n0 − fp). Raises ValueError for a direction other than ±1.
    """
    if direction not in (1, -1):
        raise ValueError(f"direction={direction!r} must be +1 (score > threshold) or -1 (score ≤ threshold)")
    if direction == -1:
        tp, fp = n1 - tp, n0 - fp
    tpr_l, fpr_u, tnr_l, fnr_u = bounds = cp_bounds(tp, fp, n1, n0, gamma)
    eps, branch = _epsilon_from_bounds(bounds, delta)
    return Audit(threshold=float(threshold), epsilon_lower=eps, branch=branch, true_pos=tp, false_pos=fp, n_h1=n1,
                 n_h0=n0, tpr=tp / n1, fpr=fp / n0, tpr_lower=tpr_l, fpr_upper=fpr_u, tnr_lower=tnr_l, fnr_upper=fnr_u,
                 direction=int(direction), rule=str(rule), gamma=gamma, delta=delta)


def calibrate_from_counts(thresholds, true_pos, false_pos, n_h1: int, n_h0: int, gamma: float,
                          delta: float, *, rule: ThresholdRule | None = None, sample_rate: float | None = None,
                          moments: tuple | None = None) -> Audit:
    """``calibrate_threshold`` from counts above ascending ``thresholds`` alone (streaming engines); ``moments``
    (mean0, sd0, mean1, sd1) default to ``threshold_rules.moments_from_counts``. Raises ValueError on mismatched
    lengths, no candidate, unsorted thresholds or counts outside [0, n]."""
    thr = np.asarray(thresholds, dtype=np.float64).ravel()
    tp = np.asarray(true_pos, dtype=np.int64).ravel()
    fp = np.asarray(false_pos, dtype=np.int64).ravel()
    if thr.size == 0 or not (thr.size == tp.size == fp.size):
        raise ValueError(f"thresholds ({thr.size}), true_pos ({tp.size}) and false_pos ({fp.size}) must be "
                         "non-empty and of equal length")
    if np.any(np.diff(thr) <= 0):
        raise ValueError("thresholds must be strictly ascending")
    if tp.min() < 0 or fp.min() < 0 or tp.max() > n_h1 or fp.max() > n_h0:
        raise ValueError("counts must satisfy 0 ≤ true_pos ≤ n_h1 and 0 ≤ false_pos ≤ n_h0")
    if moments is None:
        moments = (*moments_from_counts(thr, fp, n_h0), *moments_from_counts(thr, tp, n_h1))
    choice = rule_named(rule).select(CalibrationCounts(thr, tp, fp, n_h1, n_h0, gamma, delta, sample_rate, moments))
    idx, direction = choice.index, choice.direction
    if idx < 0:
        idx, direction = int(min(np.searchsorted(-fp, -n_h0 / 2, side="left"), thr.size - 1)), 1
    return threshold_audit_from_counts(float(thr[idx]), int(tp[idx]), int(fp[idx]), n_h1, n_h0, gamma, delta,
                                       direction, rule=choice.rule)


def _check_scores(s: np.ndarray, name: str) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64).ravel()
    if s.size == 0:
        raise ValueError(f"{name} is empty: run at least one trial per hypothesis")
    if np.isnan(s).any():
        raise ValueError(f"{name} contains NaN scores: check the background moments (Σ must be positive definite)")
    return s


def population_shift(calibration: Audit, test: Audit, gamma: float) -> dict:
    """Does the frozen threshold see the same FPR on the test split as on calibration? ``population_shift`` is True
    when their two-sided Clopper–Pearson intervals (Eqs. 29–30, tail γ each side) are disjoint; also returns
    ``fpr_calibration``, ``fpr_test`` and their ``_lower`` / ``_upper``. Raises ValueError if the thresholds or
    directions differ, a split has no H0 trial, or γ ∉ (0, 1)."""
    if getattr(calibration, "direction", 1) != getattr(test, "direction", 1):
        raise ValueError(f"population_shift needs one frozen event; got direction {calibration.direction} "
                         f"(calibration) and {test.direction} (test)")
    if calibration.n_h0 < 1 or test.n_h0 < 1:
        raise ValueError("population_shift needs at least one H0 trial on each split (n_h0 ≥ 1)")
    if calibration.threshold != test.threshold:
        raise ValueError(f"population_shift needs one frozen threshold; got {calibration.threshold} (calibration) "
                         f"and {test.threshold} (test)")
    out = {}
    for name, a in (("calibration", calibration), ("test", test)):
        out[f"fpr_{name}"] = a.false_pos / a.n_h0
        out[f"fpr_{name}_lower"] = clopper_pearson(a.false_pos, a.n_h0, gamma, "lower")
        out[f"fpr_{name}_upper"] = clopper_pearson(a.false_pos, a.n_h0, gamma, "upper")
    out["population_shift"] = bool(out["fpr_test_lower"] > out["fpr_calibration_upper"]
                                   or out["fpr_test_upper"] < out["fpr_calibration_lower"])
    return out
