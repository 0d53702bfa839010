"""Aux moments and plug-in m̂0, Σ̂ (Eqs. 31–35), LLR weights w = Σ⁻¹v and ℓ = wᵀ(Y − m0 − v/2) (Eqs. 2–3, 14),
μ_eff (Eq. 15) and the mixture LLR ℓ_mix (Eqs. 4, 22)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from pe_kit.settings import MechanismConfig


@dataclass(frozen=True)
class BackgroundMoments:
    """Auxiliary-user moments on P (Eqs. 31–33): ``mean`` μ̂_P (|P|,), ``second_moment`` shrink(M̂_P) (|P|, |P|),
    uncentered, and ``n_aux``."""

    mean: np.ndarray
    second_moment: np.ndarray
    n_aux: int


def restrict(contribs: sp.spmatrix | np.ndarray, coords: np.ndarray) -> sp.csr_matrix:
    """Columns ``coords`` of an (N, p) contribution matrix, as CSR float64 (N, |P|)."""
    return sp.csr_matrix(contribs)[:, np.asarray(coords, dtype=np.int64)]


def aux_moments(aux: sp.spmatrix | np.ndarray, shrinkage: float = 0.1) -> BackgroundMoments:
    """μ̂_P (Eq. 31) and shrink(M̂_P) = (1−s)M̂ + s·diag(M̂) (Eqs. 32–33) from (n_aux, |P|) aux contributions.
    Raises ValueError on no aux users or a shrinkage s outside [0, 1]."""
    n = aux.shape[0]
    if n == 0:
        raise ValueError("aux has no users: the audit needs auxiliary users to estimate the background")
    if not 0 <= shrinkage <= 1:
        raise ValueError(f"shrinkage={shrinkage} must lie in [0, 1]")
    a = sp.csr_matrix(aux, dtype=np.float64)
    mean = np.asarray(a.mean(axis=0)).ravel()
    m = np.asarray((a.T @ a).todense()) / n
    shrunk = (1 - shrinkage) * m
    shrunk[np.diag_indices_from(shrunk)] = np.diag(m)
    return BackgroundMoments(mean=mean, second_moment=shrunk, n_aux=n)


def null_moments(moments: BackgroundMoments, n_users: int, mechanism: MechanismConfig,
                 ridge: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """Plug-in null mean and covariance of Y_P for N background users (Eqs. 34–35).
    m̂0 = qN μ̂_P;  Σ̂_P = q(1−q)N shrink(M̂_P) + (σC)² I + ridge·I. Returns (m0 (|P|,), sigma (|P|, |P|))."""
    q = mechanism.sample_rate
    m0 = q * n_users * moments.mean
    sigma = q * (1 - q) * n_users * moments.second_moment
    sigma = sigma + (mechanism.noise_std ** 2 + ridge) * np.eye(sigma.shape[0])
    return m0, sigma


def llr_weights(canary: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """w = Σ⁻¹v by Cholesky solve (Eq. 14). Raises ValueError if Σ is not positive definite."""
    try:
        return sla.cho_solve(sla.cho_factor(sigma, lower=True), np.asarray(canary, dtype=np.float64))
    except np.linalg.LinAlgError as exc:
        raise ValueError("the null covariance Σ is not positive definite: use noise_multiplier > 0 "
                         "or ridge > 0") from exc


def mu_eff(canary: np.ndarray, sigma: np.ndarray) -> float:
    """μ_eff = sqrt(vᵀΣ⁻¹v), the Mahalanobis separation (Eqs. 3, 15); ≤ 1/σ by Eq. 20."""
    v = np.asarray(canary, dtype=np.float64)
    return float(np.sqrt(max(0.0, v @ llr_weights(v, sigma))))


def design_moments(canary: np.ndarray, aux: sp.spmatrix, n_users: int, mechanism: MechanismConfig,
                   shrinkage: float, ridge: float) -> tuple[np.ndarray, np.ndarray, float]:
    """(m̂0, w = Σ̂_P⁻¹v, μ_eff) of a frozen design (Eqs. 14–15, 31–35): the canary's v_P (|P|,) and the aux users'
    contributions restricted to P (``restrict``), for N = ``n_users``, with ``shrinkage`` (Eq. 33) and ``ridge``."""
    m0, sigma = null_moments(aux_moments(aux, shrinkage), n_users, mechanism, ridge)
    w = llr_weights(canary, sigma)
    return m0, w, float(np.sqrt(max(0.0, w @ canary)))


def llr(y: np.ndarray, canary: np.ndarray, m0: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """Fixed-inclusion Gaussian LLR ℓ(y) = vᵀΣ⁻¹(y − m0 − v/2) (Eqs. 3, 14) of y (|P|,) or (T, |P|)."""
    w = llr_weights(canary, sigma)
    out = (np.asarray(y, dtype=np.float64) - m0 - np.asarray(canary) / 2) @ w
    return float(out) if np.ndim(out) == 0 else out


def mixture_llr(ell, sample_rate: float):
    """ℓ_mix = log[(1−q) + q·e^ℓ] (Eqs. 4, 22), computed stably with ``logaddexp``."""
    q = float(sample_rate)
    if not 0 < q <= 1:
        raise ValueError(f"sample_rate={q} must satisfy 0 < q ≤ 1")
    ell = np.asarray(ell, dtype=np.float64)
    out = np.logaddexp(np.log1p(-q) if q < 1 else -np.inf, np.log(q) + ell)
    return float(out) if out.ndim == 0 else out
