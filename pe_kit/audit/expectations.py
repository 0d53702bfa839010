"""Expected ε_lower of an audit with μ_eff, q and n trials per hypothesis, in closed form.

The confusion counts at threshold a are replaced by their expectations under the Gaussian scores of
Eqs. 16–19 with hidden participation (Eq. 23: TPR = (1−q)·FPR + q·TPR_inc), plugged into the
Clopper–Pearson endpoints (Eqs. 29–30, real-valued counts) and Eq. 28, and maximised over a. This is
what an audit with a perfectly calibrated threshold would report on average; ``trials=None`` gives the
limit n → ∞. Source: "Canaries in the Bank" App. E.4–E.6.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

#: The most trials per hypothesis :func:`expected_epsilon` takes: its Clopper–Pearson inverses (Eqs. 29–30) take
#: ≈ 3 s at 10¹², 35 s at 10¹⁵ and do not return at 10³⁰; trials=None gives the n → ∞ limit they approach.
MAX_EXPECTED_TRIALS = 10**12

# ----------------------------------------------------------------------------------------------- expectations

def _cp_real(x, n, gamma: float, side: str):
    """Clopper–Pearson endpoints (Eqs. 29–30) at real-valued 'expected' counts x ∈ [0, n]."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        if side == "lower":
            return np.where(x <= 0, 0.0, special.betaincinv(np.maximum(x, 1e-300), n - x + 1, gamma))
        return np.where(x >= n, 1.0, special.betaincinv(x + 1, np.maximum(n - x, 1e-300), 1 - gamma))


def _expected_eps_at(a, mu: float, q: float, n: float | None, gamma: float, delta: float):
    a = np.asarray(a, dtype=np.float64)
    z0, z1 = (a + mu * mu / 2) / mu, (a - mu * mu / 2) / mu
    fpr, tnr = special.ndtr(-z0), special.ndtr(z0)
    tpr = (1 - q) * fpr + q * special.ndtr(-z1)
    fnr = (1 - q) * tnr + q * special.ndtr(z1)
    if n is None:
        tpr_l, fpr_u, tnr_l, fnr_u = tpr, fpr, tnr, fnr
    else:
        tpr_l, fpr_u = _cp_real(n * tpr, n, gamma, "lower"), _cp_real(n * fpr, n, gamma, "upper")
        tnr_l, fnr_u = _cp_real(n * tnr, n, gamma, "lower"), _cp_real(n * fnr, n, gamma, "upper")
    with np.errstate(all="ignore"):
        b1 = np.where((tpr_l - delta > 0) & (fpr_u > 0), np.log(np.maximum(tpr_l - delta, 1e-300) / fpr_u), -np.inf)
        b2 = np.where((tnr_l - delta > 0) & (fnr_u > 0), np.log(np.maximum(tnr_l - delta, 1e-300) / fnr_u), -np.inf)
    return np.maximum(0.0, np.maximum(b1, b2))


