"""From confusion counts to a confidence-bounded empirical ε lower bound.

Source: App. E.6 of the paper — Eq. 28 (ε_lower, both branches, clamped at 0) and Eqs. 29–30
(one-sided Clopper–Pearson endpoints via ``scipy.stats.beta``), and §2.1 Step 5 (a threshold fixed on
a calibration split, evaluated on fresh trials).

Score direction (issue 10). Eq. 28 bounds the event A = {score > t}; its second branch is the
complement of the *same* event with H0 and H1 swapped, so a statistic whose H1 scores fall *below*
H0 (a score of the wrong sign, e.g. a user-supplied distance) gives ε_lower = 0 from both branches. The
kit therefore audits **both directions**: calibration also scores the reversed event A' = {score ≤ t}
(``direction = -1``: both branches of Eq. 28 on A'), and keeps the direction and threshold with the
larger calibrated ε (ties → the usual direction, +1). The direction is chosen on the calibration split
exactly like the threshold and then frozen; the test split evaluates that single event, so its four
Clopper–Pearson bounds keep γ = α/(4·n_canaries) — no further γ split is needed, because no second test
is made on the test trials (splitting γ would be needed only if both directions were bounded on the same
test trials and the larger one reported). Valid because DP bounds both orderings of a neighbouring pair:
P1(A') ≤ e^ε P0(A') + δ and P0(A') ≤ e^ε P1(A') + δ for every event.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

__all__ = ["clopper_pearson", "epsilon_lower_from_counts", "ThresholdAudit", "calibrate_threshold",
           "evaluate_threshold", "candidate_thresholds", "threshold_audit_from_counts", "best_threshold_from_counts",
           "calibrate_from_counts", "population_shift"]


def clopper_pearson(successes, trials, gamma: float, side: str):
    """One-sided Clopper–Pearson bound on a binomial rate (Eqs. 29–30).

    Args:
        successes: int or int array x (0 ≤ x ≤ n).
        trials: int or int array n (≥ 1), broadcast with ``successes``.
        gamma: tail probability γ in (0, 1) of the one-sided bound.
        side: ``"lower"`` (p_L; 0 when x = 0) or ``"upper"`` (p_U; 1 when x = n).

    Returns:
        float or float64 array of bounds.

    Raises:
        ValueError: on x outside [0, n], n < 1, γ outside (0, 1), or an unknown side.

    Source: ``scipy.stats.beta.ppf``: p_L = Beta(x, n−x+1)⁻¹(γ), p_U = Beta(x+1, n−x)⁻¹(1−γ).
    """
    x = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if not 0 < gamma < 1:
        raise ValueError(f"gamma={gamma} must lie in (0, 1)")
    if np.any(n < 1) or np.any(x < 0) or np.any(x > n):
        raise ValueError("clopper_pearson needs 0 ≤ successes ≤ trials and trials ≥ 1")
    x, n = np.broadcast_arrays(x, n)
    with np.errstate(all="ignore"):
        if side == "lower":
            out = np.where(x == 0, 0.0, stats.beta.ppf(gamma, np.maximum(x, 1), n - x + 1))
        elif side == "upper":
            out = np.where(x == n, 1.0, stats.beta.ppf(1 - gamma, x + 1, np.maximum(n - x, 1)))
        else:
            raise ValueError(f"side={side!r} must be 'lower' or 'upper'")
    return float(out) if out.ndim == 0 else out


def epsilon_lower_from_counts(true_pos, false_pos, n_h1: int, n_h0: int, gamma: float, delta: float):
    """ε_lower of Eq. 28 from confusion counts of the event A = "score > threshold".

    Args:
        true_pos: int (or array) #H1 trials in A; false_pos: #H0 trials in A.
        n_h1, n_h0: trials per hypothesis.
        gamma: tail probability of each of the four one-sided bounds.
        delta: δ.

    Returns:
        (epsilon, branch) where epsilon = max{0, log((TPR_L−δ)/FPR_U), log((TNR_L−δ)/FNR_U)} and
        branch is 1 or 2 for the attaining branch, 0 when clamped at 0 (arrays if inputs are arrays).
        A branch whose numerator is ≤ δ gives no bound.
    """
    tp = np.asarray(true_pos)
    fp = np.asarray(false_pos)
    tpr_l = clopper_pearson(tp, n_h1, gamma, "lower")
    fpr_u = clopper_pearson(fp, n_h0, gamma, "upper")
    tnr_l = clopper_pearson(n_h0 - fp, n_h0, gamma, "lower")
    fnr_u = clopper_pearson(n_h1 - tp, n_h1, gamma, "upper")
    b1 = _log_ratio(np.asarray(tpr_l) - delta, np.asarray(fpr_u))
    b2 = _log_ratio(np.asarray(tnr_l) - delta, np.asarray(fnr_u))
    eps = np.maximum(0.0, np.maximum(b1, b2))
    branch = np.where(eps <= 0, 0, np.where(b1 >= b2, 1, 2))
    if eps.ndim == 0:
        return float(eps), int(branch)
    return eps, branch


def _log_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        out = np.where((num > 0) & (den > 0), np.log(np.maximum(num, 1e-300) / np.maximum(den, 1e-300)), -np.inf)
    return out


@dataclass(frozen=True)
class ThresholdAudit:
    """Counts and bounds of one decision threshold on one set of trials (Eq. 28).

    Attributes: threshold (score units), epsilon (ε bound, ≥ 0), branch (0/1/2), true_pos, false_pos
    (#H1 / #H0 trials in the audited event A), n_h1, n_h0, tpr, fpr (point estimates), tpr_lower,
    fpr_upper, tnr_lower, fnr_upper (bounds at γ), direction (+1: A = {score > threshold}, Eq. 28 as
    written; −1: A = {score ≤ threshold}, for statistics whose H1 scores fall below H0; see the module
    docstring).
    """

    threshold: float
    epsilon: float
    branch: int
    true_pos: int
    false_pos: int
    n_h1: int
    n_h0: int
    tpr: float
    fpr: float
    tpr_lower: float
    fpr_upper: float
    tnr_lower: float
    fnr_upper: float
    direction: int = 1

    def as_dict(self) -> dict:
        return asdict(self)


def candidate_thresholds(scores_h0: np.ndarray, scores_h1: np.ndarray, per_tail: int = 400) -> np.ndarray:
    """Candidate thresholds: order statistics log-spaced from both tails of both samples.

    The bound of Eq. 28 is attained in the tails (few false positives for branch 1, few false
    negatives for branch 2); log-spaced ranks from each end of each sample cover them finely
    and the bulk coarsely. Returns a sorted float64 array of unique thresholds.
    """
    out = []
    for s in (np.sort(scores_h0), np.sort(scores_h1)):
        n = s.size
        ranks = np.unique(np.round(np.logspace(0, np.log10(max(n, 1)), per_tail)).astype(np.int64)) - 1
        ranks = ranks[(ranks >= 0) & (ranks < n)]
        out.extend([s[ranks], s[n - 1 - ranks]])
    return np.unique(np.concatenate(out))


def _counts_above(sorted_scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    return sorted_scores.size - np.searchsorted(sorted_scores, thresholds, side="right")


def calibrate_threshold(scores_h0: np.ndarray, scores_h1: np.ndarray, gamma: float, delta: float,
                        per_tail: int = 400) -> ThresholdAudit:
    """Choose the threshold that maximizes the bounded ε on calibration trials (§2.1 Step 5).

    Args:
        scores_h0, scores_h1: float (n0,), (n1,) scores under H0 and H1 (higher = "canary present").
        gamma, delta: as in ``epsilon_lower_from_counts``.
        per_tail: candidate thresholds per tail per sample (see ``candidate_thresholds``).

    Returns:
        ``ThresholdAudit`` at the best threshold and direction (ties → direction +1, the lowest threshold);
        both events {score > t} and {score ≤ t} are scored (module docstring). If nothing gives a positive
        bound, the threshold is the H0 median, direction +1 and epsilon 0.

    Raises:
        ValueError: if either sample is empty or contains NaN.
    """
    s0, s1 = _check_scores(scores_h0, "scores_h0"), _check_scores(scores_h1, "scores_h1")
    cand = candidate_thresholds(s0, s1, per_tail)
    s0s, s1s = np.sort(s0), np.sort(s1)
    tp, fp = _counts_above(s1s, cand), _counts_above(s0s, cand)
    eps, _ = epsilon_lower_from_counts(tp, fp, s1.size, s0.size, gamma, delta)
    rev, _ = epsilon_lower_from_counts(s1.size - tp, s0.size - fp, s1.size, s0.size, gamma, delta)
    best, best_rev = int(np.argmax(eps)), int(np.argmax(rev))
    if rev[best_rev] > eps[best]:  # H1 scores fall below H0: audit A = {score ≤ t} (module docstring)
        return evaluate_threshold(s0, s1, float(cand[best_rev]), gamma, delta, direction=-1)
    threshold = float(cand[best]) if eps[best] > 0 else float(np.median(s0))
    return evaluate_threshold(s0, s1, threshold, gamma, delta)


def evaluate_threshold(scores_h0: np.ndarray, scores_h1: np.ndarray, threshold: float, gamma: float,
                       delta: float, direction: int = 1) -> ThresholdAudit:
    """Counts, point rates and Clopper–Pearson bounds of A = {score > threshold} (Eqs. 28–30), or of
    A = {score ≤ threshold} with ``direction=-1`` (the direction a calibration chose)."""
    s0, s1 = _check_scores(scores_h0, "scores_h0"), _check_scores(scores_h1, "scores_h1")
    tp, fp = int((s1 > threshold).sum()), int((s0 > threshold).sum())
    return threshold_audit_from_counts(threshold, tp, fp, s1.size, s0.size, gamma, delta, direction)


def threshold_audit_from_counts(threshold: float, tp: int, fp: int, n1: int, n0: int, gamma: float,
                                delta: float, direction: int = 1) -> ThresholdAudit:
    """``ThresholdAudit`` from counts alone (for streaming engines that never hold the scores).

    ``tp``, ``fp``: #H1 / #H0 trials with score > threshold. With ``direction=-1`` the audited event is
    {score ≤ threshold}, whose counts are n1 − tp and n0 − fp (stored as ``true_pos`` / ``false_pos``).

    Raises:
        ValueError: for a direction other than +1 / −1.
    """
    if direction not in (1, -1):
        raise ValueError(f"direction={direction!r} must be +1 (score > threshold) or -1 (score ≤ threshold)")
    if direction == -1:
        tp, fp = n1 - tp, n0 - fp
    eps, branch = epsilon_lower_from_counts(tp, fp, n1, n0, gamma, delta)
    return ThresholdAudit(
        threshold=float(threshold), epsilon=eps, branch=branch, true_pos=tp, false_pos=fp, n_h1=n1, n_h0=n0,
        tpr=tp / n1, fpr=fp / n0,
        tpr_lower=clopper_pearson(tp, n1, gamma, "lower"), fpr_upper=clopper_pearson(fp, n0, gamma, "upper"),
        tnr_lower=clopper_pearson(n0 - fp, n0, gamma, "lower"), fnr_upper=clopper_pearson(n1 - tp, n1, gamma, "upper"),
        direction=int(direction),
    )


def best_threshold_from_counts(true_pos, false_pos, n_h1: int, n_h0: int, gamma: float, delta: float,
                               batch: int = 256) -> tuple[int, float]:
    """Exact argmax of ε (Eq. 28) over candidate thresholds given only their confusion counts.

    For streaming engines: the thresholds are not needed, only the counts above each, in ascending
    threshold order (so both count arrays are non-increasing). Exact pruning keeps the answer equal to a
    full scan (``np.argmax`` of ``epsilon_lower_from_counts`` over all candidates):

    * ε > 0 in either branch needs tp/n1 > fp/n0 (both branches reduce to it since TPR_L ≤ tp/n1,
      FPR_U ≥ fp/n0, TNR_L ≤ tn/n0, FNR_U ≥ fn/n1 for γ < 1/2), so other candidates are skipped;
    * consecutive candidates with identical (tp, fp) share ε: only the lowest threshold is kept;
    * branch and bound: the same inequalities make the point-estimate value
      max{log((tp/n1 − δ)/(fp/n0)), log((tn/n0 − δ)/(fn/n1))} an upper bound of ε; candidates are
      evaluated in decreasing bound order (``batch`` at a time) until the bound falls below the best ε.

    Args:
        true_pos, false_pos: int (m,) counts above each candidate, ascending thresholds.
        n_h1, n_h0: trials per hypothesis. gamma: γ in (0, 1). delta: δ ≥ 0. batch: evaluations per step.

    Returns:
        (index, epsilon): the lowest-threshold candidate attaining the maximal ε > 0, or (−1, 0.0) if no
        candidate gives a positive bound.

    Raises:
        ValueError: on mismatched shapes or counts outside [0, n].
    """
    tp = np.asarray(true_pos, dtype=np.int64).ravel()
    fp = np.asarray(false_pos, dtype=np.int64).ravel()
    if tp.shape != fp.shape:
        raise ValueError(f"true_pos {tp.shape} and false_pos {fp.shape} must have the same length")
    if tp.size and (tp.min() < 0 or fp.min() < 0 or tp.max() > n_h1 or fp.max() > n_h0):
        raise ValueError("counts must satisfy 0 ≤ true_pos ≤ n_h1 and 0 ≤ false_pos ≤ n_h0")
    if not 0 < gamma < 1:
        raise ValueError(f"gamma={gamma} must lie in (0, 1)")
    if gamma < 0.5:
        cand = np.flatnonzero(tp.astype(np.float64) * n_h0 > fp.astype(np.float64) * n_h1)
    else:
        cand = np.arange(tp.size)
    if cand.size == 0:
        return -1, 0.0
    keep = np.ones(cand.size, dtype=bool)
    keep[1:] = (tp[cand[1:]] != tp[cand[:-1]]) | (fp[cand[1:]] != fp[cand[:-1]])
    cand = cand[keep]
    t, f = tp[cand].astype(np.float64), fp[cand].astype(np.float64)
    if gamma < 0.5:
        with np.errstate(all="ignore"):
            u1 = np.where(f > 0, np.log(np.maximum(t / n_h1 - delta, 0) / (f / n_h0)), np.inf)
            u2 = np.where(t < n_h1, np.log(np.maximum((n_h0 - f) / n_h0 - delta, 0) / ((n_h1 - t) / n_h1)), np.inf)
        ub = np.maximum(u1, u2)
        order = np.argsort(-ub, kind="stable")
    else:
        ub = np.full(cand.size, np.inf)
        order = np.arange(cand.size)
    best_eps, best_idx = 0.0, -1
    for start in range(0, order.size, batch):
        sel = order[start:start + batch]
        if ub[sel[0]] < best_eps:
            break
        eps, _ = epsilon_lower_from_counts(tp[cand[sel]], fp[cand[sel]], n_h1, n_h0, gamma, delta)
        eps = np.atleast_1d(eps)
        top = eps.max()
        if top > best_eps:
            best_eps = float(top)
            best_idx = int(cand[sel][eps == top].min())
        elif top == best_eps and top > 0:
            best_idx = min(best_idx, int(cand[sel][eps == top].min()))
    return best_idx, best_eps


def calibrate_from_counts(thresholds, true_pos, false_pos, n_h1: int, n_h0: int, gamma: float,
                          delta: float) -> ThresholdAudit:
    """``calibrate_threshold`` for streaming engines: pick a threshold from counts alone (§2.1 Step 5).

    Args:
        thresholds: float (m,) ascending candidate thresholds.
        true_pos, false_pos: int (m,) #H1 / #H0 calibration trials above each threshold.
        n_h1, n_h0: trials per hypothesis. gamma, delta: as in ``epsilon_lower_from_counts``.

    Returns:
        ``ThresholdAudit`` at the threshold and direction maximizing Eq. 28 over both events {score > t} and
        {score ≤ t} (ties → direction +1, lowest threshold; exact, see ``best_threshold_from_counts``). If no
        candidate gives ε > 0: the lowest threshold with at most half of the H0 trials above it (the grid's
        H0 median), direction +1 and ε = 0 — as ``calibrate_threshold``.

    Raises:
        ValueError: on mismatched lengths, an empty candidate set, or unsorted thresholds.
    """
    thr = np.asarray(thresholds, dtype=np.float64).ravel()
    tp = np.asarray(true_pos, dtype=np.int64).ravel()
    fp = np.asarray(false_pos, dtype=np.int64).ravel()
    if thr.size == 0 or not (thr.size == tp.size == fp.size):
        raise ValueError(f"thresholds ({thr.size}), true_pos ({tp.size}) and false_pos ({fp.size}) must be "
                         "non-empty and of equal length")
    if np.any(np.diff(thr) <= 0):
        raise ValueError("thresholds must be strictly ascending")
    idx, eps = best_threshold_from_counts(tp, fp, n_h1, n_h0, gamma, delta)
    # the reversed event {score ≤ t}: counts n − (counts above), non-increasing in descending threshold order
    ridx, reps = best_threshold_from_counts((n_h1 - tp)[::-1], (n_h0 - fp)[::-1], n_h1, n_h0, gamma, delta)
    if ridx >= 0 and reps > eps:
        j = thr.size - 1 - ridx
        return threshold_audit_from_counts(float(thr[j]), int(tp[j]), int(fp[j]), n_h1, n_h0, gamma, delta, -1)
    if idx < 0:
        idx = int(min(np.searchsorted(-fp, -n_h0 / 2, side="left"), thr.size - 1))
    return threshold_audit_from_counts(float(thr[idx]), int(tp[idx]), int(fp[idx]), n_h1, n_h0, gamma, delta)


def _check_scores(s: np.ndarray, name: str) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64).ravel()
    if s.size == 0:
        raise ValueError(f"{name} is empty: run at least one trial per hypothesis")
    if np.isnan(s).any():
        raise ValueError(f"{name} contains NaN scores: check the background moments (Σ must be positive definite)")
    return s


def population_shift(calibration: ThresholdAudit, test: ThresholdAudit, gamma: float) -> dict:
    """Does the frozen threshold see the same false-positive rate on the test split as on calibration?

    The threshold is chosen on the calibration users' trials and evaluated on the test users' (§2.1
    Step 5). If the two populations differ (or calibration was biased), the FPR at that threshold moves
    and ε_lower on test can collapse. Each split's FPR gets a two-sided Clopper–Pearson interval
    (Eqs. 29–30, tail γ each side); the check flags the canary when the intervals do not overlap.

    Args:
        calibration, test: ``ThresholdAudit`` of the two splits at the same threshold.
        gamma: float in (0, 1), the tail of each one-sided bound (the audit's γ).

    Returns:
        dict: ``fpr_calibration``, ``fpr_calibration_lower`` / ``_upper``, ``fpr_test``, ``fpr_test_lower`` /
        ``_upper`` (rates, unitless), ``population_shift`` (bool: the intervals are disjoint).

    Raises:
        ValueError: if the thresholds or directions differ (not the same frozen event), a split has no H0
            trial, or γ is outside (0, 1).
    """
    if getattr(calibration, "direction", 1) != getattr(test, "direction", 1):
        raise ValueError(f"population_shift needs one frozen event; got direction {calibration.direction} (calibration) "
                         f"and {test.direction} (test)")
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
