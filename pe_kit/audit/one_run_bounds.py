"""The two ε lower bounds of a one-run audit from its guessing game (m canaries, r guesses, v correct), at level β:

* Steinke, Nasr, Jagielski (NeurIPS 2023, arXiv 2305.08846), Thm 3.1 with δ > 0 (``steinke_p_value``).
* Mahloujifar, Melis, Chaudhuri (arXiv 2410.22235): the abstention recursion for a trade-off f (k = 2): τ = β,
  h_v = τ(r − v)/m, r_v = τv/m, for i = v−1 … 0
  h_i = max(h_{i+1}, f̄⁻¹(r_{i+1})),  r_i = r_{i+1} + i/(r − i)·(h_i − h_{i+1}),
  with f̄(x) = 1 − f(x); f = C_q(G_μ) (Dong, Roth, Su 2022) is rejected when r_0 + h_0 > r/m. The largest rejected
  μ as ε at δ (``epsilon_from_mu``) bounds ε only for mechanisms in the family (a PE nonce canary, Eqs. 14–17).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import special, stats

__all__ = ["steinke_p_value", "epsilon_lower_steinke", "fdp_rejects", "mu_lower_fdp", "epsilon_from_mu"]


def _check_counts(m: int, r: int, v: int) -> None:
    if not (int(m) == m and int(r) == r and int(v) == v):
        raise ValueError(f"m={m}, r={r}, v={v} must be integers")
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 ≤ correct v={v} ≤ guesses r={r} ≤ canaries m={m}")


def _check_sample_rate(sample_rate: float) -> float:
    """q of the f-DP family as a float in (0, 1]; NaN, 0, negatives and q > 1 raise ValueError."""
    try:
        q = float(sample_rate)
    except (TypeError, ValueError):
        raise ValueError(f"sample_rate={sample_rate!r} must be a number q with 0 < q ≤ 1 (the mechanism's Poisson "
                         f"participation; 1 = no subsampling)") from None
    if not 0 < q <= 1:
        raise ValueError(f"sample_rate={sample_rate!r} must satisfy 0 < q ≤ 1 (the mechanism's Poisson participation; "
                         f"1 = no subsampling)")
    return q


def _check_level(beta: float, name: str = "beta") -> None:
    if isinstance(beta, (str, bytes, bool)) or not isinstance(beta, (int, float, np.number)):
        raise ValueError(f"{name}={beta!r} is not a number: pass a float in (0, 1), e.g. {name}=1e-5")
    if not 0 < beta < 1:
        raise ValueError(f"{name}={beta} must lie in (0, 1)")


def steinke_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Upper bound in [0, 1] on P[≥ v correct of r guesses] for an (ε, δ)-DP mechanism (Steinke et al., Thm 3.1):
    P[Binomial(r, p_ε) ≥ v] + 2mδ · max_{1≤i≤v} P[v−i ≤ Binomial(r, p_ε) ≤ v−1] / i, p_ε = e^ε/(1+e^ε), capped at 1.
    Raises ValueError on counts (0 ≤ v ≤ r ≤ m) or parameters out of range."""
    _check_counts(m, r, v)
    if not epsilon >= 0:
        raise ValueError(f"epsilon={epsilon} must be ≥ 0")
    if not 0 <= delta <= 1:
        raise ValueError(f"delta={delta} must lie in [0, 1]")
    p = float(special.expit(epsilon))
    tail = float(stats.binom.sf(v - 1, r, p))
    extra = 0.0
    if delta > 0 and v > 0:
        pmf = stats.binom.pmf(np.arange(v - 1, -1, -1), r, p)  # P[B = v−1], P[B = v−2], …, P[B = 0]
        extra = 2.0 * m * delta * float(np.max(np.cumsum(pmf) / np.arange(1, v + 1)))
    return min(1.0, tail + extra)


def epsilon_lower_steinke(m: int, r: int, v: int, delta: float, beta: float, tol: float = 1e-6) -> float:
    """ε_lower = sup{ε ≥ 0 : ``steinke_p_value``(ε) < β} (bisection to ``tol``; 0 when ε = 0 is not rejected): the
    mechanism is not (ε, δ)-DP with confidence 1 − β. Source: Steinke et al. (2023), Thm 3.1 and ``get_eps_audit``.
    Raises ValueError on counts or levels out of range, or tol ≤ 0."""
    _check_level(beta)
    if not tol > 0:
        raise ValueError(f"tol={tol} must be > 0 (the bisection's width in ε; e.g. 1e-6)")
    if steinke_p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while steinke_p_value(m, r, v, hi, delta) < beta:
        lo, hi = hi, 2 * hi
        if hi > 1e4:
            return float("inf")
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if steinke_p_value(m, r, v, mid, delta) < beta:
            lo = mid
        else:
            hi = mid
    return lo


