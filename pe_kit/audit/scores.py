"""Audit scores a user already has: ``audit_scores`` (many trials, a calibrated threshold, §2.1 Step 5) and
``audit_one_run`` (one release, m canaries); numpy and scipy only, Opacus only for ε_theory.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from pe_kit.audit.accounting import epsilon_theory_or_inf
from pe_kit.audit.bounds import calibrate_threshold, evaluate_threshold, population_shift
from pe_kit.audit.outcome import Audit
from pe_kit.settings import check_param

__all__ = ["audit_scores", "audit_one_run", "split_trials"]


def _scores(x, name: str, per: str = "trial") -> np.ndarray:
    """``x`` as float64; ``per="canary"`` (one-run scores) stops there: ±inf pass, a rank is what counts."""
    if np.iscomplexobj(x):  # numpy would drop the imaginary part with only a warning
        raise ValueError(f"{name} holds complex numbers: pass real scores (e.g. np.abs(z) or z.real, as you intend)")
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} is not an array of numbers ({exc}): pass one float score per {per}") from None
    if per == "canary":
        return a
    if a.ndim != 1:
        raise ValueError(f"{name} has shape {a.shape}: pass a 1-D array of scores, one per trial")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} holds {int((~np.isfinite(a)).sum())} NaN or infinite scores: drop or fix them")
    return a


def split_trials(scores: np.ndarray, calibration_fraction: float,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Split one hypothesis's n ≥ 2 trials into (calibration, test) by one seeded ``permutation(n)``.
    The calibration part has round(n · calibration_fraction) trials, clipped to [1, n − 1]."""
    n = scores.size
    c = min(max(int(round(n * calibration_fraction)), 1), n - 1)
    perm = rng.permutation(n)
    return scores[perm[:c]], scores[perm[c:]]


def audit_scores(in_scores, out_scores, *, delta: float = 1e-5, alpha: float = 0.05, n_canaries: int = 1,
                 calibration_fraction: float = 0.5, seed: int = 0, noise_multiplier: float | None = None,
                 sample_rate: float = 1.0) -> Audit:
    """ε_lower from scores of trials with the canary in (H1) and out (H0): each hypothesis's trials (≥ 2) are split
    (``split_trials``, ``in_scores`` first, ``default_rng(seed)``), the calibration part chooses the event
    (``bounds.calibrate_threshold``), the test part bounds ε (Eqs. 28–30) at γ = α / (n_canaries · 4) (App. E.6).
    Returns ``Audit`` (ε_theory NaN without ``noise_multiplier``) with the ``population_shift`` columns.
    Raises ValueError for scores not 1-D, non-finite or fewer than 2, or a setting out of range.
    """
    s1, s0 = _scores(in_scores, "in_scores"), _scores(out_scores, "out_scores")
    for name, a in (("in_scores", s1), ("out_scores", s0)):
        if a.size < 2:
            raise ValueError(f"{name} has {a.size} trial(s): audit_scores needs ≥ 2 per hypothesis (one to "
                             "calibrate the threshold, one to bound ε)")
    delta, alpha = check_param("delta", delta), check_param("alpha", alpha)
    n_canaries, seed = check_param("n_canaries", n_canaries), check_param("seed", seed)
    sample_rate = check_param("sample_rate", sample_rate)
    f = float(calibration_fraction)
    if not 0 < f < 1:
        raise ValueError(f"calibration_fraction={calibration_fraction!r} must lie in (0, 1): the share of each "
                         "hypothesis's trials that chooses the threshold (0.5: half)")
    gamma = alpha / (n_canaries * 4)
    rng = np.random.default_rng(seed)
    s1_cal, s1_test = split_trials(s1, f, rng)
    s0_cal, s0_test = split_trials(s0, f, rng)
    cal = calibrate_threshold(s0_cal, s1_cal, gamma, delta, sample_rate=sample_rate)
    test = evaluate_threshold(s0_test, s1_test, cal.threshold, gamma, delta, cal.direction)
    info = {"method": "threshold", **population_shift(cal, test, gamma), "gamma": gamma, "audit_alpha": alpha,
            "audit_delta": delta, "audit_n_canaries": n_canaries, "calibration_fraction": f, "seed": seed,
            **({"mech_noise_multiplier": float(noise_multiplier), "mech_sample_rate": sample_rate}
               if noise_multiplier is not None else {})}
    return replace(test, epsilon_theory=epsilon_theory_or_inf(noise_multiplier, sample_rate, delta), mu_eff=math.nan,
                   calibration=cal, info=info)


