"""Streaming trial engine on the scalar projection: 10⁶–10⁹ membership trials per hypothesis (Eq. 14, App. E.2) in
memory bounded by one block, reduced to counts above candidate thresholds (Eqs. 28–30, §2.1 Step 5). One trial is
ℓ = Σ_u I_u a_u + J·(w·v) + N(0, noise_sd²) − offset, I_u ~ Bernoulli(q), J ≡ 0 under H0 and ~ Bernoulli(q) under
H1 (n_inc ~ Binomial(t, q) per block, added to its first n_inc trials). Block b of a stream draws from
``SFC64(SeedSequence(entropy, spawn_key=(..., b)))``: results depend only on (seed, n_trials, block_trials,
method). Samplers: ``audit.samplers``; ``multinomial`` (no background voters) draws the counts.
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import replace

import numpy as np
from scipy import special

from pe_kit.audit.bounds import calibrate_from_counts, threshold_audit_from_counts
from pe_kit.audit.outcome import Audit
from pe_kit.audit.samplers import (METHODS, _block_scores_numpy, _generator, _make_plan, _resolve_method,
                                   stream_seed)
from pe_kit.audit.threshold_grid import ThresholdGrid, _check_problem, _gaussian_bin_probs, score_moments
from pe_kit.audit.trials import ScalarProblem

__all__ = ["ThresholdGrid", "score_moments", "TrialEngine", "stream_seed", "exact_method", "DEFAULT_BLOCK_TRIALS",
           "METHODS"]

DEFAULT_BLOCK_TRIALS = 1 << 18


def _block_task(args):
    """One seeded block's scores reduced by its target: a ``ThresholdGrid`` → int64 bin histogram, a float → #scores
    above it (int), None → the float64 scores."""
    plan, hypothesis, t, ss, target = args
    s = _block_scores_numpy(plan, hypothesis, t, ss)
    if target is None:
        return s
    if isinstance(target, ThresholdGrid):
        return np.bincount(target._bin_index_inplace(s), minlength=target.size + 1).astype(np.int64)
    return int(np.count_nonzero(s > target))


class TrialEngine:
    """Streams membership trials of one ``ScalarProblem`` (module docstring): ``method`` one of :data:`METHODS`,
    ``group_size`` g of ``groups`` (1 … 12), ``block_trials`` per seeded block. Raises ValueError on an unknown
    method, a bad problem, or out-of-range sizes."""

    def __init__(self, problem: ScalarProblem, *, method: str = "auto", group_size: int = 8,
                 block_trials: int = DEFAULT_BLOCK_TRIALS) -> None:
        self.problem = _check_problem(problem)
        if int(group_size) != group_size or not 1 <= group_size <= 12:
            raise ValueError(f"group_size={group_size} must be an integer in 1 … 12")
        if int(block_trials) != block_trials or block_trials < 1:
            raise ValueError(f"block_trials={block_trials} must be an integer ≥ 1")
        self.method = _resolve_method(method, problem, int(group_size))
        self.group_size = int(group_size)
        self.block_trials = int(block_trials)
        self._plan = _make_plan(problem, self.method, self.group_size)

    def _jobs(self, hypothesis, n_trials: int, seed, target) -> list[tuple]:
        """One ``_block_task`` job per block of ``block_trials`` (the last one shorter), block i seeded (seed, i)."""
        if hypothesis not in (0, 1):
            raise ValueError(f"hypothesis={hypothesis!r} must be 0 (canary absent) or 1 (canary eligible)")
        if int(n_trials) != n_trials or n_trials < 1:
            raise ValueError(f"n_trials={n_trials} must be an integer ≥ 1")
        b = self.block_trials
        return [(self._plan, int(hypothesis), min(b, n_trials - i * b), stream_seed(seed, i), target)
                for i in range(-(-int(n_trials) // b))]

    def _results(self, jobs: list[tuple]):
        """The jobs' results in block order, lazily (a reduction holds one at a time)."""
        return map(_block_task, jobs)

    def histogram(self, hypothesis: int, n_trials: int, grid: ThresholdGrid, seed) -> np.ndarray:
        """int64 (grid.size + 1,) histogram of ``n_trials`` scores under ``hypothesis`` (0: H0, 1: H1) on ``grid``."""
        jobs = self._jobs(hypothesis, n_trials, seed, grid)
        if not isinstance(grid, ThresholdGrid):
            raise ValueError("grid must be a ThresholdGrid (e.g. ThresholdGrid.for_problem(problem, n_trials))")
        if self.method == "multinomial":
            return self._multinomial(int(hypothesis), int(n_trials), stream_seed(seed, 0), grid)
        return functools.reduce(np.add, self._results(jobs)).astype(np.int64)

    def counts_above(self, hypothesis: int, n_trials: int, grid: ThresholdGrid, seed) -> np.ndarray:
        """int64 (grid.size,) #scores > t_j for every grid threshold (``histogram`` + cumulative sums)."""
        return grid.counts_above(self.histogram(hypothesis, n_trials, grid, seed))

    def count_above(self, hypothesis: int, n_trials: int, threshold: float, seed) -> int:
        """#scores > ``threshold`` among ``n_trials`` fresh trials (exact comparisons; no grid). int."""
        jobs = self._jobs(hypothesis, n_trials, seed, float(threshold))
        if not math.isfinite(threshold):
            raise ValueError(f"threshold={threshold} must be finite")
        if self.method == "multinomial":
            return self._multinomial(int(hypothesis), int(n_trials), stream_seed(seed, 0), float(threshold))
        return int(sum(self._results(jobs)))

    def _multinomial(self, hypothesis: int, n: int, ss, target):
        """``histogram`` (a grid: Multinomial bin counts) or ``count_above`` (a threshold: Binomial), exactly, per
        Gaussian component (H1: n_inc ~ Binomial(n, q) trials shifted by w·v)."""
        p = self._plan
        gen = _generator(ss)
        parts = [(n, -p.offset)]
        if hypothesis == 1:
            n_inc = int(gen.binomial(n, p.sample_rate))
            parts = [(n - n_inc, -p.offset), (n_inc, -p.offset + p.canary_shift)]
        if isinstance(target, ThresholdGrid):
            hist = np.zeros(target.size + 1, dtype=np.int64)
            for count, mean in parts:
                if count:
                    hist += gen.multinomial(count, _gaussian_bin_probs(target, mean, p.noise_sd))
            return hist
        return sum(int(gen.binomial(count, float(special.ndtr(-(target - mean) / p.noise_sd))))
                   for count, mean in parts if count)


