"""Parallel audit sweeps (canaries × variants × σ × q × trials) on the scalar projection, through Dask.

The sweep unit is an ``AuditTask``: a calibration and a test ``ScalarProblem``, the trials per
hypothesis, a seed, γ, δ and free labels → one calibrated ε_lower row (``engine.audit_scalar``). A task's
numbers depend only on its own fields, so a Dask run (``distributed.LocalCluster`` by default, or any
scheduler address / ``Client``) returns exactly the serial table (rows in task order).

Changing σ or q changes the null moments (Eqs. 34–35), hence Σ̂, w = Σ̂⁻¹v and every projection:
``scalar_problems`` rebuilds both problems from a frozen design's contributions on P (``CanaryInputs``)
for any (σ, q), exactly as ``audit.audit_canary`` does (§2.1 Steps 2–4, App. E.7).

``tightness_curve`` (ε_lower against the trial budget, the Fig. 1 / notebook 05 curve) runs its
audits as sweep tasks, so it lives here, above ``engine`` (which it calls) in the import order.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from pe_kit.audit.engine import _check_problem, audit_scalar, exact_method
from pe_kit.audit.expectations import expected_epsilon
from pe_kit.audit.moments import aux_moments, llr_weights, null_moments, restrict
from pe_kit.audit.trials import (
    ScalarProblem,
    check_equal_populations,
    nonce_problem,
    scalar_problem,
)
from pe_kit.config import MechanismConfig

# ----------------------------------------------------------------------------------------------- tightness

def tightness_curve(attacks: Mapping, trials: Sequence[int] = (10**4, 10**5, 10**6, 10**7, 10**8, 10**9), *,
                    noise_multiplier: float = 1.0, sample_rate: float | None = None, delta: float = 1e-5,
                    gamma: float = 0.0025, n_canaries: int = 5, seed=0, epsilon_theory: float | None = None,
                    max_simulated_trials: int | None = None, method: str = "auto", scheduler="serial",
                    n_workers: int = 2, progress: bool = False, **engine_options):
    """ε_lower vs trials per hypothesis, beside ε_theory and the expected curve from μ_eff (tidy table).

    For every attack, canary and trial count: calibrate on ``trials`` trials per hypothesis and bound ε on
    fresh ones (``audit_scalar``). Each row also carries ε_theory (Opacus PRV for one release at
    (σ, q, δ)) and ``epsilon_expected`` = ``expected_epsilon(μ_eff, q, trials)`` and its n → ∞ limit.

    Args:
        attacks: mapping name → one of: a float μ_eff (a perfect-projection nonce canary without background,
            ``trials.nonce_problem``; needs ``sample_rate``), a ``ScalarProblem`` (used for calibration and
            test), a (calibration, test) pair, or a list of such per canary. A single problem is audited
            ``n_canaries`` times with independent seeds ("five canaries (five seeds)").
        trials: trial counts per hypothesis (each ≥ 1), e.g. 10⁴ … 10⁹.
        noise_multiplier: σ (for ε_theory). sample_rate: q for float attacks (problems carry their own).
        delta, gamma: as in ``audit_scalar``. n_canaries: seeds per single-problem attack.
        seed: root seed; task (attack i, canary c, trials j) uses ``SeedSequence([seed, i, c, j])``.
        epsilon_theory: override ε_theory (else computed from σ, q, δ).
        max_simulated_trials: trial counts above it get NaN ε_lower (expected/theory only).
        method: engine sampler; ``"auto"`` uses ``"multinomial"`` (exact counts, no per-trial work) for
            problems without background and the cheapest exact per-trial sampler otherwise.
        scheduler: ``"serial"`` (default), None (a local Dask cluster of ``n_workers`` processes), a Dask
            scheduler address or a ``distributed.Client`` (see ``sweep.run_sweep``).
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
        df_sim = run_sweep(tasks, scheduler=scheduler, n_workers=n_workers, progress=progress)
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
class CanaryInputs:
    """One frozen design's contributions restricted to its inspected coordinates P.

    Attributes:
        canary: float64 (|P|,) v = v_can,P.
        aux, calibration, test: CSR float64 (n_split, |P|) contributions c_u of each split's users.
        labels: free row labels (e.g. ``{"variant": "nonce", "canary_id": 3}``).

    Raises:
        ValueError: if the column counts differ from |P| or a split is empty.
    """

    canary: np.ndarray
    aux: sp.csr_matrix
    calibration: sp.csr_matrix
    test: sp.csr_matrix
    labels: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        v = np.asarray(self.canary, dtype=np.float64).ravel()
        object.__setattr__(self, "canary", v)
        for name in ("aux", "calibration", "test"):
            m = sp.csr_matrix(getattr(self, name), dtype=np.float64)
            if m.shape[1] != v.size:
                raise ValueError(f"{name} has {m.shape[1]} columns but the canary has |P| = {v.size}: restrict every "
                                 "split to the same coordinates (CanaryInputs.from_full)")
            if m.shape[0] == 0:
                raise ValueError(f"{name} has no users: every split needs at least one")
            object.__setattr__(self, name, m)

    @classmethod
    def from_full(cls, canary_full: np.ndarray, coords: np.ndarray, aux, calibration, test,
                  labels: Mapping[str, Any] | None = None) -> "CanaryInputs":
        """Restrict full (n, p) contributions and the canary's (p,) contribution to ``coords`` (P).

        Raises ValueError on empty ``coords``."""
        coords = np.asarray(coords, dtype=np.int64)
        if coords.size == 0:
            raise ValueError("coords is empty: the canary votes on no inspected coordinate")
        v = np.asarray(canary_full, dtype=np.float64).ravel()[coords]
        return cls(v, restrict(aux, coords), restrict(calibration, coords), restrict(test, coords), dict(labels or {}))


