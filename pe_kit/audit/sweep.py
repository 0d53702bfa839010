"""Audit sweeps on the scalar projection: ``AuditTask`` s (one calibrated ε_lower row each, ``engine._audit_scalar``,
depending only on the task's fields) run in order, and the tightness curve built on them."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pe_kit.audit.engine import _audit_scalar, _check_problem
from pe_kit.audit.expectations import expected_epsilon
from pe_kit.audit.trials import ScalarProblem, nonce_problem

__all__ = ["tightness_curve", "AuditTask", "run_task", "run_sweep"]


def tightness_curve(attacks: Mapping, trials: Sequence[int] = (10**4, 10**5, 10**6, 10**7, 10**8, 10**9), *,
                    noise_multiplier: float = 1.0, sample_rate: float | None = None, delta: float = 1e-5,
                    gamma: float = 0.0025, n_canaries: int = 5, seed=0, epsilon_theory: float | None = None,
                    max_simulated_trials: int | None = None, method: str = "auto", progress: bool = False,
                    **engine_options):
    """ε_lower vs trials per hypothesis beside ε_theory and the expected curve from μ_eff (Fig. 1, notebook 05).
    ``attacks``: name → a float μ_eff (a nonce canary, needs ``sample_rate``), a ``ScalarProblem``, a (calibration,
    test) pair, or a list of these per canary (a single one is audited ``n_canaries`` times). Task (attack i,
    canary c, trials j) is seeded (seed, i, c, j); trials above ``max_simulated_trials`` get NaN ε_lower. Returns a
    ``pandas.DataFrame``, one row per (attack, canary, trials). Raises ValueError on empty or ill-typed ``attacks``,
    bad trials, or a float attack without sample_rate."""
    import pandas as pd

    if not isinstance(attacks, Mapping) or not attacks:
        raise ValueError("attacks must be a non-empty mapping name → μ_eff | ScalarProblem | (cal, test) | list")
    trials = [int(t) for t in trials]
    if not trials or any(t < 1 for t in trials):
        raise ValueError(f"trials={trials} must be a non-empty list of integers ≥ 1")
    if int(n_canaries) != n_canaries or n_canaries < 1:
        raise ValueError(f"n_canaries={n_canaries} must be an integer ≥ 1")
    meta, tasks = _curve_tasks(attacks, trials, noise_multiplier, sample_rate, delta, gamma, n_canaries, seed,
                               epsilon_theory, max_simulated_trials, method, engine_options)
    sims = {r["_row"]: r for r in (run_sweep(tasks, progress=progress).to_dict("records") if tasks else [])}
    rows = []
    for i, row in enumerate(meta):
        r = sims.get(i, {})
        row = {**row, "epsilon_lower": float(r.get("epsilon_lower", "nan")),
               "threshold": float(r.get("threshold", "nan")), "method": r.get("method"),
               **{k: r.get(k, np.nan) for k in ("test_tpr", "test_fpr", "test_true_pos", "test_false_pos")}}
        row["ratio_to_theory"] = row["epsilon_lower"] / row["epsilon_theory"]
        rows.append(row)
    cols = ["attack", "canary", "trials", "epsilon_lower", "epsilon_theory", "epsilon_expected",
            "epsilon_expected_limit", "ratio_to_theory", "mu_eff", "sample_rate", "noise_multiplier", "delta",
            "gamma", "threshold", "test_tpr", "test_fpr", "test_true_pos", "test_false_pos", "method", "simulated"]
    return pd.DataFrame(rows)[cols]


def _curve_tasks(attacks, trials, noise_multiplier, sample_rate, delta, gamma, n_canaries, seed, epsilon_theory,
                 max_simulated_trials, method, engine_options) -> tuple[list[dict], list]:
    """``tightness_curve``'s rows without the simulation, and the ``AuditTask`` of each simulated row."""
    from pe_kit.audit.accounting import epsilon_theory as _eps_theory

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
                    tasks.append(AuditTask(calibration=cal, test=test, trials=n, seed=(int(seed), ai, ci, ti),
                                           gamma=gamma, delta=delta, epsilon_theory=eps_th,
                                           labels=(("_row", len(meta) - 1),),
                                           options=tuple(sorted({"method": method, **engine_options}.items()))))
    return meta, tasks


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
    """One sweep unit: calibrate on ``calibration`` and bound ε on ``test`` (``engine._audit_scalar``); ``labels``:
    (name, value) pairs copied into the row first; ``options``: ``TrialEngine`` keywords as (name, value) pairs."""

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
    """Run one ``AuditTask`` → flat row: labels, ε_lower, ε_theory, μ_eff (√(w·v)), K, threshold, trials,
    sampler, grid and the ``calibration_*`` / ``test_*`` columns; ``seconds`` only if ``timing``."""
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
    """Run ``tasks`` in order → ``pandas.DataFrame``, one row per task after a ``task`` column (0 … len−1).
    Without ``timing`` the same tasks give the same table. Raises ValueError on an item that is not an ``AuditTask``."""
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
