"""One-run audits: ε lower bounds from the guesses about m canaries (each included w.p. ½) in a single release.

The abstaining guesser (:func:`abstaining_guesses`) says "in" for its k₊ top-scored canaries and "out" for its k₋
bottom ones: r = k₊ + k₋ guesses, v correct; the bounds live in ``pe_kit.audit.one_run_bounds``. Each pair of
:func:`guess_pairs` is tested at β = α / (number of pairs) (Bonferroni): the maximum is a 1 − α lower bound.
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from pe_kit.audit.one_run_bounds import (_check_level, _check_sample_rate, epsilon_from_mu, epsilon_lower_steinke,
                                         fdp_rejects, mu_lower_fdp, steinke_p_value)
from pe_kit.audit.outcome import Audit

__all__ = ["abstaining_guesses", "guess_pairs", "steinke_p_value", "epsilon_lower_steinke", "fdp_rejects",
           "mu_lower_fdp", "epsilon_from_mu", "idealised_scores"]

METHODS = ("steinke", "fdp")


def _as_included(included) -> np.ndarray:
    """The truth S_i as a flat bool array from bools or 0/1 numbers; anything else raises."""
    raw = np.asarray(included).ravel()
    if raw.dtype == bool:
        return raw
    try:
        num = raw.astype(np.float64)
    except (TypeError, ValueError):
        num = np.full(raw.shape, np.nan)
    bad = ~np.isin(num, (0.0, 1.0))
    if bad.any():
        raise ValueError(f"included must hold 0/1 or True/False per canary (S_i); got {raw[bad][:3].tolist()}: "
                         f"for ±1 labels s use included = (s == 1)")
    return num == 1.0


def _as_count(value, name: str) -> int:
    """A guess count as int; integral floats (10.0) and numpy ints pass, fractions raise naming the field."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = float("nan")
    if not (np.isfinite(x) and x == int(x)):
        raise ValueError(f"{name}={value!r} must be an integer number of guesses")
    return int(x)