def scalar_problems(inputs: CanaryInputs, noise_multiplier: float, sample_rate: float, *, clip_norm: float = 0.1,
                    shrinkage: float = 0.1, ridge: float = 1e-9) -> tuple[ScalarProblem, ScalarProblem, dict]:
    """Rebuild the calibration and test ``ScalarProblem`` of a design for a new (σ, q) (Eqs. 14, 31–35).

    Same steps as ``audit.audit_canary``: aux moments on P (shrinkage s) → m̂0 = qNμ̂, Σ̂ = q(1−q)N·shrink(M̂)
    + (σC)²I + ridge·I for N = n_test → w = Σ̂⁻¹v → projections of both populations (equal-size splits of
    distinct users, never resampled: ``trials.check_equal_populations``).

    Args:
        inputs: ``CanaryInputs``. noise_multiplier: σ ≥ 0. sample_rate: q in (0, 1]. clip_norm: C.
        shrinkage, ridge: as in ``AuditConfig``.

    Returns:
        (calibration problem, test problem, info) with info = {mu_eff, mu_eff_ceiling, canary_norm,
        background_voters (test K), n_coords}.

    Raises:
        ValueError: on invalid settings (via ``MechanismConfig``), a singular Σ̂, or splits of different sizes.
    """
    mech = MechanismConfig(clip_norm=clip_norm, noise_multiplier=noise_multiplier, sample_rate=sample_rate)
    v = inputs.canary
    n_test = inputs.test.shape[0]
    m0, sigma = null_moments(aux_moments(inputs.aux, shrinkage), n_test, mech, ridge)
    w = llr_weights(v, sigma)
    cal = inputs.calibration
    check_equal_populations(cal.shape[0], n_test)
    cal_p = scalar_problem(w, cal, v, m0, mech.noise_std, mech.sample_rate)
    test_p = scalar_problem(w, inputs.test, v, m0, mech.noise_std, mech.sample_rate)
    info = {"mu_eff": float(np.sqrt(max(0.0, w @ v))),
            "mu_eff_ceiling": (1 / noise_multiplier) if noise_multiplier > 0 else float("inf"),
            "canary_norm": float(np.linalg.norm(v)), "background_voters": int(test_p.projections.size),
            "n_coords": int(v.size)}
    return cal_p, test_p, info


