"""The audit statistics: background moments, the Gaussian LLR, μ_eff, the mixture LLR, and one
calibrated canary audit from contributions to ε_lower.

Source: §2.1 Steps 2–5 (Eqs. 2–5) and App. E (Eqs. 8–9, 14–15, 20, 22, 28, 31–35).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from .accounting import epsilon_theory
from .bounds import ThresholdAudit, calibrate_threshold, evaluate_threshold
from .config import AuditConfig, MechanismConfig
from .trials import scalar_problem, simulate_scores

#: audits with more trials per hypothesis than this use the streaming engine (``engine.audit_scalar``);
#: smaller ones keep the in-memory score path (bit-identical to earlier releases for a given rng).
STREAMING_MIN_TRIALS = 1 << 21

__all__ = ["BackgroundMoments", "aux_moments", "null_moments", "llr_weights", "mu_eff", "llr", "mixture_llr",
           "AuditResult", "audit_canary", "restrict"]


@dataclass(frozen=True)
class BackgroundMoments:
    """Auxiliary-user moments on the inspected coordinates P (Eqs. 31–33).

    Attributes:
        mean: float64 (|P|,) μ̂_P, mean contribution per aux user.
        second_moment: float64 (|P|, |P|) shrink(M̂_P), the *uncentered*, diagonally shrunk moment.
        n_aux: number of aux users.
    """

    mean: np.ndarray
    second_moment: np.ndarray
    n_aux: int


def restrict(contribs: sp.spmatrix | np.ndarray, coords: np.ndarray) -> sp.csr_matrix:
    """Columns ``coords`` of an (N, p) contribution matrix, as CSR float64 (N, |P|)."""
    return sp.csr_matrix(contribs)[:, np.asarray(coords, dtype=np.int64)]


def aux_moments(aux: sp.spmatrix | np.ndarray, shrinkage: float = 0.1) -> BackgroundMoments:
    """μ̂_P (Eq. 31) and shrink(M̂_P) = (1−s)M̂ + s·diag(M̂) (Eqs. 32–33) from aux contributions.

    Args:
        aux: (n_aux, |P|) contributions of auxiliary users on P (sparse or dense).
        shrinkage: s in [0, 1]; 0.1 in the paper.

    Raises:
        ValueError: on no aux users or s outside [0, 1].
    """
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

    m̂0 = qN μ̂_P;  Σ̂_P = q(1−q)N shrink(M̂_P) + (σC)² I + ridge·I.

    Returns:
        (m0 float64 (|P|,), sigma float64 (|P|, |P|)).
    """
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