def exact_method(method: str, *problems: ScalarProblem) -> str:
    """``"multinomial"`` for ``method="auto"`` when exact (no background voters, noise_sd > 0), else ``method``."""
    if method == "auto" and problems and all(
            np.asarray(p.projections).size == 0 and p.noise_sd > 0 for p in problems):
        return "multinomial"
    return method


def _audit_scalar(calibration: ScalarProblem, test: ScalarProblem | None = None, *, trials: int, gamma: float,
                  delta: float, seed, resolution: int = 256, rule=None, **engine_options) -> Audit:
    """Calibrate a threshold on ``trials`` trials per hypothesis of ``calibration`` (binned on
    ``ThresholdGrid.for_problem``, chosen by ``rule`` via ``bounds.calibrate_from_counts``), then bound ε on
    ``trials`` fresh trials of ``test`` (None → ``calibration``) (§2.1 Step 5; Eqs. 28–30). Seed keys (0, h):
    calibration, (1, h): test; ``engine_options``: ``TrialEngine`` keywords (``method="auto"``: :func:`exact_method`).
    Returns the test ``Audit`` with its calibration record; ``info``: ``trials``, ``sampler``, ``grid``, ``seconds``.
    Raises ValueError on bad γ, δ, trials, seed or engine options."""
    if not 0 < gamma < 1:
        raise ValueError(f"gamma={gamma} must lie in (0, 1) (α / (4·n_canaries))")
    if not 0 <= delta < 1:
        raise ValueError(f"delta={delta} must lie in [0, 1)")
    if int(trials) != trials or trials < 1:
        raise ValueError(f"trials={trials} must be an integer ≥ 1")
    trials = int(trials)
    test = calibration if test is None else test
    t0 = time.perf_counter()
    grid = ThresholdGrid.for_problem(calibration, trials, resolution)
    engine_options = {**engine_options, "method": exact_method(engine_options.get("method", "auto"), calibration, test)}
    cal_engine = TrialEngine(calibration, **engine_options)
    test_engine = cal_engine if test is calibration else TrialEngine(test, **engine_options)
    fp = cal_engine.counts_above(0, trials, grid, stream_seed(seed, 0, 0))
    tp = cal_engine.counts_above(1, trials, grid, stream_seed(seed, 0, 1))
    cal = calibrate_from_counts(grid.thresholds, tp, fp, trials, trials, gamma, delta, rule=rule,
                                sample_rate=calibration.sample_rate)
    fp_t = test_engine.count_above(0, trials, cal.threshold, stream_seed(seed, 1, 0))
    tp_t = test_engine.count_above(1, trials, cal.threshold, stream_seed(seed, 1, 1))
    tst = threshold_audit_from_counts(cal.threshold, tp_t, fp_t, trials, trials, gamma, delta, cal.direction)
    return replace(tst, calibration=cal, info={"trials": trials, "sampler": cal_engine.method, "grid": grid,
                                               "seconds": time.perf_counter() - t0})
