"""One canary's audit on frozen contributions: moments → weights → trials → ε_lower (§2.1 Steps 2–5, Eqs. 2–5, 28)."""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import scipy.sparse as sp

from pe_kit.audit.accounting import epsilon_ceiling, epsilon_theory_or_inf, tightness
from pe_kit.audit.bounds import calibrate_threshold, evaluate_threshold, population_shift
from pe_kit.audit.moments import design_moments, mixture_llr, restrict
from pe_kit.audit.outcome import Audit
from pe_kit.audit.trials import check_equal_populations, scalar_problem, simulate_scores
from pe_kit.settings import AuditConfig, MechanismConfig

#: more trials per hypothesis than this stream (``engine._audit_scalar``); fewer draw every score from ``rng``
STREAMING_MIN_TRIALS = 1 << 21


def _check_design(canary_full, coords, aux, calibration, test) -> np.ndarray:
    """``coords`` as int64, after checking it and the splits' widths against p = len(canary_full)."""
    coords = np.asarray(coords, dtype=np.int64)
    if coords.size == 0:
        raise ValueError("coords is empty: the canary votes on no inspected coordinate")
    p = int(np.asarray(canary_full).size)
    widths = {name: m.shape[1] for name, m in (("aux", aux), ("calibration", calibration), ("test", test))}
    if any(w != p for w in widths.values()):
        raise ValueError(f"contribution matrices must have p={p} columns (the length of canary_full, one per bank "
                         f"entry); got " + ", ".join(f"{n} {w}" for n, w in widths.items())
                         + ": build every split's contributions on the same bank as the canary's")
    if coords.min() < 0 or coords.max() >= p:
        raise ValueError(f"coords must lie in [0, p={p}); got {int(coords.min())}..{int(coords.max())}")
    if calibration.shape[0] == 0 or test.shape[0] == 0:
        raise ValueError("calibration and test splits need at least one user each")
    return coords


def _audit_canary(canary_full: np.ndarray, coords: np.ndarray, aux: sp.spmatrix, calibration: sp.spmatrix,
                  test: sp.spmatrix, mechanism: MechanismConfig, audit: AuditConfig,
                  rng: np.random.Generator) -> Audit:
    """Audit one frozen canary/bank design: aux moments for N = n_test (Eqs. 31–35) → w = Σ̂⁻¹v (Eq. 14) → trials on
    the calibration users → threshold → fresh trials on the test users → ε_lower (Eq. 28); above
    ``STREAMING_MIN_TRIALS`` the trials stream (``engine._audit_scalar``). ``canary_full``: v_can (p,); ``coords``: P;
    aux, calibration, test: sparse (n, p) contributions. Returns the test ``Audit`` (calibration attached) with
    ε_theory, μ_eff (Eq. 15) and ``info``: ``mu_eff_ceiling`` (1/σ, Eq. 20), ``epsilon_ceiling``, ``tightness``, design
    sizes, ``threshold_mix``, ``trials``, ``seconds`` and the ``bounds.population_shift`` columns. Raises ValueError
    on empty coordinates or splits, unequal split sizes, widths other than p, coordinates outside [0, p), or a
    singular covariance."""
    coords = _check_design(canary_full, coords, aux, calibration, test)
    t0 = time.perf_counter()
    v = np.asarray(canary_full, dtype=np.float64).ravel()[coords]
    n_test = test.shape[0]
    m0, w, mu = design_moments(v, restrict(aux, coords), n_test, mechanism, audit.shrinkage, audit.ridge)
    cal = restrict(calibration, coords)
    check_equal_populations(cal.shape[0], n_test)
    probs = {split: scalar_problem(w, pop, v, m0, mechanism.noise_std, mechanism.sample_rate)
             for split, pop in (("calibration", cal), ("test", restrict(test, coords)))}
    if audit.trials > STREAMING_MIN_TRIALS:  # streaming engine: memory bounded by one block, not by the trials
        from pe_kit.audit.engine import _audit_scalar

        res = _audit_scalar(probs["calibration"], probs["test"], trials=audit.trials, gamma=audit.gamma,
                            delta=audit.delta, seed=int(rng.integers(0, 2**63)), rule=audit.threshold_rule)
        cal_audit, test_audit = res.calibration, res
    else:
        scores = {split: (simulate_scores(prob, 0, audit.trials, rng), simulate_scores(prob, 1, audit.trials, rng))
                  for split, prob in probs.items()}
        cal_audit = calibrate_threshold(scores["calibration"][0], scores["calibration"][1], audit.gamma, audit.delta,
                                        rule=audit.threshold_rule, sample_rate=mechanism.sample_rate)
        test_audit = evaluate_threshold(scores["test"][0], scores["test"][1], cal_audit.threshold, audit.gamma,
                                        audit.delta, cal_audit.direction)
    eps_theory = epsilon_theory_or_inf(mechanism.noise_multiplier, mechanism.sample_rate, audit.delta)
    ceiling = epsilon_ceiling(mu, mechanism.sample_rate, audit.delta) if audit.delta > 0 else float("nan")
    info = {"mu_eff_ceiling": (1 / mechanism.noise_multiplier) if mechanism.noise_multiplier > 0 else float("inf"),
            "epsilon_ceiling": ceiling,
            "tightness": tightness(test_audit.epsilon_lower, ceiling),  # NaN without a ceiling
            "canary_norm": float(np.linalg.norm(v)), "n_coords": int(coords.size),
            "background_voters": int(probs["test"].projections.size),
            "threshold_mix": mixture_llr(cal_audit.threshold, mechanism.sample_rate), "trials": audit.trials,
            "seconds": time.perf_counter() - t0, "gamma": audit.gamma,
            **population_shift(cal_audit, test_audit, audit.gamma)}
    return replace(test_audit, epsilon_theory=eps_theory, mu_eff=mu, calibration=cal_audit, info=info)