def _fq(x: np.ndarray, mu: np.ndarray, q: float) -> np.ndarray:
    """f_q(x) = q·G_μ(x) + (1−q)(1−x), G_μ(x) = Φ(Φ⁻¹(1−x) − μ) (remove-direction subsampled Gaussian)."""
    with np.errstate(all="ignore"):
        g = special.ndtr(-special.ndtri(x) - mu)
    return q * g + (1 - q) * (1 - x)


class _FastInverseBlowup:
    """f̄⁻¹(y) for f = C_q(G_μ), one row per μ: the x in [0, 1] with 1 − f(x) = y (the "inverse blow-up"; reference:
    ``tests/oracles.py``). For x ≤ x* = Φ(−μ/2), z = Φ⁻¹(x) from a per-row table of log(qΦ(z + μ) + (1−q)Φ(z))
    on [−38, −μ/2] and three Newton steps; then the −1-slope segment; beyond f_q(x*): x = f_q(1 − y)."""

    def __init__(self, mu: np.ndarray, q: float, n_z: int = 1024) -> None:
        self.mu, self.q = np.asarray(mu, dtype=np.float64), float(q)
        self.x_star = special.ndtr(-self.mu / 2)
        self.f_star = _fq(self.x_star, self.mu, self.q)
        t = np.linspace(0.0, 1.0, n_z)
        self.z = -38.0 + t[None, :] * (38.0 - self.mu[:, None] / 2)  # (n_mu, n_z), ascending per row
        self.n_z = n_z
        log_g = self._log_g(self.z, self.mu[:, None])
        self.span = 4000.0
        self.flat = (log_g + self.span * np.arange(self.mu.size)[:, None]).ravel()

    def _log_g(self, z, mu):
        return np.logaddexp(math.log(self.q) + special.log_ndtr(z + mu), math.log1p(-self.q) + special.log_ndtr(z))

    def __call__(self, y: np.ndarray) -> np.ndarray:
        y = np.clip(np.asarray(y, dtype=np.float64), 0.0, 1.0)
        mu, q, xs, fs = self.mu, self.q, self.x_star, self.f_star
        out = np.where(y > 1 - xs, _fq(1 - y, mu, q), y - 1 + xs + fs)
        low = y <= 1 - fs
        if low.any():
            rows = np.flatnonzero(low)
            with np.errstate(divide="ignore"):
                ly = np.log(y[rows])
            ok = np.isfinite(ly)
            zz = np.full(rows.size, -np.inf)
            if ok.any():
                r_ok = rows[ok]
                j = np.searchsorted(self.flat, ly[ok] + self.span * r_ok) - r_ok * self.n_z
                j = np.clip(j, 1, self.n_z - 1)
                z0, z1 = self.z[r_ok, j - 1], self.z[r_ok, j]
                l0, l1 = self._log_g(z0, mu[r_ok]), self._log_g(z1, mu[r_ok])
                z = z0 + (z1 - z0) * np.clip((ly[ok] - l0) / np.where(l1 > l0, l1 - l0, 1.0), 0.0, 1.0)
                m_ok = mu[r_ok]
                for _ in range(3):
                    lg = self._log_g(z, m_ok)
                    ldg = np.logaddexp(math.log(q) - 0.5 * (z + m_ok) ** 2, math.log1p(-q) - 0.5 * z * z) \
                        - 0.5 * math.log(2 * math.pi)
                    z = np.minimum(z - (lg - ly[ok]) / np.exp(ldg - lg), -m_ok / 2)
                zz[ok] = z
            out[rows] = special.ndtr(zz)
        return np.clip(out, 0.0, 1.0)


def fdp_rejects(m: int, r: int, v: int, mu: np.ndarray, beta: float, sample_rate: float = 1.0) -> np.ndarray:
    """Bool array (shaped like ``mu``): whether ``v`` correct of ``r`` guesses about ``m`` canaries rejects
    f = C_q(G_μ) at level β (module docstring); monotone in μ. Raises ValueError on counts or levels out of range,
    or a sample_rate outside (0, 1]."""
    _check_counts(m, r, v)
    _check_level(beta)
    sample_rate = _check_sample_rate(sample_rate)
    mu = np.atleast_1d(np.asarray(mu, dtype=np.float64))
    if r == 0:
        return np.zeros(mu.shape, dtype=bool)
    if sample_rate == 1:
        return _gdp_rejects(m, r, v, mu, beta)
    h = np.full(mu.shape, beta * (r - v) / m)
    rr = np.full(mu.shape, beta * v / m)
    inverse = _FastInverseBlowup(mu, sample_rate)
    for i in range(v - 1, -1, -1):
        h_new = np.maximum(h, inverse(rr))
        rr = rr + (i / (r - i)) * (h_new - h)
        h = h_new
    return rr + h > r / m


