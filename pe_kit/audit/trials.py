"""Membership trials under H0 (canary absent) and H1 (canary eligible, participates w.p. q).

Two paths that draw the *same* score distribution:

* ``simulate_scores`` — the scalar projection (Eq. 14): the score is linear in the release,
  ℓ = wᵀ(Y_P − m0 − v/2), so one trial needs each background user's projection a_u = w·c_u, the
  canary's w·v, and one Gaussian of variance (σC)²‖w‖². Users with a_u = 0 are skipped and
  participation of the K voting users is drawn as a Bernoulli(q) process over the flattened
  trials × users grid with geometric gaps (exact, O(qTK) work, no dense mask).
* ``simulate_scores_full`` — the reference: builds every trial's full p-dimensional histogram
  Y = Σ_u I_u v_u + J v + N(0, (σC)² I) (Alg. A.1 line 20) and scores it. Slow; for tests.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["ScalarProblem", "scalar_problem", "nonce_problem", "simulate_scores", "simulate_scores_full",
           "background_sums"]


@dataclass(frozen=True)
class ScalarProblem:
    """The scalar projection of one canary audit on one user population.

    Attributes:
        projections: float64 (K,) a_u = w·c_u of the background users with a_u ≠ 0.
        canary_shift: w·v (= μ_eff² when w = Σ⁻¹v).
        noise_sd: σC‖w‖₂, std of the projected DP noise.
        offset: w·m0 + w·v/2, subtracted from every score (Eq. 14).
        sample_rate: q.
        n_users: N, the population size (voting or not).
    """

    projections: np.ndarray
    canary_shift: float
    noise_sd: float
    offset: float
    sample_rate: float
    n_users: int


def scalar_problem(weights: np.ndarray, population: sp.spmatrix | np.ndarray, canary: np.ndarray,
                   m0: np.ndarray, noise_std: float, sample_rate: float) -> ScalarProblem:
    """Project a population onto the LLR direction (Eq. 14).

    Args:
        weights: float (P,) w = Σ⁻¹v.
        population: (N, P) contributions of the background users on the probe coordinates.
        canary: float (P,) v, the canary's contribution on P.
        m0: float (P,) null mean used by the score.
        noise_std: σC.
        sample_rate: q.

    Returns:
        ``ScalarProblem``.

    Raises:
        ValueError: on dimension mismatch.
    """
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
    """The scalar problem of a canary with separation μ_eff and no background voters on P.

    With Σ = (σC)²I and w = Σ⁻¹v: w·v = μ², the projected noise sd σC‖w‖ = μ and the offset w·v/2 = μ²/2,
    so ℓ | H0 ~ N(−μ²/2, μ²) and ℓ | fixed inclusion ~ N(+μ²/2, μ²) exactly (Eqs. 14–17). A perfect
    nonce canary (‖v_P‖ = C, no user votes on its probes) has μ_eff = 1/σ (Eq. 20).

    Args:
        mu_eff: μ ≥ 0 (0 gives a null canary: H0 and H1 identical).
        sample_rate: q in (0, 1].
        n_users: N recorded on the problem (the population size; no user votes on P).

    Returns:
        ``ScalarProblem`` with empty projections.

    Raises:
        ValueError: on μ < 0 or non-finite, q outside (0, 1], n_users < 0.
    """
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

    Exact: the ones of the n_trials × K Bernoulli grid (row-major) are located by cumulative
    Geometric(q) gaps. float64 (n_trials,).
    """
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
    """Scores ℓ of ``n_trials`` trials under H0 (hypothesis=0) or H1 (hypothesis=1) on the scalar path.

    ℓ = Σ_u I_u a_u + J·(w·v) + N(0, noise_sd²) − offset, with J ≡ 0 under H0 and J ~ Bernoulli(q)
    under H1 (App. E.2, E.5). Returns float64 (n_trials,). Raises ValueError on a bad hypothesis.
    """
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
    """Reference path: build each trial's full histogram (N users, p coordinates), then score it.

    Args:
        population: (N, p) full contributions of the background users.
        canary_full: float (p,) the canary's full clipped contribution.
        coords: int (|P|,) inspected coordinates P.
        weights, m0: float (|P|,) as in Eq. 14.
        noise_std: σC. sample_rate: q. hypothesis: 0 or 1.
        n_trials: number of trials; chunk_size: trials per dense (chunk, p) block.

    Returns:
        float64 (n_trials,) scores ℓ = wᵀ(Y_P − m0 − v/2).
    """
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
    """Refuse a calibration population whose size differs from the test population N.

    The threshold is frozen on trials of the calibration users (§2.1 Step 5) and then evaluated on the
    test users; both must score the same statistic, whose background is a sum over N users (Eq. 7) with
    moments scaled by N (Eqs. 34–35). The splits are therefore distinct users of equal size. Resampling
    calibration users with replacement to reach N duplicates users, fattens the background's tails and
    moves the frozen threshold (seen: nonce canaries at ε_lower 0.83 / 0.96 on calibration gave 0.000 on
    test), so it is not offered.

    Args:
        n_calibration, n_test: int, user counts of the two splits.

    Raises:
        ValueError: when they differ (the message names ``n_calibration`` / ``n_test`` and the fix), or when
            either is not an integer ≥ 1.
    """
    for name, n in (("n_calibration", n_calibration), ("n_test", n_test)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"{name}={n!r} must be an integer ≥ 1 (users in the split)")
    if int(n_calibration) != int(n_test):
        raise ValueError(f"n_calibration={n_calibration} but n_test={n_test}: the calibration and test splits must be "
                         "disjoint users of the same size N (the threshold is calibrated on the statistic of N users); "
                         f"set n_calibration = n_test (e.g. --set n_calibration={n_test})")
