"""Membership trials under H0 (canary absent) and H1 (canary eligible, participates w.p. q): ``simulate_scores`` on
the scalar projection (Eq. 14), and the reference ``simulate_scores_full`` on full histograms (Alg. A.1 line 20).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["ScalarProblem", "scalar_problem", "nonce_problem", "simulate_scores", "simulate_scores_full",
           "background_sums"]


@dataclass(frozen=True)
class ScalarProblem:
    """The scalar projection of one canary audit on one user population (Eq. 14): ``projections`` float64 (K,)
    a_u = w·c_u ≠ 0, ``canary_shift`` w·v, ``noise_sd`` σC‖w‖₂, ``offset`` w·m0 + w·v/2 (subtracted from every
    score), ``sample_rate`` q, ``n_users`` N (voting or not)."""

    projections: np.ndarray
    canary_shift: float
    noise_sd: float
    offset: float
    sample_rate: float
    n_users: int


def scalar_problem(weights: np.ndarray, population: sp.spmatrix | np.ndarray, canary: np.ndarray,
                   m0: np.ndarray, noise_std: float, sample_rate: float) -> ScalarProblem:
    """Project a population's (N, |P|) contributions onto the LLR direction w = Σ⁻¹v (Eq. 14).
    ``canary``: v on P; ``m0``: the null mean; ``noise_std``: σC. Raises ValueError on a dimension mismatch."""
    w = np.asarray(weights, dtype=np.float64).ravel()
    v = np.asarray(canary, dtype=np.float64).ravel()
    m0 = np.asarray(m0, dtype=np.float64).ravel()
    if not (w.size == v.size == m0.size == population.shape[1]):
        raise ValueError(f"weights {w.size}, canary {v.size}, m0 {m0.size} and population columns "
                         f"{population.shape[1]} must all equal |P|")
    a = np.asarray(population @ w).ravel()
    wv = float(w @ v)
    return ScalarProblem(projections=a[a != 0].astype(np.float64), canary_shift=wv,
                         noise_sd=float(noise_std * np.linalg.norm(w)), offset=float(w @ m0 + wv / 2),
                         sample_rate=float(sample_rate), n_users=int(population.shape[0]))


def nonce_problem(mu_eff: float, sample_rate: float, n_users: int = 0) -> ScalarProblem:
    """The ``ScalarProblem`` of a canary with separation μ_eff and no background voters: ℓ | H0 ~ N(−μ²/2, μ²),
    ℓ | inclusion ~ N(μ²/2, μ²) (Eqs. 14–17; perfect nonce: μ = 1/σ, Eq. 20). Raises ValueError on μ < 0 or
    non-finite, q outside (0, 1], or n_users < 0."""
    if not (np.isfinite(mu_eff) and mu_eff >= 0):
        raise ValueError(f"mu_eff={mu_eff} must be finite and ≥ 0")
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate={sample_rate} must satisfy 0 < q ≤ 1")
    if int(n_users) != n_users or n_users < 0:
        raise ValueError(f"n_users={n_users} must be an integer ≥ 0")
    mu = float(mu_eff)
    return ScalarProblem(projections=np.zeros(0), canary_shift=mu * mu, noise_sd=mu if mu > 0 else 1.0,
                         offset=mu * mu / 2, sample_rate=float(sample_rate), n_users=int(n_users))


def background_sums(projections: np.ndarray, sample_rate: float, n_trials: int,
                    rng: np.random.Generator) -> np.ndarray:
    """Σ_u I_u a_u for ``n_trials`` independent trials, I_u ~ Bernoulli(q) i.i.d.
    Exact: the ones of the n_trials × K Bernoulli grid (row-major) are located by cumulative Geometric(q) gaps."""
    a = np.asarray(projections, dtype=np.float64)
    k = a.size
    out = np.zeros(n_trials)
    if k == 0 or n_trials == 0:
        return out
    if sample_rate >= 1:
        out += a.sum()
        return out
    total = n_trials * k
    pos = -1
    expected = max(16, int(total * sample_rate * 1.02) + 64)
    while True:
        gaps = rng.geometric(sample_rate, size=min(expected, 1 << 24))
        hits = pos + np.cumsum(gaps)
        inside = hits[hits < total]
        if inside.size:
            out += np.bincount(inside // k, weights=a[inside % k], minlength=n_trials)
        if inside.size < hits.size:
            return out
        pos = int(hits[-1])
        expected = max(16, int((total - pos) * sample_rate * 1.02) + 64)


def simulate_scores(problem: ScalarProblem, hypothesis: int, n_trials: int, rng: np.random.Generator,
                    chunk_size: int = 1 << 20) -> np.ndarray:
    """Scores ℓ = Σ_u I_u a_u + J·(w·v) + N(0, noise_sd²) − offset of ``n_trials`` trials, J ≡ 0 under H0
    (hypothesis=0), J ~ Bernoulli(q) under H1 (App. E.2, E.5). Raises ValueError on a bad hypothesis or n_trials < 0."""
    if hypothesis not in (0, 1):
        raise ValueError(f"hypothesis={hypothesis!r} must be 0 (canary absent) or 1 (canary eligible)")
    if n_trials < 0:
        raise ValueError(f"n_trials={n_trials} must be ≥ 0")
    out = np.empty(n_trials)
    for start in range(0, n_trials, chunk_size):
        t = min(chunk_size, n_trials - start)
        s = background_sums(problem.projections, problem.sample_rate, t, rng)
        if hypothesis == 1:
            s += (rng.random(t) < problem.sample_rate) * problem.canary_shift
        s += rng.normal(0.0, problem.noise_sd, size=t) if problem.noise_sd > 0 else 0.0
        out[start:start + t] = s - problem.offset
    return out


def simulate_scores_full(population: sp.spmatrix, canary_full: np.ndarray, coords: np.ndarray,
                         weights: np.ndarray, m0: np.ndarray, noise_std: float, sample_rate: float,
                         hypothesis: int, n_trials: int, rng: np.random.Generator,
                         chunk_size: int = 256) -> np.ndarray:
    """Reference path: each trial's full histogram of the (N, p) ``population`` and ``canary_full`` v, scored as
    ℓ = wᵀ(Y_P − m0 − v/2) on ``coords`` P (Eq. 14), ``chunk_size`` trials at a time. float64 (n_trials,)."""
    if hypothesis not in (0, 1):
        raise ValueError(f"hypothesis={hypothesis!r} must be 0 or 1")
    population = sp.csr_matrix(population)
    n_users, p = population.shape
    v_full = np.asarray(canary_full, dtype=np.float64).ravel()
    coords = np.asarray(coords, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64)
    centre = np.asarray(m0, dtype=np.float64) + v_full[coords] / 2
    out = np.empty(n_trials)
    for start in range(0, n_trials, chunk_size):
        t = min(chunk_size, n_trials - start)
        mask = sp.csr_matrix((rng.random((t, n_users)) < sample_rate).astype(np.float64))
        y = np.asarray((mask @ population).todense())
        if hypothesis == 1:
            y += (rng.random(t) < sample_rate)[:, None] * v_full[None, :]
        y += rng.normal(0.0, noise_std, size=(t, p))
        out[start:start + t] = (y[:, coords] - centre) @ w
    return out


def check_equal_populations(n_calibration: int, n_test: int) -> None:
    """ValueError unless the calibration and test populations are integers ≥ 1 of one size N: the threshold frozen
    on calibration users (§2.1 Step 5) applies to a sum over N users (Eq. 7, Eqs. 34–35)."""
    for name, n in (("n_calibration", n_calibration), ("n_test", n_test)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"{name}={n!r} must be an integer ≥ 1 (users in the split)")
    if int(n_calibration) != int(n_test):
        raise ValueError(f"n_calibration={n_calibration} but n_test={n_test}: the calibration and test splits must be "
                         "disjoint users of the same size N (the threshold is calibrated on the statistic of N users); "
                         f"set n_calibration = n_test (e.g. --set n_calibration={n_test})")