def _gdp_rejects(m: int, r: int, v: int, mu: np.ndarray, beta: float) -> np.ndarray:
    """``fdp_rejects`` at q = 1 (f̄⁻¹(y) = Φ(Φ⁻¹(y) − μ) inlined): h and r never decrease, so rows already above r/m
    and rows whose h stopped moving are dropped from the loop (exact)."""
    h = np.full(mu.size, beta * (r - v) / m)
    rr = np.full(mu.size, beta * v / m)
    out = np.zeros(mu.size, dtype=bool)
    idx, mu_a, cap = np.arange(mu.size), mu.ravel(), r / m
    with np.errstate(all="ignore"):
        for i in range(v - 1, -1, -1):
            h_new = np.maximum(h, special.ndtr(special.ndtri(np.minimum(rr, 1.0)) - mu_a))
            moved = h_new > h
            rr = rr + (i / (r - i)) * (h_new - h)
            h = h_new
            over = rr + h > cap
            if over.any() or not moved.all():
                out[idx[over]] = True
                keep = moved & ~over
                idx, mu_a, h, rr = idx[keep], mu_a[keep], h[keep], rr[keep]
                if idx.size == 0:
                    break
    return out.reshape(mu.shape)


def mu_lower_fdp(m: int, r: int, v: int, beta: float, sample_rate: float = 1.0, mu_max: float = 20.0,
                 grid: int = 128, refine: bool = True) -> float:
    """The largest μ whose C_q(G_μ) is rejected (``fdp_rejects``) on a geometric grid of ``grid`` values in
    [10⁻³, mu_max], then (``refine``) a linear grid up to the first accepted value: a rejected grid point (0 if none,
    ``mu_max`` if all). Raises ValueError on counts or levels out of range, a sample_rate outside (0, 1], grid < 2
    or mu_max ≤ 1e-3."""
    sample_rate = _check_sample_rate(sample_rate)
    if int(grid) != grid or grid < 2 or not mu_max > 1e-3:
        raise ValueError(f"grid={grid} must be an integer ≥ 2 and mu_max={mu_max} > 1e-3 (the grid spans "
                         f"[1e-3, mu_max]); the defaults are 128 and 20")
    coarse = np.geomspace(1e-3, mu_max, int(grid))
    if not fdp_rejects(m, r, v, coarse[:1], beta, sample_rate)[0]:
        return 0.0  # the strongest claim stands, so every weaker one does (monotone): one row instead of the grid
    rej = fdp_rejects(m, r, v, coarse, beta, sample_rate)
    if not rej.any():
        return 0.0
    j = int(np.flatnonzero(rej).max())
    if j == coarse.size - 1:
        return float(mu_max)
    if not refine:
        return float(coarse[j])
    fine = np.linspace(coarse[j], coarse[j + 1], grid)
    rej_f = fdp_rejects(m, r, v, fine, beta, sample_rate)
    return float(fine[np.flatnonzero(rej_f).max()]) if rej_f.any() else float(coarse[j])


def _gdp_delta(eps: float, mu: float) -> float:
    return float(special.ndtr(-eps / mu + mu / 2) - math.exp(eps) * special.ndtr(-eps / mu - mu / 2))


def epsilon_from_mu(mu: float, sample_rate: float, delta: float) -> float:
    """ε at δ of C_q(G_μ) (noise multiplier 1/μ): q = 1 the μ-GDP closed form (Dong, Roth, Su 2022, Cor. 2.13) by
    bisection; q < 1 ``accounting.epsilon_theory(1/μ, q, δ)`` minus its discretisation error 0.01 (clamped at 0).
    μ = 0 → 0.0; μ = ∞ → ∞ when δ < q, else 0.0. Raises ValueError for μ < 0, q outside (0, 1] or δ outside (0, 1)."""
    if not mu >= 0:
        raise ValueError(f"mu={mu} must be ≥ 0")
    _check_sample_rate(sample_rate)
    _check_level(delta, "delta")
    if mu == 0:
        return 0.0
    if math.isinf(mu):  # no noise (σ = 0): the hockey-stick divergence is q at every ε, so ε = ∞ iff δ < q
        return float("inf") if delta < sample_rate else 0.0
    if sample_rate < 1:
        from pe_kit.audit.accounting import epsilon_theory

        return max(0.0, epsilon_theory(1.0 / mu, sample_rate, delta, eps_error=0.01) - 0.01)
    if _gdp_delta(0.0, mu) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while _gdp_delta(hi, mu) > delta:
        lo, hi = hi, 2 * hi
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if _gdp_delta(mid, mu) > delta:
            lo = mid
        else:
            hi = mid
    return hi