def _warn_if_reversed(s: np.ndarray, included, delta, alpha, sample_rate, method: str) -> None:
    """Warn (``UserWarning``) when ε_lower is 0 but the negated scores would bound ε > 0 (a loss-like statistic)."""
    import warnings

    from pe_kit.audit.one_run import _one_run_audit

    flipped = _one_run_audit(-s, included, delta=delta, alpha=alpha, sample_rate=sample_rate, methods=method)[method]
    if flipped.epsilon_lower > 0:
        warnings.warn(f"audit_one_run: ε_lower = 0, but -scores would give {flipped.epsilon_lower:.3g}: the scores "
                      "must be higher for included canaries (higher = \"in\"); if your statistic is a loss or a "
                      "distance (lower = \"in\"), pass -scores. Decide the direction from the statistic's definition "
                      "(choosing it after seeing both bounds doubles the tests: halve alpha)", UserWarning,
                      stacklevel=3)


def _in_guess_rates(scores: np.ndarray, included: np.ndarray, k_plus: int) -> tuple[float, float, float]:
    """TPR, FPR and threshold of the "in" guesses: the k₊ top-scored canaries (ties by index)."""
    if k_plus < 1:
        return 0.0, 0.0, math.inf
    order = np.argsort(-scores, kind="stable")[:k_plus]
    n_in, n_out = int(included.sum()), int((~included).sum())
    hits = int(included[order].sum())
    tpr = hits / n_in if n_in else math.nan
    fpr = (k_plus - hits) / n_out if n_out else math.nan
    return tpr, fpr, float(scores[order[-1]])


def audit_one_run(scores, included, *, delta: float = 1e-5, sample_rate: float = 1.0, alpha: float = 0.05,
                  method: str = "fdp", noise_multiplier: float | None = None) -> Audit:
    """ε_lower from one release with m canaries, each included with probability ½ (``one_run._one_run_audit``;
    higher score = "in"). ``method="fdp"``: the largest μ whose C_q(G_μ) the guesses reject, as ε at δ (``mu_eff``
    = μ); ``"steinke"``: (ε, δ) for any mechanism. Returns ``Audit`` with the "in" guesses' ``tpr`` / ``fpr`` /
    ``threshold``. Warns (UserWarning) when ε_lower is 0 but ``-scores`` would bound ε > 0. Raises ValueError as
    ``_one_run_audit``, or for an unknown method, NaN or complex scores, or σ out of range.
    """
    from pe_kit.audit.one_run import METHODS, _as_included, _one_run_audit

    if method not in METHODS:
        raise ValueError(f"method={method!r} is unknown; use one of {METHODS}")
    s = _scores(scores, "scores", "canary").ravel()
    n_nan = int(np.isnan(s).sum())
    if n_nan:
        raise ValueError(f"scores holds {n_nan} NaN score(s): every canary needs a score to be ranked (±inf "
                         "ranks first / last); fix the statistic that gave NaN (dropping canaries after seeing their "
                         "scores can bias the audit)")
    sample_rate = check_param("sample_rate", sample_rate)  # its declaration: a bool is not q = 1
    res = _one_run_audit(scores, included, delta=delta, alpha=alpha, sample_rate=sample_rate, methods=method)[method]
    if res.epsilon_lower == 0:
        _warn_if_reversed(s, included, delta, alpha, sample_rate, method)
    tpr, fpr, threshold = _in_guess_rates(s, _as_included(included), res.info["k_plus"])
    return replace(res, epsilon_theory=epsilon_theory_or_inf(noise_multiplier, res.info["sample_rate"], res.delta),
                   mu_eff=res.info["mu_lower"] if method == "fdp" else math.nan, threshold=threshold, tpr=tpr, fpr=fpr,
                   info={**res.info, **({"mech_noise_multiplier": float(noise_multiplier),
                                         "mech_sample_rate": res.info["sample_rate"]}
                                        if noise_multiplier is not None else {})})