@dataclass(frozen=True)
class AuditTask:
    """One sweep unit: calibrate on ``calibration`` and bound ε on ``test`` (``engine.audit_scalar``).

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
    ``ScalarAudit.as_row`` counts. ``seconds`` only if ``timing`` (wall time is not reproducible)."""
    res = audit_scalar(task.calibration, task.test, trials=task.trials, gamma=task.gamma, delta=task.delta,
                       seed=task.seed, **dict(task.options))
    row = dict(task.labels)
    row.update({"epsilon_lower": res.epsilon_lower, "epsilon_theory": task.epsilon_theory,
                "mu_eff": math.sqrt(max(task.test.canary_shift, 0.0)),
                "background_voters": int(np.asarray(task.test.projections).size),
                "sample_rate": task.test.sample_rate, "gamma": task.gamma, "delta": task.delta,
                "seed": str(task.seed)})
    for k, v in res.as_row().items():
        if k not in row and (timing or k != "seconds"):
            row[k] = v
    return row


def sweep_tasks(canaries: Sequence[CanaryInputs], noise_multipliers: Sequence[float], sample_rates: Sequence[float],
                trials: Sequence[int], *, clip_norm: float = 0.1, delta: float = 1e-5, gamma: float = 0.0025,
                shrinkage: float = 0.1, ridge: float = 1e-9, seed: int = 0, with_theory: bool = True,
                options: Mapping[str, Any] | None = None) -> list[AuditTask]:
    """The product canaries × σ × q × trials as ``AuditTask`` s (variants are canaries with labels).

    Seeds: the trials of task (c, i, j, trials_k) use seed ``(seed, c, i, j, k)``.

    Args:
        canaries: ``CanaryInputs`` (their ``labels`` become columns, e.g. variant, canary_id).
        noise_multipliers: σ values (> 0 for a finite ε_theory). sample_rates: q values. trials: per hypothesis.
        clip_norm: C. delta, gamma: bound settings. shrinkage, ridge: moment settings. seed: root seed.
        with_theory: compute ε_theory (Opacus PRV; once per (σ, q)). options: ``TrialEngine`` keywords.

    Returns:
        list of ``AuditTask`` (labels: canary index, the canary's labels, sigma, q, trials, mu_eff,
        mu_eff_ceiling, canary_norm).

    Raises:
        ValueError: on empty inputs or invalid settings.
    """
    from pe_kit.audit.accounting import epsilon_theory

    if not canaries or not noise_multipliers or not sample_rates or not trials:
        raise ValueError("canaries, noise_multipliers, sample_rates and trials must all be non-empty")
    opts = tuple(sorted((options or {}).items()))
    tasks = []
    for c, inp in enumerate(canaries):
        if not isinstance(inp, CanaryInputs):
            raise ValueError(f"canaries[{c}] is a {type(inp).__name__}; build CanaryInputs (CanaryInputs.from_full)")
        for i, sigma in enumerate(noise_multipliers):
            for j, q in enumerate(sample_rates):
                cal, test, info = scalar_problems(inp, sigma, q, clip_norm=clip_norm, shrinkage=shrinkage, ridge=ridge)
                eps_th = epsilon_theory(sigma, q, delta) if (with_theory and sigma > 0) else float("nan")
                for k, n in enumerate(trials):
                    labels = (("canary", c), *tuple(inp.labels.items()), ("sigma", float(sigma)), ("q", float(q)),
                              ("trials_requested", int(n)), ("mu_eff_ceiling", info["mu_eff_ceiling"]),
                              ("canary_norm", info["canary_norm"]))
                    tasks.append(AuditTask(calibration=cal, test=test, trials=int(n), seed=(int(seed), c, i, j, k),
                                           gamma=gamma, delta=delta, epsilon_theory=eps_th, labels=labels,
                                           options=opts))
    return tasks


