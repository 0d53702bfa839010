"""Expected ε_lower of an audit with μ_eff, q and n trials per hypothesis (App. E.4–E.6): the expected counts under
the Gaussian scores of Eqs. 16–19, 23 in Eqs. 29–30 and Eq. 28, maximised over the threshold."""
from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

#: The most trials per hypothesis :func:`expected_epsilon` takes (trials=None: the n → ∞ limit).
MAX_EXPECTED_TRIALS = 10**12


def _cp_real(x, n, gamma: float, side: str):
    """Clopper–Pearson endpoints (Eqs. 29–30) at real-valued expected counts x ∈ [0, n]."""
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
    """Expected ε_lower of the Gaussian pair at μ_eff with Clopper–Pearson at ``trials`` (module docstring):
    FPR(a) = Φ̄((a + μ²/2)/μ), TPR(a) = (1−q)FPR(a) + qΦ̄((a − μ²/2)/μ) (Eqs. 18–19, 23), maximised over a (grid,
    then Brent); ``trials=None``: the n → ∞ limit. Returns ε (and the maximizing a with ``return_threshold``).
    Raises ValueError on μ ≤ 0, q ∉ (0, 1], trials outside [1, MAX_EXPECTED_TRIALS], γ or δ out of range."""
    _check(mu_eff, sample_rate, trials, gamma, delta)
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


def _check(mu_eff, sample_rate, trials, gamma, delta) -> None:
    """ValueError for an argument of ``expected_epsilon`` out of range (its docstring)."""
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


def separable_epsilon(sample_rate: float, trials: int, gamma: float = 0.0025, delta: float = 1e-5) -> float:
    """The most an audit at ``trials`` can certify: ``expected_epsilon`` as μ_eff → ∞ (FPR = 0, TPR = q, Eq. 23),
    ε = log((p_L(qn) − δ) / (1 − γ^{1/n})) or the reverse event's, floored at 0 (2.45 at q = 0.05, n = 2,000,
    γ = 0.05/29, δ = 10⁻⁶). Raises ValueError as ``expected_epsilon``."""
    _check(1.0, sample_rate, trials, gamma, delta)
    q, n = float(sample_rate), float(trials)
    tpr_l, fpr_u = _cp_real(q * n, n, gamma, "lower"), 1.0 - gamma ** (1.0 / n)
    tnr_l, fnr_u = gamma ** (1.0 / n), _cp_real((1 - q) * n, n, gamma, "upper")
    with np.errstate(all="ignore"):
        b1 = math.log((tpr_l - delta) / fpr_u) if tpr_l > delta else 0.0
        b2 = math.log((tnr_l - delta) / fnr_u) if tnr_l > delta and fnr_u > 0 else 0.0
    return max(0.0, b1, b2)
