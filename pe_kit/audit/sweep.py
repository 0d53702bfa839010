"""Audit sweeps on the scalar projection: ``AuditTask`` s run in order, and the tightness curve built on them.

The sweep unit is an ``AuditTask``: a calibration and a test ``ScalarProblem``, the trials per
hypothesis, a seed, γ, δ and free labels → one calibrated ε_lower row (``engine._audit_scalar``). A task's
numbers depend only on its own fields, so rows come back in task order and the same tasks give the same table.
(Tasks run one after another in this process; the streaming engine's own
``n_workers`` parallelise one task's blocks.)

``tightness_curve`` (ε_lower against the trial budget, the Fig. 1 / notebook 05 curve) runs its
audits as sweep tasks, so it lives here, above ``engine`` (which it calls) in the import order.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pe_kit.audit.engine import _audit_scalar, _check_problem, exact_method
from pe_kit.audit.expectations import expected_epsilon
from pe_kit.audit.trials import ScalarProblem, nonce_problem

__all__ = ["tightness_curve", "AuditTask", "run_task", "run_sweep"]

# ----------------------------------------------------------------------------------------------- tightness

def tightness_curve(attacks: Mapping, trials: Sequence[int] = (10**4, 10**5, 10**6, 10**7, 10**8, 10**9), *,
                    noise_multiplier: float = 1.0, sample_rate: float | None = None, delta: float = 1e-5,
                    gamma: float = 0.0025, n_canaries: int = 5, seed=0, epsilon_theory: float | None = None,
                    max_simulated_trials: int | None = None, method: str = "auto", progress: bool = False,
                    **engine_options):
    """ε_lower vs trials per hypothesis, beside ε_theory and the expected curve from μ_eff (tidy table).

    For every attack, canary and trial count: calibrate on ``trials`` trials per hypothesis and bound ε on
    fresh ones (``_audit_scalar``). Each row also carries ε_theory (Opacus PRV for one release at
    (σ, q, δ)) and ``epsilon_expected`` = ``expected_epsilon(μ_eff, q, trials)`` and its n → ∞ limit.

    Args:
        attacks: mapping name → one of: a float μ_eff (a perfect-projection nonce canary without background,
            ``trials.nonce_problem``; needs ``sample_rate``), a ``ScalarProblem`` (used for calibration and
            test), a (calibration, test) pair, or a list of such per canary. A single problem is audited
            ``n_canaries`` times with independent seeds ("five canaries (five seeds)").
        trials: trial counts per hypothesis (each ≥ 1), e.g. 10⁴ … 10⁹.
        noise_multiplier: σ (for ε_theory). sample_rate: q for float attacks (problems carry their own).
        delta, gamma: as in ``_audit_scalar``. n_canaries: seeds per single-problem attack.
        seed: root seed; task (attack i, canary c, trials j) uses ``SeedSequence([seed, i, c, j])``.
        epsilon_theory: override ε_theory (else computed from σ, q, δ).
        max_simulated_trials: trial counts above it get NaN ε_lower (expected/theory only).
        method: engine sampler; ``"auto"`` uses ``"multinomial"`` (exact counts, no per-trial work) for
            problems without background and the cheapest exact per-trial sampler otherwise.
        progress: progress bar over tasks. engine_options: further ``TrialEngine`` keywords.

    Returns:
        ``pandas.DataFrame``, one row per (attack, canary, trials): attack, canary, trials, epsilon_lower,
        epsilon_theory, epsilon_expected, epsilon_expected_limit, ratio_to_theory, mu_eff, sample_rate,
        noise_multiplier, delta, gamma, threshold, test tpr/fpr and counts, method, simulated. Aggregate
        e.g. with ``df.groupby(["attack", "trials"]).epsilon_lower.max()`` (the paper's per-variant max).

    Raises:
        ValueError: on an empty/ill-typed ``attacks``, bad trials, or a float attack without sample_rate.
    """
    import pandas as pd

    from pe_kit.audit.accounting import epsilon_theory as _eps_theory
    from pe_kit.audit.sweep import AuditTask, run_sweep

    if not isinstance(attacks, Mapping) or not attacks:
        raise ValueError("attacks must be a non-empty mapping name → μ_eff | ScalarProblem | (cal, test) | list")
    trials = [int(t) for t in trials]
    if not trials or any(t < 1 for t in trials):
        raise ValueError(f"trials={trials} must be a non-empty list of integers ≥ 1")
    if int(n_canaries) != n_canaries or n_canaries < 1:
        raise ValueError(f"n_canaries={n_canaries} must be an integer ≥ 1")
    tasks, meta = [], []
    for ai, (name, spec) in enumerate(attacks.items()):
        canaries = _canary_problems(name, spec, sample_rate, n_canaries)
        for ci, (cal, test) in enumerate(canaries):
            q = cal.sample_rate
            mu = math.sqrt(max(cal.canary_shift, 0.0))
            eps_th = epsilon_theory if epsilon_theory is not None else (
                _eps_theory(noise_multiplier, q, delta) if noise_multiplier > 0 else float("inf"))
            limit = expected_epsilon(mu, q, None, gamma, delta) if mu > 0 else 0.0
            for ti, n in enumerate(trials):
                row = {"attack": str(name), "canary": ci, "trials": n, "mu_eff": mu, "sample_rate": q,
                       "noise_multiplier": noise_multiplier, "delta": delta, "gamma": gamma,
                       "epsilon_theory": eps_th,
                       "epsilon_expected": expected_epsilon(mu, q, n, gamma, delta) if mu > 0 else 0.0,
                       "epsilon_expected_limit": limit}
                simulate = max_simulated_trials is None or n <= max_simulated_trials
                row["simulated"] = simulate
                meta.append(row)
                if simulate:
                    m = exact_method(method, cal, test)
                    tasks.append(AuditTask(calibration=cal, test=test, trials=n, seed=(int(seed), ai, ci, ti),
                                           gamma=gamma, delta=delta, epsilon_theory=eps_th,
                                           labels=(("_row", len(meta) - 1),),
                                           options=tuple(sorted({"method": m, **engine_options}.items()))))
    results = {}
    if tasks:
        df_sim = run_sweep(tasks, progress=progress)
        for _, r in df_sim.iterrows():
            results[int(r["_row"])] = r
    rows = []
    for i, row in enumerate(meta):
        r = results.get(i)
        row = dict(row)
        row["epsilon_lower"] = float(r["epsilon_lower"]) if r is not None else float("nan")
        row["threshold"] = float(r["threshold"]) if r is not None else float("nan")
        for k in ("test_tpr", "test_fpr", "test_true_pos", "test_false_pos"):
            row[k] = r[k] if r is not None else np.nan
        row["method"] = r["method"] if r is not None else None
        row["ratio_to_theory"] = row["epsilon_lower"] / row["epsilon_theory"]
        rows.append(row)
    cols = ["attack", "canary", "trials", "epsilon_lower", "epsilon_theory", "epsilon_expected",
            "epsilon_expected_limit", "ratio_to_theory", "mu_eff", "sample_rate", "noise_multiplier", "delta",
            "gamma", "threshold", "test_tpr", "test_fpr", "test_true_pos", "test_false_pos", "method", "simulated"]
    return pd.DataFrame(rows)[cols]


def _canary_problems(name, spec, sample_rate, n_canaries) -> list[tuple[ScalarProblem, ScalarProblem]]:
    def one(s):
        if isinstance(s, ScalarProblem):
            return _check_problem(s), s
        if isinstance(s, tuple) and len(s) == 2 and all(isinstance(x, ScalarProblem) for x in s):
            return _check_problem(s[0]), _check_problem(s[1])
        if isinstance(s, (int, float)) and not isinstance(s, bool):
            if sample_rate is None:
                raise ValueError(f"attack {name!r} is a μ_eff float: pass sample_rate=q")
            p = nonce_problem(float(s), sample_rate)
            return p, p
        raise ValueError(f"attack {name!r}: {type(s).__name__} is not a μ_eff float, ScalarProblem or "
                         "(calibration, test) pair")

    if isinstance(spec, list):
        if not spec:
            raise ValueError(f"attack {name!r} has an empty list of canaries")
        return [one(s) for s in spec]
    return [one(spec)] * int(n_canaries)


@dataclass(frozen=True)
class AuditTask:
    """One sweep unit: calibrate on ``calibration`` and bound ε on ``test`` (``engine._audit_scalar``).

    Attributes:
        calibration, test: ``ScalarProblem`` s. trials: per hypothesis per split (≥ 1).
        seed: int or tuple of non-negative ints (the task's only randomness).
        gamma, delta: Clopper–Pearson tail and δ. epsilon_theory: recorded beside ε_lower (NaN if unknown).
        labels: (name, value) pairs copied into the row first. options: ``TrialEngine`` keywords as
            (name, value) pairs (and ``resolution``).
    """

    calibration: ScalarProblem
    test: ScalarProblem
    trials: int
    seed: Any
    gamma: float = 0.0025
    delta: float = 1e-5
    epsilon_theory: float = float("nan")
    labels: tuple = ()
    options: tuple = ()


def run_task(task: AuditTask, timing: bool = False) -> dict:
    """Run one ``AuditTask`` → flat row: labels, ε_lower, ε_theory, μ_eff (√(w·v)), K, and the
    threshold, trials, sampler (``method``), grid and the ``calibration_*`` / ``test_*`` columns of the
    ``engine._audit_scalar`` audit. ``seconds`` only if ``timing`` (wall time is not reproducible)."""
    res = _audit_scalar(task.calibration, task.test, trials=task.trials, gamma=task.gamma, delta=task.delta,
                       seed=task.seed, **dict(task.options))
    row = dict(task.labels)
    row.update({"epsilon_lower": res.epsilon_lower, "epsilon_theory": task.epsilon_theory,
                "mu_eff": math.sqrt(max(task.test.canary_shift, 0.0)),
                "background_voters": int(np.asarray(task.test.projections).size),
                "sample_rate": task.test.sample_rate, "gamma": task.gamma, "delta": task.delta,
                "seed": str(task.seed)})
    grid = res.info["grid"]
    row.update({"threshold": res.threshold, "trials": res.info["trials"], "method": res.info["sampler"],
                "grid_size": grid.size, "grid_step": grid.step, **({"seconds": res.info["seconds"]} if timing else {}),
                **res.calibration.columns("calibration_"), **res.columns("test_")})
    return row


def run_sweep(tasks: Sequence[AuditTask], *, progress: bool = False, timing: bool = False):
    """Run ``tasks`` in this process and return one tidy row per task, in task order (``pandas.DataFrame``).

    Args:
        tasks: ``AuditTask`` s. progress: ``pe_kit.progress`` over finished tasks. timing: add each task's wall
            ``seconds`` (not reproducible).

    Returns:
        DataFrame with a leading ``task`` column (0 … len−1); without ``timing`` the same tasks give the same table.

    Raises:
        ValueError: on non-task items.
    """
    import pandas as pd

    from pe_kit.progress import progress as steps

    tasks = list(tasks)
    for i, t in enumerate(tasks):
        if not isinstance(t, AuditTask):
            raise ValueError(f"tasks[{i}] is a {type(t).__name__}, not an AuditTask")
    rows = [run_task(t, timing) for t in (steps(tasks, desc="sweep", unit="task") if progress else tasks)]
    df = pd.DataFrame(rows)
    df.insert(0, "task", np.arange(len(rows)))
    return df