def run_sweep(tasks: Sequence[AuditTask], scheduler=None, *, n_workers: int = 2, threads_per_worker: int = 1,
              processes: bool = True, progress: bool = False, timing: bool = False):
    """Run ``tasks`` and return one tidy row per task, in task order (``pandas.DataFrame``).

    Args:
        tasks: ``AuditTask`` s.
        scheduler: None → a fresh ``distributed.LocalCluster`` (``n_workers`` workers, ``threads_per_worker``
            threads, ``processes``), closed afterwards; a scheduler address string (``"tcp://host:8786"``) →
            ``distributed.Client(address)``; a ``distributed.Client`` → used as is (left open);
            ``"serial"`` → this process, no Dask.
        n_workers, threads_per_worker, processes: the local cluster's shape.
        progress: ``pe_kit.progress`` over finished tasks. timing: add each task's wall ``seconds`` (not reproducible).

    Returns:
        DataFrame with a leading ``task`` column (0 … len−1); without ``timing`` it is identical for the
        serial and every Dask run with the same tasks.

    Raises:
        ValueError: on an unknown scheduler spec or non-task items.
    """
    import pandas as pd

    from pe_kit.progress import progress as steps

    tasks = list(tasks)
    for i, t in enumerate(tasks):
        if not isinstance(t, AuditTask):
            raise ValueError(f"tasks[{i}] is a {type(t).__name__}, not an AuditTask")
    if scheduler == "serial":
        rows = [run_task(t, timing) for t in (steps(tasks, desc="sweep", unit="task") if progress else tasks)]
    else:
        rows = _run_dask(tasks, scheduler, n_workers, threads_per_worker, processes, progress, timing)
    df = pd.DataFrame(rows)
    df.insert(0, "task", np.arange(len(rows)))
    return df


class _DaskShutdownNoise:
    """Logging filter for the ``asyncio`` logger: drops only "Task exception was never retrieved" records
    about a ``TimeoutError`` in a ``distributed`` coroutine — the cluster's own shutdown race, printed at
    interpreter exit after every result was already collected. Everything else passes."""

    def filter(self, record) -> bool:
        msg = record.getMessage()
        exc = record.exc_info[1] if record.exc_info else None
        timeout = "TimeoutError" in msg or isinstance(exc, TimeoutError)
        return not ("never retrieved" in msg and timeout and "distributed" in msg)


def _quiet_dask_shutdown() -> None:
    import logging

    log = logging.getLogger("asyncio")
    if not any(isinstance(f, _DaskShutdownNoise) for f in log.filters):
        log.addFilter(_DaskShutdownNoise())


def _run_dask(tasks, scheduler, n_workers, threads_per_worker, processes, progress, timing) -> list[dict]:
    import logging

    from distributed import Client, LocalCluster, as_completed

    from pe_kit.progress import progress as steps

    if not (scheduler is None or isinstance(scheduler, (str, Client))):
        raise ValueError(f"scheduler={scheduler!r}: use None (local cluster), 'serial', an address string or a "
                         "distributed.Client")
    if scheduler is None and (int(n_workers) != n_workers or n_workers < 1):
        raise ValueError(f"n_workers={n_workers} must be an integer ≥ 1")
    quiet = logging.getLogger("distributed")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    _quiet_dask_shutdown()
    cluster = client = None
    own = not isinstance(scheduler, Client)
    try:
        if isinstance(scheduler, Client):
            client = scheduler
        elif isinstance(scheduler, str):
            client = Client(scheduler)
        else:
            cluster = LocalCluster(n_workers=int(n_workers), threads_per_worker=threads_per_worker,
                                   processes=processes, dashboard_address=None, silence_logs=logging.WARNING)
            client = Client(cluster)
        futures = client.map(run_task, tasks, timing=timing, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        rows: list = [None] * len(tasks)
        bar = steps(total=len(tasks), desc="sweep", unit="task") if progress else None
        try:
            for fut in as_completed(futures):
                rows[index[fut.key]] = fut.result()
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        return rows
    finally:
        quiet.setLevel(logging.ERROR)  # shutdown races (closed comms, heartbeats) are not the user's business
        try:
            if own and client is not None:
                client.close(timeout=30)
            if cluster is not None:
                cluster.close(timeout=30)
        except (TimeoutError, OSError) as exc:  # the results are in; a slow shutdown only merits one line
            import warnings

            warnings.warn(f"the Dask cluster did not shut down cleanly ({type(exc).__name__}); results are complete",
                          stacklevel=2)
        finally:
            quiet.setLevel(level)
