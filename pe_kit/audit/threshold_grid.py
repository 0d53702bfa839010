"""The calibration grid of the trial engine (``pe_kit.audit.engine``) and the exact score moments it is fixed from
(Eq. 14, App. E.2, Eq. 28): uniform, step sd₀/``resolution``, over [min mean − z·sd₀, max mean + z·sd₀],
z = Φ⁻¹(1 − 1/(2n)) + 2, so one streaming pass needs O(grid) memory.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from pe_kit.audit.trials import ScalarProblem

__all__ = ["ThresholdGrid", "score_moments"]

_MARGIN_SD = 2.0        # grid reach beyond Φ⁻¹(1 − 1/(2n)), in H0 sds
_MAX_SIZE = 1 << 20     # most thresholds a grid holds


def _check_problem(problem: ScalarProblem) -> ScalarProblem:
    if not isinstance(problem, ScalarProblem):
        raise ValueError(f"problem must be a trials.ScalarProblem, got {type(problem).__name__}: build one with "
                         "trials.scalar_problem or trials.nonce_problem")
    a = np.asarray(problem.projections, dtype=np.float64)
    if a.ndim != 1 or not np.isfinite(a).all():
        raise ValueError("problem.projections must be a finite 1-D float array (the users' a_u = w·c_u)")
    if not 0 < problem.sample_rate <= 1:
        raise ValueError(f"problem.sample_rate={problem.sample_rate} must satisfy 0 < q ≤ 1")
    if not (math.isfinite(problem.noise_sd) and problem.noise_sd >= 0):
        raise ValueError(f"problem.noise_sd={problem.noise_sd} must be finite and ≥ 0 (σC‖w‖)")
    if not (math.isfinite(problem.canary_shift) and math.isfinite(problem.offset)):
        raise ValueError("problem.canary_shift and problem.offset must be finite: check w = Σ⁻¹v")
    return problem


def score_moments(problem: ScalarProblem) -> dict:
    """Exact ``mean0, sd0, mean_inc, mean1, sd1`` of ℓ under H0, fixed inclusion and H1 (App. E.2):
    mean0 = qΣa − offset, var0 = q(1−q)Σa² + noise_sd²; inclusion adds w·v; H1 adds q·w·v to the mean and
    q(1−q)(w·v)² to the variance."""
    _check_problem(problem)
    a = np.asarray(problem.projections, dtype=np.float64)
    q, shift = problem.sample_rate, problem.canary_shift
    mean0 = q * a.sum() - problem.offset
    var0 = q * (1 - q) * float(a @ a) + problem.noise_sd ** 2
    return {"mean0": float(mean0), "sd0": math.sqrt(var0), "mean_inc": float(mean0 + shift),
            "mean1": float(mean0 + q * shift), "sd1": math.sqrt(var0 + q * (1 - q) * shift ** 2)}


@dataclass(frozen=True)
class ThresholdGrid:
    """Candidate thresholds t_j = start + j·step, j = 0 … size−1; bin b holds t_{b−1} < x ≤ t_b (bin 0: x ≤ t_0, bin
    size: x > t_{size−1}), computed as ⌈(x − start)/step⌉ (off only within a few ulps; test counts compare exactly).
    Raises ValueError on a non-finite start/step, step ≤ 0 or size < 1."""

    start: float
    step: float
    size: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start) and math.isfinite(self.step) and self.step > 0):
            raise ValueError(f"ThresholdGrid start={self.start}, step={self.step}: use a finite start and step > 0")
        if int(self.size) != self.size or self.size < 1:
            raise ValueError(f"ThresholdGrid size={self.size} must be an integer ≥ 1")

    @property
    def thresholds(self) -> np.ndarray:
        """float64 (size,) t_j."""
        return self.start + self.step * np.arange(self.size, dtype=np.float64)

    def bin_index(self, x: np.ndarray) -> np.ndarray:
        """intp (n,) bin of each score (float64 (n,)); see the class docstring."""
        return self._bin_index_inplace(np.array(x, dtype=np.float64, copy=True))

    def _bin_index_inplace(self, y: np.ndarray) -> np.ndarray:
        """``bin_index`` that overwrites the float64 scores ``y`` (same arithmetic, no extra buffer)."""
        y -= self.start
        y *= 1.0 / self.step
        np.ceil(y, out=y)
        np.clip(y, 0, self.size, out=y)
        return y.astype(np.intp)

    def counts_above(self, hist: np.ndarray) -> np.ndarray:
        """int64 (size,) #scores > t_j from a bin histogram int (size+1,)."""
        hist = np.asarray(hist, dtype=np.int64)
        if hist.shape != (self.size + 1,):
            raise ValueError(f"hist has shape {hist.shape}; a grid of size {self.size} needs ({self.size + 1},)")
        return hist.sum() - np.cumsum(hist)[:-1]

    @classmethod
    def for_problem(cls, problem: ScalarProblem, n_trials: int, resolution: int = 256) -> "ThresholdGrid":
        """The calibration grid of ``problem`` for ``n_trials`` per hypothesis (module docstring), at most 2²⁰
        thresholds, cut to the score's support ± the noise reach. Raises ValueError on n_trials or resolution < 1."""
        if int(n_trials) != n_trials or n_trials < 1:
            raise ValueError(f"n_trials={n_trials} must be an integer ≥ 1")
        if int(resolution) != resolution or resolution < 1:
            raise ValueError(f"resolution={resolution} must be an integer ≥ 1 (grid steps per score sd)")
        mom = score_moments(problem)
        z = float(stats.norm.isf(0.5 / n_trials)) + _MARGIN_SD
        sd = mom["sd0"] if mom["sd0"] > 0 else max(abs(problem.canary_shift), 1.0)
        lo = min(mom["mean0"], mom["mean_inc"]) - z * sd
        hi = max(mom["mean0"], mom["mean_inc"]) + z * sd
        a = np.asarray(problem.projections, dtype=np.float64)
        reach = z * problem.noise_sd
        sup_lo = a[a < 0].sum() + min(0.0, problem.canary_shift) - problem.offset - reach
        sup_hi = a[a > 0].sum() + max(0.0, problem.canary_shift) - problem.offset + reach
        lo, hi = max(lo, sup_lo), min(hi, sup_hi)
        if not hi > lo:
            lo, hi = lo - sd, lo + sd
        step = sd / resolution
        size = int(math.ceil((hi - lo) / step)) + 1
        if size > _MAX_SIZE:
            step = (hi - lo) / (_MAX_SIZE - 1)
            size = _MAX_SIZE
        return cls(start=float(lo), step=float(step), size=int(size))


def _gaussian_bin_probs(grid: ThresholdGrid, mean: float, sd: float) -> np.ndarray:
    """float64 (size+1,) P(bin b) for N(mean, sd²), each from the tail nearer to the bin (no cancellation)."""
    z = (grid.thresholds - mean) / sd
    cdf = np.concatenate([[0.0], special.ndtr(z), [1.0]])
    sf = np.concatenate([[1.0], special.ndtr(-z), [0.0]])
    p = np.maximum(np.where(np.concatenate([[False], z > 0]), sf[:-1] - sf[1:], cdf[1:] - cdf[:-1]), 0.0)
    return p / p.sum()