def abstaining_guesses(scores: np.ndarray, included: np.ndarray, k_plus: int, k_minus: int) -> tuple[int, int]:
    """The abstaining guesser (Steinke et al. §2): "in" for the k₊ highest ``scores``, "out" for the k₋ lowest (ties
    by index); returns (r, v), guesses and correct ones. Raises ValueError on shapes that differ, NaN scores,
    ``included`` not 0/1, fractional k₊ or k₋, or k₊ + k₋ > m."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    inc = _as_included(included)
    k_plus, k_minus = _as_count(k_plus, "k_plus"), _as_count(k_minus, "k_minus")
    if s.shape != inc.shape:
        raise ValueError(f"scores {s.shape} and included {inc.shape} must have the same length (one per canary)")
    if np.isnan(s).any():
        raise ValueError("scores contain NaN: check the per-canary moments (Σ must be positive definite)")
    m = s.size
    if min(k_plus, k_minus) < 0 or k_plus + k_minus > m:
        raise ValueError(f"k_plus={k_plus}, k_minus={k_minus} must be ≥ 0 with k_plus + k_minus ≤ m={m}")
    order = np.argsort(-s, kind="stable")
    v = int(inc[order[:k_plus]].sum()) + int((~inc[order[m - k_minus:]]).sum() if k_minus else 0)
    return int(k_plus + k_minus), v


def guess_pairs(m: int, fractions=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5)) -> list[tuple[int, int]]:
    """The sorted distinct (k₊, k₋) pairs searched: (k, 0) and (k, k) for k = round(f·m) ≥ 1 per fraction, 2k ≤ m for
    (k, k); at least [(1, 0)]. Raises ValueError for m < 1 or a fraction outside (0, 1]."""
    if int(m) != m or m < 1:
        raise ValueError(f"m={m} must be an integer ≥ 1")
    if any(not 0 < f <= 1 for f in fractions):
        raise ValueError(f"fractions={fractions} must lie in (0, 1]")
    ks = sorted({max(1, int(round(f * m))) for f in fractions})
    pairs = {(min(k, m), 0) for k in ks} | {(k, k) for k in ks if 2 * k <= m}
    return sorted(pairs)


def _one_run_audit(scores: np.ndarray, included: np.ndarray, *, delta: float, alpha: float = 0.05,
                   sample_rate: float = 1.0, pairs: list[tuple[int, int]] | None = None,
                   methods=METHODS) -> dict[str, Audit]:
    """Both one-run bounds from per-canary scores (higher = "in") and truth ``included`` (S_i ~ Bernoulli(½)),
    maximised over ``pairs`` (default ``guess_pairs(m)``) at family-wise level α; ``sample_rate``: q of C_q(G_μ);
    ``methods``: subset of ("steinke", "fdp") or one name. Returns method → ``Audit`` (ε_lower at δ, 0 if no pair
    rejects); ``info``: ``mu_lower`` (NaN for ``steinke``), the attaining pair's ``k_plus``, ``k_minus``,
    ``guesses``, ``correct`` and the settings. Raises ValueError on bad shapes, empty scores, ``included`` not 0/1
    or too unbalanced for a Bernoulli(½) draw (two-sided binomial p < 10⁻⁶), levels, a sample_rate outside (0, 1],
    an unknown method, a fractional pair or an empty pair list."""
    _check_level(alpha, "alpha")
    _check_level(delta, "delta")
    sample_rate = _check_sample_rate(sample_rate)
    if np.ndim(scores) != 1 or np.ndim(included) != 1:
        raise ValueError(f"scores {np.shape(scores)} and included {np.shape(included)} must be 1-D: one value per "
                         "canary")
    inc = _as_included(included)
    m = inc.size
    if m == 0:
        raise ValueError("scores and included are empty: a one-run audit needs at least one canary")
    n_in = int(inc.sum())
    if stats.binomtest(n_in, m, 0.5).pvalue < 1e-6:  # a fair draw is refused with probability < 1e-6
        raise ValueError(f"included has {n_in} of {m} canaries in: both bounds need S_i ~ Bernoulli(½) drawn "
                         f"independently (two-sided binomial p < 1e-6); draw included = rng.random(m) < 0.5")
    if pairs is not None:
        for a, b in pairs:
            if not all(float(x) == int(x) for x in (a, b)):
                raise ValueError(f"pairs holds ({a}, {b}): each (k_plus, k_minus) must be an integer number of guesses")
    pairs = guess_pairs(m) if pairs is None else [(int(a), int(b)) for a, b in pairs]
    if not pairs:
        raise ValueError("pairs is empty: search at least one (k_plus, k_minus)")
    methods = (methods,) if isinstance(methods, str) else tuple(methods)
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"methods {sorted(unknown)} unknown; use {METHODS}")
    beta = alpha / len(pairs)
    counts = [abstaining_guesses(scores, inc, kp, km) for kp, km in pairs]
    out = {}
    for method in methods:
        if method == "steinke":
            eps = [epsilon_lower_steinke(m, r, v, delta, beta) for r, v in counts]
            j = int(np.argmax(eps))
            best, mu = eps[j], float("nan")
        else:  # rank pairs by a coarse μ (ε increases with μ), then refine and convert the best one
            mus = [mu_lower_fdp(m, r, v, beta, sample_rate, refine=False) for r, v in counts]
            j = int(np.argmax(mus))
            mu = mu_lower_fdp(m, *counts[j], beta, sample_rate) if mus[j] > 0 else 0.0
            best = epsilon_from_mu(mu, sample_rate, delta)
        (kp, km), (r, v) = pairs[j], counts[j]
        out[method] = Audit(epsilon_lower=max(0.0, float(best)), delta=float(delta), method=method, info={
            "method": method, "mu_lower": float(mu), "k_plus": kp, "k_minus": km, "guesses": r, "correct": v,
            "m": m, "n_included": n_in, "alpha": float(alpha), "beta": float(beta), "n_pairs": len(pairs),
            "delta": float(delta), "sample_rate": float(sample_rate)})
    return out


def idealised_scores(mu: float, sample_rate: float, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The idealised one-run game of a Poisson-subsampled Gaussian: (scores float64 (m,), included bool (m,)) with
    S_i ~ Bernoulli(½), J_i ~ Bernoulli(q), ℓ_i ~ N(−μ²/2 + J_i μ², μ²) (Eqs. 14–17) and score log[(1−q) + q e^ℓ]
    (Eq. 4); μ = 0 is the null run. Raises ValueError for μ < 0, q outside (0, 1], m < 1."""
    if not (np.isfinite(mu) and mu >= 0):
        raise ValueError(f"mu={mu} must be finite and ≥ 0")
    _check_sample_rate(sample_rate)
    if int(m) != m or m < 1:
        raise ValueError(f"m={m} must be an integer ≥ 1")
    from pe_kit.audit.moments import mixture_llr

    included = rng.random(m) < 0.5
    joined = included & (rng.random(m) < sample_rate)
    ell = rng.normal(0.0, 1.0, m) * mu - mu * mu / 2 + joined * mu * mu
    return mixture_llr(ell, sample_rate), included
