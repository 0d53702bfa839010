"""ε_lower from confusion counts: Clopper–Pearson endpoints (Eqs. 29–30), Eq. 28, and its exact maximum over
thresholds; shared by every threshold rule (``audit.threshold_rules``) and audit (``audit.bounds``)."""
from __future__ import annotations

import numpy as np
from scipy import stats

__all__ = ["clopper_pearson", "cp_bounds", "epsilon_lower_from_counts", "best_threshold_from_counts"]


def clopper_pearson(successes, trials, gamma: float, side: str):
    """One-sided Clopper–Pearson bound on a binomial rate (Eqs. 29–30), broadcast over arrays: p_L = Beta(x,
    n−x+1)⁻¹(γ) (``side="lower"``, 0 at x = 0), p_U = Beta(x+1, n−x)⁻¹(1−γ) (``"upper"``, 1 at x = n).
    Raises ValueError on x outside [0, n], n < 1, γ outside (0, 1), or an unknown side."""
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
    """ε_lower of Eq. 28 from the counts of the event A = "score > threshold": (ε, branch), ε = max{0,
    log((TPR_L−δ)/FPR_U), log((TNR_L−δ)/FNR_U)} with bounds at tail γ, branch 1 or 2 (0 when clamped)."""
    return _epsilon_from_bounds(cp_bounds(np.asarray(true_pos), np.asarray(false_pos), n_h1, n_h0, gamma), delta)


def cp_bounds(tp, fp, n_h1: int, n_h0: int, gamma: float) -> tuple:
    """Clopper–Pearson (TPR_L, FPR_U, TNR_L, FNR_U) at tail γ of the event's counts (Eqs. 29–30)."""
    return (clopper_pearson(tp, n_h1, gamma, "lower"), clopper_pearson(fp, n_h0, gamma, "upper"),
            clopper_pearson(n_h0 - fp, n_h0, gamma, "lower"), clopper_pearson(n_h1 - tp, n_h1, gamma, "upper"))


def _epsilon_from_bounds(bounds: tuple, delta: float):
    """(ε, branch) of Eq. 28 from ``cp_bounds``."""
    tpr_l, fpr_u, tnr_l, fnr_u = bounds
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


def best_threshold_from_counts(true_pos, false_pos, n_h1: int, n_h0: int, gamma: float, delta: float,
                               batch: int = 256) -> tuple[int, float]:
    """Exact argmax of ε (Eq. 28) over ascending candidate thresholds given only their counts: a full scan with
    exact pruning (Eq. 28's point estimate bounds ε, so candidates go in decreasing bound order, ``batch`` at a
    time, until it falls below the best). Returns (index, ε) of the lowest-threshold maximum, or (−1, 0.0).
    Raises ValueError on mismatched shapes, counts outside [0, n] or γ outside (0, 1).
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