def expected_epsilon(mu_eff: float, sample_rate: float, trials: int | None, gamma: float = 0.0025,
                     delta: float = 1e-5, return_threshold: bool = False):
    """Expected ε_lower of the Gaussian pair at μ_eff with Clopper–Pearson at ``trials`` (App. E.4–E.6).

    Derivation. By Eqs. 16–17 and 21, one release's LLR score is ℓ ~ N(−μ²/2, μ²) under H0 and
    (1−q)·N(−μ²/2, μ²) + q·N(+μ²/2, μ²) under H1 (μ = μ_eff). At threshold a,
    FPR(a) = Φ̄((a + μ²/2)/μ), TPR(a) = (1−q)FPR(a) + qΦ̄((a − μ²/2)/μ) (Eqs. 18–19, 23), and TNR, FNR
    are their complements. Replacing each confusion count by its expectation (x = n·rate, real-valued)
    in the Clopper–Pearson endpoints p_L = Beta(x, n−x+1)⁻¹(γ), p_U = Beta(x+1, n−x)⁻¹(1−γ) (Eqs. 29–30)
    gives ε(a) = max{0, log((TPR_L−δ)/FPR_U), log((TNR_L−δ)/FNR_U)} (Eq. 28); the expected curve is
    max_a ε(a) (dense grid over a ∈ [−μ²/2 − 10μ, μ²/2 + 10μ], then Brent refinement). With
    ``trials=None`` the bounds are the rates themselves: the n → ∞ limit, i.e. the tightest (ε, δ) of
    the threshold tests of the pair, which approaches ε_theory for a perfect canary (μ = 1/σ). A real
    audit falls a little below this curve: its threshold is calibrated on noisy trials and its test
    counts fluctuate around their expectations.

    Args:
        mu_eff: μ > 0. sample_rate: q in (0, 1]. trials: n per hypothesis (1 to :data:`MAX_EXPECTED_TRIALS`) or
            None for the limit.
        gamma: γ in (0, 1). delta: δ in [0, 1). return_threshold: also return the maximizing a.

    Returns:
        float ε (and the threshold a in ℓ units if asked).

    Raises:
        ValueError: on out-of-range arguments.
    """
    if not (math.isfinite(mu_eff) and mu_eff > 0):
        raise ValueError(f"mu_eff={mu_eff} must be finite and > 0")
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate={sample_rate} must satisfy 0 < q ≤ 1")
    if trials is not None and (int(trials) != trials or trials < 1):
        raise ValueError(f"trials={trials} must be an integer ≥ 1 or None (the n → ∞ limit)")
    if trials is not None and trials > MAX_EXPECTED_TRIALS:
        raise ValueError(f"trials={trials:.3g} is out of range: an expected ε_lower is computed for 1 to "
                         f"{MAX_EXPECTED_TRIALS:.0e} trials per hypothesis (its Clopper–Pearson inverses do not return "
                         "for far more); for more, use trials=None, the n → ∞ limit they approach (pe-kit explore: the "
                         "line 'ε as trials → ∞')")
    if not 0 < gamma < 1 or not 0 <= delta < 1:
        raise ValueError(f"gamma={gamma} must lie in (0, 1) and delta={delta} in [0, 1)")
    mu, q, n = float(mu_eff), float(sample_rate), (None if trials is None else float(trials))
    grid = np.linspace(-mu * mu / 2 - 10 * mu, mu * mu / 2 + 10 * mu, 4001)
    eps = _expected_eps_at(grid, mu, q, n, gamma, delta)
    i = int(np.argmax(eps))
    best_a, best = float(grid[i]), float(eps[i])
    if best > 0:
        lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
        res = optimize.minimize_scalar(lambda x: -float(_expected_eps_at(x, mu, q, n, gamma, delta)),
                                       bounds=(lo, hi), method="bounded", options={"xatol": 1e-9 * max(mu, 1)})
        if -res.fun > best:
            best_a, best = float(res.x), float(-res.fun)
    return (best, best_a) if return_threshold else best


def separable_epsilon(sample_rate: float, trials: int, gamma: float = 0.0025, delta: float = 1e-5) -> float:
    """Expected ε_lower of a perfectly separable canary: the most an audit at ``trials`` can certify (App. E.4–E.6).

    The μ_eff → ∞ limit of :func:`expected_epsilon`: no H0 trial crosses the threshold (FPR = 0) and an H1 trial
    does whenever the canary takes part (TPR = q, Eq. 23 with TPR_inc = 1), so Eq. 28 with the Clopper–Pearson
    endpoints at the expected counts (Eqs. 29–30) is ε = log((p_L(qn) − δ) / (1 − γ^{1/n})), and the reverse event
    log((γ^{1/n} − δ) / p_U((1−q)n)) ≤ −log(1−q) + O(1/n); the larger, floored at 0. Whatever a release
    does, an audit with n trials per hypothesis at γ is not expected to certify more (e.g. q = 0.05, n = 2,000,
    γ = 0.05/29, δ = 10⁻⁶: 2.45).

    Args: sample_rate: q in (0, 1]. trials: n ≥ 1. gamma: γ in (0, 1). delta: δ in [0, 1).
    Returns: float ε ≥ 0. Raises: ValueError on out-of-range arguments (as :func:`expected_epsilon`).
    """
    expected_epsilon(1.0, sample_rate, trials, gamma, delta)  # validates the arguments
    q, n = float(sample_rate), float(trials)
    tpr_l, fpr_u = _cp_real(q * n, n, gamma, "lower"), 1.0 - gamma ** (1.0 / n)
    tnr_l, fnr_u = gamma ** (1.0 / n), _cp_real((1 - q) * n, n, gamma, "upper")
    with np.errstate(all="ignore"):
        b1 = math.log((tpr_l - delta) / fpr_u) if tpr_l > delta else 0.0
        b2 = math.log((tnr_l - delta) / fnr_u) if tnr_l > delta and fnr_u > 0 else 0.0
    return max(0.0, b1, b2)