def llr(y: np.ndarray, canary: np.ndarray, m0: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """Fixed-inclusion Gaussian LLR ℓ(y) = vᵀΣ⁻¹(y − m0 − v/2) (Eqs. 3, 14).

    Args:
        y: float (|P|,) or (T, |P|) released histograms restricted to P.
        canary, m0: float (|P|,); sigma: (|P|, |P|).

    Returns:
        float or float64 (T,).
    """
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


@dataclass(frozen=True)
class AuditResult:
    """Outcome of one canary audit (one row of a results table).

    Attributes:
        epsilon_lower: ε_lower on the test split (Eq. 28 at the calibrated threshold).
        epsilon_theory: Opacus PRV ε for one release at (σ, q, δ).
        mu_eff: test-population μ_eff (Eq. 15); mu_eff_ceiling: 1/σ (Eq. 20).
        canary_norm: ‖v_P‖₂ (≤ C).
        n_coords: |P|; background_voters: test users with a nonzero projection (K).
        threshold: frozen LLR threshold (ℓ units; the mixture threshold is ``mixture_llr`` of it).
        calibration, test: ``ThresholdAudit`` records of both splits.
        trials: per hypothesis per split; seconds: wall time of the trials.
    """

    epsilon_lower: float
    epsilon_theory: float
    mu_eff: float
    mu_eff_ceiling: float
    canary_norm: float
    n_coords: int
    background_voters: int
    threshold: float
    threshold_mix: float
    calibration: ThresholdAudit
    test: ThresholdAudit
    trials: int
    seconds: float

    def as_row(self) -> dict:
        """Flat dict: scalar fields plus ``test_*`` / ``calibration_*`` counts and bounds."""
        row = {k: v for k, v in asdict(self).items() if k not in ("calibration", "test")}
        for name in ("calibration", "test"):
            for k, v in getattr(self, name).as_dict().items():
                row[f"{name}_{k}"] = v
        row["tpr"], row["fpr"] = self.test.tpr, self.test.fpr
        return row


def audit_canary(canary_full: np.ndarray, coords: np.ndarray, aux: sp.spmatrix, calibration: sp.spmatrix,
                 test: sp.spmatrix, mechanism: MechanismConfig, audit: AuditConfig,
                 rng: np.random.Generator) -> AuditResult:
    """Audit one frozen canary/bank design: calibrate a threshold, then bound ε on fresh test trials.

    Steps (§2.1): aux moments → (m̂0, Σ̂_P) for N = n_test users → w = Σ̂⁻¹v → scalar projections →
    ``audit.trials`` trials per hypothesis on the calibration population → threshold maximizing the
    bounded ε → fresh trials on the test population → ε_lower (Eq. 28, γ = α/(4·n_canaries)).
    Above ``STREAMING_MIN_TRIALS`` trials the trials are streamed (``engine.audit_scalar``: calibration on a
    fine threshold grid, test counts at the frozen threshold; seeded from one draw of ``rng``).
    The calibration population is resized to n_test users by drawing calibration users with
    replacement (seeded) when the split sizes differ, so that both splits score the same statistic
    under the same population size.

    Args:
        canary_full: float (p,) the canary's full clipped contribution v_can.
        coords: int (|P|,) inspected coordinates (probe positions, or the canary's support for ordinary).
        aux, calibration, test: (n, p) full contributions of each split's users (sparse).
        mechanism, audit: settings. rng: the only source of randomness.

    Returns:
        ``AuditResult``.

    Raises:
        ValueError: on empty coordinates or splits, or a singular covariance.
    """
    coords = np.asarray(coords, dtype=np.int64)
    if coords.size == 0:
        raise ValueError("coords is empty: the canary votes on no inspected coordinate")
    if calibration.shape[0] == 0 or test.shape[0] == 0:
        raise ValueError("calibration and test splits need at least one user each")
    t0 = time.perf_counter()
    v = np.asarray(canary_full, dtype=np.float64).ravel()[coords]
    n_test = test.shape[0]
    moments = aux_moments(restrict(aux, coords), audit.shrinkage)
    m0, sigma = null_moments(moments, n_test, mechanism, audit.ridge)
    w = llr_weights(v, sigma)
    cal = restrict(calibration, coords)
    if cal.shape[0] != n_test:
        cal = cal[rng.integers(0, cal.shape[0], size=n_test)]
    probs = {split: scalar_problem(w, pop, v, m0, mechanism.noise_std, mechanism.sample_rate)
             for split, pop in (("calibration", cal), ("test", restrict(test, coords)))}
    if audit.trials > STREAMING_MIN_TRIALS:  # streaming engine: memory bounded by one block, not by the trials
        from .engine import audit_scalar

        res = audit_scalar(probs["calibration"], probs["test"], trials=audit.trials, gamma=audit.gamma,
                           delta=audit.delta, seed=int(rng.integers(0, 2**63)))
        cal_audit, test_audit = res.calibration, res.test
    else:
        scores = {split: (simulate_scores(prob, 0, audit.trials, rng), simulate_scores(prob, 1, audit.trials, rng))
                  for split, prob in probs.items()}
        cal_audit = calibrate_threshold(scores["calibration"][0], scores["calibration"][1], audit.gamma, audit.delta)
        test_audit = evaluate_threshold(scores["test"][0], scores["test"][1], cal_audit.threshold, audit.gamma,
                                        audit.delta)
    eps_theory = (epsilon_theory(mechanism.noise_multiplier, mechanism.sample_rate, audit.delta)
                  if mechanism.noise_multiplier > 0 else float("inf"))
    return AuditResult(
        epsilon_lower=test_audit.epsilon, epsilon_theory=eps_theory, mu_eff=float(np.sqrt(max(0.0, w @ v))),
        mu_eff_ceiling=(1 / mechanism.noise_multiplier) if mechanism.noise_multiplier > 0 else float("inf"),
        canary_norm=float(np.linalg.norm(v)), n_coords=int(coords.size),
        background_voters=int(probs["test"].projections.size), threshold=cal_audit.threshold,
        threshold_mix=mixture_llr(cal_audit.threshold, mechanism.sample_rate), calibration=cal_audit, test=test_audit,
        trials=audit.trials, seconds=time.perf_counter() - t0)
