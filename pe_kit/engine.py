"""Streaming trial engine on the scalar projection: 10⁶–10⁹ membership trials per hypothesis in
memory bounded by one block, reduced to counts above candidate thresholds.

Source: design.md ("the score is linear in the released vector"); paper Eq. 14 (ℓ = wᵀ(Y_P − m0 − v/2)),
App. E.2 (independent Poisson participation; H1 = canary eligible, sampled w.p. q), Eqs. 28–30
(ε_lower from Clopper–Pearson bounds on confusion counts) and §2.1 Step 5 (threshold frozen on a
calibration split, evaluated on fresh test trials).

One trial of a ``ScalarProblem`` is the scalar

    ℓ = Σ_u I_u a_u + J·(w·v) + N(0, noise_sd²) − offset,   I_u ~ Bernoulli(q) i.i.d.,

with J ≡ 0 under H0 and J ~ Bernoulli(q) under H1. The engine draws trials in *blocks* of
``block_trials``; block b of the stream named by ``seed`` uses its own generator seeded by
``SeedSequence(entropy, spawn_key=(..., b))``, so a result depends only on (seed, n_trials,
block_trials, method, backend) — never on how many workers processed the blocks or in which order
(block histograms are summed as integers).

**Calibration** needs counts above many candidate thresholds. The engine bins every score on a
``ThresholdGrid``: uniform in score units with step sd₀/``resolution`` (sd₀ = the exact H0 score sd),
covering [min mean − z·sd₀, max mean + z·sd₀] with z = Φ⁻¹(1 − 1/(2n)) + 2. Why this grid: (i) the
bound of Eq. 28 is attained in the tails, where the extreme of n Gaussian-like scores lies within
Φ⁻¹(1 − 1/(2n)) sd with probability ≈ 0.6 and 2 more sd cover the rest (scores outside the grid are
still counted, in the end bins: only *candidate thresholds* are limited to the grid, never the counts);
(ii) a step of sd₀/256 moves the FPR by < 3% per step even 6 sd out, far below the Clopper–Pearson
width at the counts that matter, so the grid costs no measurable ε; (iii) fixing the grid from the
problem's exact moments (not from data) keeps the streaming pass single and the memory O(grid).
**Evaluation** on the test split needs only the two counts above the frozen threshold (no binning).

Participation sampling (exact in distribution; users with a_u = 0 are already dropped by
``scalar_problem``), no dense N × trials mask:

* ``groups`` — the K voting users are split into groups of g (zero-padded). A group's participation
  pattern is one of 2^g subsets with the *product-Bernoulli* probability q^|S|(1−q)^(g−|S|) — the same
  law for every group — so one inverse-CDF table serves all groups: with the subsets ordered by
  decreasing probability, the drawn subset is the number of cumulative boundaries ≤ a uniform 62-bit
  integer (boundaries ⌊2⁶² · C_i⌋ computed in exact rational arithmetic from the float q), found from
  the integer's top 16 bits by a lookup table, with an exact fallback (46 fresh bits + binary search)
  for the ≈0.3% of cells that straddle a boundary (q = 0.1, g = 8). Each group adds its precomputed
  subset sum Σ_{u∈S} a_u. Cost: K/g table draws per trial, independent of q.
* ``gaps`` — the K × t participation grid of a block (user-major) is a Bernoulli(q) process whose ones
  are located by cumulative Geometric(q) gaps, ⌊E/λ⌋ + 1 with E ~ Exp(1), λ = −log(1−q). Cost: qK per
  trial; ``auto`` prefers it below q ≈ 0.03.
* ``multinomial`` — only for problems without background voters (nonce canaries): given the
  Binomial(t, q) number of canary inclusions, the bin counts of t i.i.d. Gaussian scores *are*
  Multinomial(t, p_bins) — exact in distribution with no per-trial work (and the test count is
  Binomial). Used by ``tightness_curve`` for large trial counts; ``sample`` (the default) simulates every
  trial.

The canary's inclusion J under H1 is drawn as n_inc ~ Binomial(t, q) per block, added to the block's
first n_inc trials: trials within a block are i.i.d., so the multiset of scores (all any count
depends on) has exactly the law of per-trial Bernoulli draws.

Backends: ``numpy`` (default; blocks use ``np.random.Generator(SFC64(block seed))``) and ``torch``
(CPU, or CUDA when ``device='cuda'`` and present; the ``groups`` sampler, torch generators seeded from
the block seed). They draw the same distribution from different random streams.
"""
from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np
from scipy import optimize, special, stats

from .bounds import ThresholdAudit, calibrate_from_counts, threshold_audit_from_counts
from .trials import ScalarProblem, nonce_problem

__all__ = [
    "ThresholdGrid", "score_moments", "TrialEngine", "ScalarAudit", "audit_scalar", "expected_epsilon",
    "tightness_curve", "stream_seed", "DEFAULT_BLOCK_TRIALS", "METHODS", "BACKENDS",
]

DEFAULT_BLOCK_TRIALS = 1 << 18
METHODS = ("auto", "groups", "gaps", "sample", "multinomial")
BACKENDS = ("numpy", "torch")
_SCALE_BITS = 62            # subset positions are uniform integers in [0, 2^62)
_CELL_BITS = 16             # lookup-table cells: top 16 of the 62 bits
_SUB_ELEMS = 1 << 20        # transient elements per sub-batch inside a block (memory bound)
_BITGEN = np.random.SFC64           # fastest numpy bit generator here (benchmarks/bench_trials.py)


# ----------------------------------------------------------------------------------------------- seeds

def _seed_sequence(seed, name: str = "seed") -> np.random.SeedSequence:
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0:
        return np.random.SeedSequence(int(seed))
    if isinstance(seed, (tuple, list)) and seed and all(
            isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0 for s in seed):
        return np.random.SeedSequence([int(s) for s in seed])
    raise ValueError(f"{name}={seed!r} must be a non-negative int, a non-empty sequence of them, or a "
                     "numpy SeedSequence")


def stream_seed(seed, *key: int) -> np.random.SeedSequence:
    """The seed of a named sub-stream: ``SeedSequence(entropy, spawn_key=seed.spawn_key + key)``.

    Args:
        seed: int ≥ 0, sequence of ints ≥ 0, or ``np.random.SeedSequence``.
        key: non-negative ints naming the sub-stream (e.g. split, hypothesis, block).

    Returns:
        ``np.random.SeedSequence``; distinct keys give independent streams (numpy's spawn mechanism),
        and the same (seed, key) always gives the same stream.

    Raises:
        ValueError: on a malformed seed or a negative key.
    """
    ss = _seed_sequence(seed)
    if any(int(k) < 0 for k in key):
        raise ValueError(f"stream key {key!r} must hold non-negative ints")
    return np.random.SeedSequence(ss.entropy, spawn_key=tuple(ss.spawn_key) + tuple(int(k) for k in key),
                                  pool_size=ss.pool_size)


def _generator(ss: np.random.SeedSequence) -> np.random.Generator:
    return np.random.Generator(_BITGEN(ss))


# ----------------------------------------------------------------------------------------------- grid

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
    """Exact mean and sd of the score ℓ under H0, under fixed inclusion, and under H1 (App. E.2).

    mean0 = qΣa − offset, var0 = q(1−q)Σa² + noise_sd²; fixed inclusion adds w·v to the mean;
    H1 (eligible) adds q·w·v to the mean and q(1−q)(w·v)² to the variance.

    Returns:
        dict of floats ``mean0, sd0, mean_inc, mean1, sd1``.
    """
    _check_problem(problem)
    a = np.asarray(problem.projections, dtype=np.float64)
    q, shift = problem.sample_rate, problem.canary_shift
    mean0 = q * a.sum() - problem.offset
    var0 = q * (1 - q) * float(a @ a) + problem.noise_sd ** 2
    return {"mean0": float(mean0), "sd0": math.sqrt(var0), "mean_inc": float(mean0 + shift),
            "mean1": float(mean0 + q * shift), "sd1": math.sqrt(var0 + q * (1 - q) * shift ** 2)}


@dataclass(frozen=True)
class ThresholdGrid:
    """Candidate thresholds t_j = start + j·step, j = 0 … size−1 (score units, ascending).

    Scores are binned so that bin b ∈ {0, …, size} holds t_{b−1} < x ≤ t_b (bin 0: x ≤ t_0; bin size:
    x > t_{size−1}); the count above t_j is then n − Σ_{b≤j} hist_b. Binning computes ⌈(x − start)/step⌉,
    which agrees with the comparison x > t_j except for scores within a few ulps of a threshold
    (probability ~1e-13 per trial; only calibration uses the grid, test counts compare exactly).

    Raises:
        ValueError: on a non-finite start/step, step ≤ 0 or size < 1.
    """

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

    def value(self, j: int) -> float:
        """t_j as a float."""
        return float(self.start + self.step * j)

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
    def for_problem(cls, problem: ScalarProblem, n_trials: int, resolution: int = 256,
                    margin_sd: float = 2.0, max_size: int = 1 << 20) -> "ThresholdGrid":
        """The default calibration grid of ``problem`` for ``n_trials`` trials per hypothesis (module doc).

        Args:
            problem: the ``ScalarProblem``.
            n_trials: trials per hypothesis (sets the tail reach z = Φ⁻¹(1 − 1/(2n)) + margin_sd).
            resolution: grid steps per H0 score sd (256 by default).
            margin_sd: extra reach in sd beyond the expected extreme.
            max_size: cap on the number of thresholds (the step grows if needed).

        Returns:
            ``ThresholdGrid``; the range is intersected with the support of the background sum ± the
            noise reach, so heavy single users cannot blow it up.

        Raises:
            ValueError: on n_trials < 1 or resolution < 1.
        """
        if int(n_trials) != n_trials or n_trials < 1:
            raise ValueError(f"n_trials={n_trials} must be an integer ≥ 1")
        if int(resolution) != resolution or resolution < 1:
            raise ValueError(f"resolution={resolution} must be an integer ≥ 1 (grid steps per score sd)")
        mom = score_moments(problem)
        z = float(stats.norm.isf(0.5 / n_trials)) + margin_sd
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
        if size > max_size:
            step = (hi - lo) / (max_size - 1)
            size = max_size
        return cls(start=float(lo), step=float(step), size=int(size))


# ----------------------------------------------------------------------------------------------- samplers

@lru_cache(maxsize=64)
def _subset_tables(group_size: int, q: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact inverse-CDF tables of the product-Bernoulli law on the 2^g subsets of a group.

    The subsets are ordered by decreasing probability q^|S|(1−q)^(g−|S|) (ties by index), so that the
    many tiny atoms cluster in one short stretch of [0, 1) and few lookup cells straddle a boundary.
    Position r ∈ [0, 2⁶²) belongs to the i-th ordered atom iff B_{i−1} ≤ r < B_i, with
    B_i = ⌊2⁶² Σ_{j≤i} p_j⌋ computed in exact rationals of the float q: each atom's probability is exact
    to 2⁻⁶².

    Returns:
        boundaries uint64 (2^g − 1,) B_i; lut int16 (2^16,) the subset (bit mask) owning all 62-bit
        positions whose top 16 bits equal the cell, or −1 if the cell straddles a boundary;
        order int16 (2^g,) subset of each ordered atom (resolves straddles after a binary search).
    """
    qf = Fraction(q)
    pf = 1 - qf
    n = 1 << group_size
    pops = [bin(i).count("1") for i in range(n)]
    order = sorted(range(n), key=lambda i: (-qf ** pops[i] * pf ** (group_size - pops[i]), i))
    scale = 1 << _SCALE_BITS
    cum = Fraction(0)
    bounds = []
    for i in order[:-1]:
        cum += qf ** pops[i] * pf ** (group_size - pops[i])
        bounds.append((cum.numerator * scale) // cum.denominator)
    b = np.array(bounds, dtype=np.uint64)
    order_arr = np.array(order, dtype=np.int16)
    shift = np.uint64(_SCALE_BITS - _CELL_BITS)
    cells = np.arange(1 << _CELL_BITS, dtype=np.uint64)
    lo = np.searchsorted(b, cells << shift, side="right")
    hi = np.searchsorted(b, ((cells + np.uint64(1)) << shift) - np.uint64(1), side="right")
    lut = np.where(lo == hi, order_arr[np.minimum(lo, n - 1)], -1).astype(np.int16)
    return b, lut, order_arr


def _subset_bits(group_size: int) -> np.ndarray:
    i = np.arange(1 << group_size)[:, None]
    return ((i >> np.arange(group_size)[None, :]) & 1).astype(np.float64)


@dataclass(frozen=True)
class _Plan:
    """Everything a worker needs to draw blocks of one problem (picklable)."""

    projections: np.ndarray
    sample_rate: float
    canary_shift: float
    noise_sd: float
    offset: float
    method: str
    group_size: int
    sums: np.ndarray | None        # float64 (G, 2^g + 1) subset sums per group, last column NaN (groups)
    boundaries: np.ndarray | None  # uint64 (2^g − 1,)
    lut: np.ndarray | None         # intp (2^16,)
    order: np.ndarray | None       # int16 (2^g,)


def _resolve_method(method: str, problem: ScalarProblem, backend: str, group_size: int) -> str:
    if method not in METHODS:
        raise ValueError(f"method={method!r} is unknown; use one of {METHODS}")
    k = np.asarray(problem.projections).size
    q = problem.sample_rate
    if method == "multinomial":
        if k:
            raise ValueError(f"method='multinomial' needs a problem without background voters (it has K={k}); "
                             "use 'auto', 'groups' or 'gaps'")
        if problem.noise_sd <= 0:
            raise ValueError("method='multinomial' needs noise_sd > 0; use method='sample'")
        return method
    if k == 0 or q >= 1:
        return "sample"
    if method == "gaps" and backend == "torch":
        raise ValueError("backend='torch' implements the 'groups' sampler only; use method='groups' or 'auto'")
    if method in ("groups", "gaps"):
        return method
    if method == "sample":
        method = "auto"
    # cost model measured on this machine's Xeon cores (benchmarks/bench_trials.py): ≈45 ns per gap hit
    # (qK per trial) against ≈10 ns per group draw (K/g per trial): gaps win below q ≈ 0.03 at g = 8
    if backend == "numpy" and 45.0 * q * k < 10.0 * math.ceil(k / group_size):
        return "gaps"
    return "groups"


def _make_plan(problem: ScalarProblem, method: str, group_size: int) -> _Plan:
    a = np.ascontiguousarray(problem.projections, dtype=np.float64)
    sums = bounds = lut = order = None
    if method == "groups":
        g = group_size
        n_groups = -(-a.size // g)
        padded = np.zeros(n_groups * g)
        padded[:a.size] = a
        sums = np.full((n_groups, (1 << g) + 1), np.nan)
        sums[:, :-1] = padded.reshape(n_groups, g) @ _subset_bits(g).T
        bounds, lut, order = _subset_tables(g, float(problem.sample_rate))
        lut = lut.astype(np.intp)
    return _Plan(projections=a, sample_rate=float(problem.sample_rate), canary_shift=float(problem.canary_shift),
                 noise_sd=float(problem.noise_sd), offset=float(problem.offset), method=method, group_size=group_size,
                 sums=sums, boundaries=bounds, lut=lut, order=order)


def _groups_numpy(plan: _Plan, t: int, gen: np.random.Generator) -> np.ndarray:
    """Σ_u I_u a_u for t trials by exact group-subset draws (module docstring). float64 (t,).

    Per sub-batch of groups: one uniform 16-bit cell per (group, trial) → subset via ``lut`` → the
    group's subset sum. A straddling cell maps to the NaN column; the affected trials are then redrawn
    exactly: 46 fresh uniform bits complete the cell to a 62-bit position, resolved by binary search.
    """
    out = np.zeros(t)
    sums, lut, bnd, order = plan.sums, plan.lut, plan.boundaries, plan.order
    n_groups = sums.shape[0]
    # ≤ 8 groups per sub-batch: a trial then meets a straddling cell w.p. < 8 × 0.3%, so the exact redraw
    # of whole trials (below) stays a ~2% side cost
    per = max(1, min(8, _SUB_ELEMS // max(t, 1)))
    fine_shift = np.uint64(64 - (_SCALE_BITS - _CELL_BITS))
    cell_shift = np.uint64(_SCALE_BITS - _CELL_BITS)
    width = sums.shape[1]
    flat_sums = sums.reshape(-1)
    tmp = np.empty(t)
    idx_buf = np.empty(per * t, dtype=np.intp)
    for g0 in range(0, n_groups, per):
        g1 = min(n_groups, g0 + per)
        rows = g1 - g0
        cells = gen.bit_generator.random_raw(-(-rows * t // 4)).view(np.uint16)[:rows * t].reshape(rows, t)
        idx = lut.take(cells, out=idx_buf[:rows * t].reshape(rows, t), mode="wrap")  # 'wrap': no-op, fast path
        acc = np.zeros(t)
        for j in range(rows):                        # index −1 wraps to the NaN column
            acc += sums[g0 + j].take(idx[j], out=tmp, mode="wrap")
        bad = np.flatnonzero(np.isnan(acc))
        if bad.size:                                 # redraw the straddled cells exactly, re-add those trials
            sub = np.ascontiguousarray(idx.take(bad, axis=1))
            flat_sub = sub.reshape(-1)               # a view: sub is C-contiguous
            neg = np.flatnonzero(flat_sub < 0)
            r, col = np.divmod(neg, bad.size)
            pos = (cells[r, bad[col]].astype(np.uint64) << cell_shift) | (
                gen.bit_generator.random_raw(neg.size) >> fine_shift)
            flat_sub[neg] = order[np.searchsorted(bnd, pos, side="right")]
            sub += (np.arange(g0, g1, dtype=np.intp) * width)[:, None]
            acc[bad] = flat_sums.take(sub).sum(axis=0)
        out += acc
    return out


def _gaps_numpy(plan: _Plan, t: int, gen: np.random.Generator) -> np.ndarray:
    """Σ_u I_u a_u for t trials from Geometric(q) gaps over the user-major K × t grid. float64 (t,).

    Gap = ⌊E/λ⌋ + 1 with E = −log(1 − U) ~ Exp(1) (U uniform on [0, 1)) and λ = −log(1 − q):
    P(gap > k) = P(E ≥ kλ) = (1 − q)^k, the Geometric(q) law, so the hit positions are exactly the ones
    of an i.i.d. Bernoulli(q) grid. Users are processed in slices of ≈2²⁰ expected hits (bounded memory).
    """
    a, q = plan.projections, plan.sample_rate
    k = a.size
    out = np.zeros(t)
    scale = 1.0 / math.log1p(-q)                 # negative: log(1 − U) · scale = E / λ ≥ 0
    per_users = max(1, int(_SUB_ELEMS / max(q * t, 1e-300)))
    for u0 in range(0, k, per_users):
        u1 = min(k, u0 + per_users)
        total = (u1 - u0) * t
        pos = -1
        while pos < total - 1:
            m = int((total - 1 - pos) * q * 1.02) + 64
            u = gen.random(m)
            np.subtract(1.0, u, out=u)
            np.log(u, out=u)
            u *= scale
            gaps = u.astype(np.int64)
            gaps += 1
            hits = np.cumsum(gaps)
            hits += pos
            pos = int(hits[-1])
            if pos >= total:
                hits = hits[:np.searchsorted(hits, total)]
            counts = np.diff(np.searchsorted(hits, np.arange(0, u1 - u0 + 1, dtype=np.int64) * t))
            trial = hits - np.repeat(np.arange(0, u1 - u0, dtype=np.int64) * t, counts)
            out += np.bincount(trial, weights=np.repeat(a[u0:u1], counts), minlength=t)
    return out


def _block_scores_numpy(plan: _Plan, hypothesis: int, t: int, ss: np.random.SeedSequence) -> np.ndarray:
    gen = _generator(ss)
    if plan.method == "groups":
        s = _groups_numpy(plan, t, gen)
    elif plan.method == "gaps":
        s = _gaps_numpy(plan, t, gen)
    elif plan.projections.size and plan.sample_rate >= 1:
        s = np.full(t, plan.projections.sum())
    else:
        s = None                                   # no background voters: the score is noise + canary
    if plan.noise_sd > 0:
        z = gen.standard_normal(t)
        z *= plan.noise_sd
        if s is None:
            s = z
        else:
            s += z
    elif s is None:
        s = np.zeros(t)
    if hypothesis == 1:
        n_inc = int(gen.binomial(t, plan.sample_rate))
        s[:n_inc] += plan.canary_shift
    s -= plan.offset
    return s


def _torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a core dependency
        raise ValueError("backend='torch' needs PyTorch installed; use backend='numpy'") from exc
    return torch


def _torch_tables(plan: _Plan, device: str) -> tuple:
    """(sums, lut, boundaries, order) of a ``groups`` plan as torch tensors on ``device``, cached on the plan."""
    torch = _torch()
    cache = plan.__dict__.setdefault("_torch_cache", {})
    if device not in cache:
        dev = torch.device(device)
        cache[device] = (torch.as_tensor(plan.sums[:, :-1].copy(), device=dev),
                         torch.as_tensor(plan.lut.astype(np.int64), device=dev),
                         torch.as_tensor(plan.boundaries.astype(np.int64), device=dev),
                         torch.as_tensor(plan.order.astype(np.int64), device=dev))
    return cache[device]


def _block_scores_torch(plan: _Plan, hypothesis: int, t: int, ss: np.random.SeedSequence, device: str):
    torch = _torch()
    dev = torch.device(device)
    tseed = int(stream_seed(ss, 0).generate_state(1, np.uint64)[0])
    gen_t = torch.Generator(device=dev)
    gen_t.manual_seed(tseed)
    gen_np = _generator(stream_seed(ss, 1))
    if plan.method == "groups":
        sums, lut, bnd, order = _torch_tables(plan, device)
        n_groups, width = sums.shape
        s = torch.zeros(t, dtype=torch.float64, device=dev)
        per = max(1, _SUB_ELEMS // max(t, 1))
        for g0 in range(0, n_groups, per):
            g1 = min(n_groups, g0 + per)
            rows = g1 - g0
            cells = torch.randint(0, 1 << _CELL_BITS, (rows * t,), generator=gen_t, device=dev, dtype=torch.int64)
            idx = lut.index_select(0, cells)
            bad = torch.nonzero(idx < 0).view(-1)
            if bad.numel():
                fine = torch.randint(0, 1 << (_SCALE_BITS - _CELL_BITS), (bad.numel(),), generator=gen_t, device=dev,
                                     dtype=torch.int64)
                pos = (cells.index_select(0, bad) << (_SCALE_BITS - _CELL_BITS)) | fine
                idx.index_copy_(0, bad, order.index_select(0, torch.searchsorted(bnd, pos, right=True)))
            idx = idx.view(rows, t) + (torch.arange(g0, g1, device=dev, dtype=torch.int64) * width)[:, None]
            s += sums.view(-1).index_select(0, idx.view(-1)).view(rows, t).sum(dim=0)
    elif plan.projections.size and plan.sample_rate >= 1:
        s = torch.full((t,), float(plan.projections.sum()), dtype=torch.float64, device=dev)
    else:
        s = torch.zeros(t, dtype=torch.float64, device=dev)
    if plan.noise_sd > 0:
        s += plan.noise_sd * torch.randn(t, generator=gen_t, device=dev, dtype=torch.float64)
    if hypothesis == 1:
        n_inc = int(gen_np.binomial(t, plan.sample_rate))
        s[:n_inc] += plan.canary_shift
    s -= plan.offset
    return s


def _gaussian_bin_probs(grid: ThresholdGrid, mean: float, sd: float) -> np.ndarray:
    """float64 (size+1,) P(bin b) for N(mean, sd²), each from the tail nearer to the bin (no cancellation)."""
    z = (grid.thresholds - mean) / sd
    cdf = np.concatenate([[0.0], special.ndtr(z), [1.0]])
    sf = np.concatenate([[1.0], special.ndtr(-z), [0.0]])
    lo_cdf, hi_cdf, lo_sf, hi_sf = cdf[:-1], cdf[1:], sf[:-1], sf[1:]
    upper = np.concatenate([[False], z > 0]) if grid.size else np.array([False])
    p = np.where(upper, lo_sf - hi_sf, hi_cdf - lo_cdf)
    p = np.maximum(p, 0.0)
    return p / p.sum()


# ----------------------------------------------------------------------------------------------- engine

_WORKER_PLAN: _Plan | None = None


def _set_worker_plan(plan: _Plan) -> None:
    """Process-pool initializer: the plan every block job of this worker uses."""
    global _WORKER_PLAN
    _WORKER_PLAN = plan


def _hist_task(args) -> np.ndarray:
    plan, backend, device, hypothesis, t, ss, grid = args
    plan = plan if plan is not None else _WORKER_PLAN
    if backend == "torch":
        torch = _torch()
        s = _block_scores_torch(plan, hypothesis, t, ss, device)
        if s.device.type == "cpu":  # numpy's binning is faster on CPU, and the same arithmetic as below
            return np.bincount(grid._bin_index_inplace(s.numpy()), minlength=grid.size + 1).astype(np.int64)
        s -= grid.start
        s *= 1.0 / grid.step
        y = s.ceil_().clamp_(0, grid.size).to(torch.int64)
        return torch.bincount(y, minlength=grid.size + 1).cpu().numpy().astype(np.int64)
    return np.bincount(grid._bin_index_inplace(_block_scores_numpy(plan, hypothesis, t, ss)),
                       minlength=grid.size + 1).astype(np.int64)


def _count_task(args) -> int:
    plan, backend, device, hypothesis, t, ss, threshold = args
    plan = plan if plan is not None else _WORKER_PLAN
    if backend == "torch":
        return int((_block_scores_torch(plan, hypothesis, t, ss, device) > threshold).sum().item())
    return int(np.count_nonzero(_block_scores_numpy(plan, hypothesis, t, ss) > threshold))


def _scores_task(args) -> np.ndarray:
    plan, backend, device, hypothesis, t, ss = args
    plan = plan if plan is not None else _WORKER_PLAN
    if backend == "torch":
        return _block_scores_torch(plan, hypothesis, t, ss, device).cpu().numpy()
    return _block_scores_numpy(plan, hypothesis, t, ss)


class TrialEngine:
    """Streams membership trials of one ``ScalarProblem`` (module docstring; Eq. 14, App. E.2).

    Args:
        problem: the ``ScalarProblem`` (projections a_u, w·v, noise sd, offset, q).
        backend: ``"numpy"`` (default) or ``"torch"``.
        device: torch device string (``"cpu"``, ``"cuda"``); None → ``"cuda"`` if available else ``"cpu"``.
        method: ``"auto"`` (cheapest exact sampler), ``"groups"``, ``"gaps"``, ``"sample"`` (per-trial, the
            only per-trial choice without background), or ``"multinomial"`` (no background only).
        group_size: g, users per group of the ``groups`` sampler (1 … 12; 8 by default).
        block_trials: trials per seeded block (memory ∝ block_trials; results depend on it).
        n_workers: blocks processed concurrently (results do not depend on it).
        parallel: ``"threads"`` or ``"processes"`` for n_workers > 1.
        progress: show a tqdm bar over trials.

    Raises:
        ValueError: on an unknown backend/method/parallel mode, a bad problem, or out-of-range sizes.
    """

    def __init__(self, problem: ScalarProblem, *, backend: str = "numpy", device: str | None = None,
                 method: str = "auto", group_size: int = 8, block_trials: int = DEFAULT_BLOCK_TRIALS,
                 n_workers: int = 1, parallel: str = "threads", progress: bool = False) -> None:
        self.problem = _check_problem(problem)
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r} is unknown; use one of {BACKENDS}")
        if int(group_size) != group_size or not 1 <= group_size <= 12:
            raise ValueError(f"group_size={group_size} must be an integer in 1 … 12")
        if int(block_trials) != block_trials or block_trials < 1:
            raise ValueError(f"block_trials={block_trials} must be an integer ≥ 1")
        if int(n_workers) != n_workers or n_workers < 1:
            raise ValueError(f"n_workers={n_workers} must be an integer ≥ 1")
        if parallel not in ("threads", "processes"):
            raise ValueError(f"parallel={parallel!r} must be 'threads' or 'processes'")
        self.backend = backend
        if backend == "torch":
            torch = _torch()
            device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            if device.startswith("cuda") and not torch.cuda.is_available():
                raise ValueError(f"device={device!r} but CUDA is not available; use device='cpu'")
        self.device = device or "cpu"
        self.method = _resolve_method(method, problem, backend, int(group_size))
        self.group_size = int(group_size)
        self.block_trials = int(block_trials)
        self.n_workers = int(n_workers)
        self.parallel = parallel
        self.progress = progress
        self._plan = _make_plan(problem, self.method, self.group_size)

    # -- helpers
    def _blocks(self, n_trials: int) -> list[tuple[int, int]]:
        if int(n_trials) != n_trials or n_trials < 1:
            raise ValueError(f"n_trials={n_trials} must be an integer ≥ 1")
        b = self.block_trials
        return [(i, min(b, n_trials - i * b)) for i in range(-(-int(n_trials) // b))]

    def _map(self, fn, jobs: list, sizes: list[int], desc: str, reduce: bool = True):
        """Run the block jobs; ``reduce``: sum results as they arrive (memory O(one result)), else list them.

        Process workers receive the plan once (pool initializer), not with every block."""
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(sizes), unit="trial", unit_scale=True, desc=desc, disable=not self.progress,
                   leave=False)
        total, parts = None, []

        def take(res, t):
            nonlocal total
            if reduce:
                total = res if total is None else total + res
            else:
                parts.append(res)
            bar.update(t)

        try:
            if self.n_workers == 1 or len(jobs) == 1:
                for job, t in zip(jobs, sizes):
                    take(fn(job), t)
            elif self.parallel == "threads":
                with ThreadPoolExecutor(max_workers=self.n_workers) as pool:
                    for res, t in zip(pool.map(fn, jobs), sizes):
                        take(res, t)
            else:
                light = [(None, *job[1:]) for job in jobs]
                with ProcessPoolExecutor(max_workers=self.n_workers, initializer=_set_worker_plan,
                                         initargs=(self._plan,)) as pool:
                    for res, t in zip(pool.map(fn, light, chunksize=max(1, len(jobs) // (16 * self.n_workers))),
                                      sizes):
                        take(res, t)
        finally:
            bar.close()
        return total if reduce else parts

    def _hyp(self, hypothesis: int) -> int:
        if hypothesis not in (0, 1):
            raise ValueError(f"hypothesis={hypothesis!r} must be 0 (canary absent) or 1 (canary eligible)")
        return int(hypothesis)

    # -- public
    def histogram(self, hypothesis: int, n_trials: int, grid: ThresholdGrid, seed) -> np.ndarray:
        """Bin histogram of ``n_trials`` scores on ``grid`` (bins as in ``ThresholdGrid``).

        Args:
            hypothesis: 0 (H0, canary absent) or 1 (H1, canary eligible).
            n_trials: trials (≥ 1). grid: ``ThresholdGrid``. seed: stream seed (see ``stream_seed``).

        Returns:
            int64 (grid.size + 1,), summing to n_trials. Memory: one block.
        """
        h = self._hyp(hypothesis)
        if not isinstance(grid, ThresholdGrid):
            raise ValueError("grid must be a ThresholdGrid (e.g. ThresholdGrid.for_problem(problem, n_trials))")
        blocks = self._blocks(n_trials)
        if self.method == "multinomial":
            return self._multinomial_hist(h, int(n_trials), grid, stream_seed(seed, 0))
        jobs = [(self._plan, self.backend, self.device, h, t, stream_seed(seed, i), grid) for i, t in blocks]
        return self._map(_hist_task, jobs, [t for _, t in blocks], f"H{h} bins").astype(np.int64)

    def counts_above(self, hypothesis: int, n_trials: int, grid: ThresholdGrid, seed) -> np.ndarray:
        """int64 (grid.size,) #scores > t_j for every grid threshold (``histogram`` + cumulative sums)."""
        return grid.counts_above(self.histogram(hypothesis, n_trials, grid, seed))

    def count_above(self, hypothesis: int, n_trials: int, threshold: float, seed) -> int:
        """#scores > ``threshold`` among ``n_trials`` fresh trials (exact comparisons; no grid). int."""
        h = self._hyp(hypothesis)
        if not math.isfinite(threshold):
            raise ValueError(f"threshold={threshold} must be finite")
        blocks = self._blocks(n_trials)
        if self.method == "multinomial":
            return self._multinomial_count(h, int(n_trials), float(threshold), stream_seed(seed, 0))
        jobs = [(self._plan, self.backend, self.device, h, t, stream_seed(seed, i), float(threshold))
                for i, t in blocks]
        return int(self._map(_count_task, jobs, [t for _, t in blocks], f"H{h} count"))

    def scores(self, hypothesis: int, n_trials: int, seed) -> np.ndarray:
        """float64 (n_trials,) the scores themselves, block by block — the very trials that ``histogram``
        and ``count_above`` reduce (same seed → same values). Memory O(n_trials): for tests and small runs.
        Raises ValueError for method='multinomial' (it never draws individual trials)."""
        h = self._hyp(hypothesis)
        if self.method == "multinomial":
            raise ValueError("method='multinomial' draws counts, not individual scores; use method='sample'")
        blocks = self._blocks(n_trials)
        jobs = [(self._plan, self.backend, self.device, h, t, stream_seed(seed, i)) for i, t in blocks]
        return np.concatenate(self._map(_scores_task, jobs, [t for _, t in blocks], f"H{h} scores", reduce=False))

    # -- exact counts without per-trial work (no background)
    def _components(self, hypothesis: int, n: int, gen: np.random.Generator) -> list[tuple[int, float]]:
        p = self._plan
        mean0 = -p.offset
        if hypothesis == 0:
            return [(n, mean0)]
        n_inc = int(gen.binomial(n, p.sample_rate))
        return [(n - n_inc, mean0), (n_inc, mean0 + p.canary_shift)]

    def _multinomial_hist(self, hypothesis: int, n: int, grid: ThresholdGrid, ss) -> np.ndarray:
        gen = _generator(ss)
        hist = np.zeros(grid.size + 1, dtype=np.int64)
        for count, mean in self._components(hypothesis, n, gen):
            if count:
                hist += gen.multinomial(count, _gaussian_bin_probs(grid, mean, self._plan.noise_sd))
        return hist

    def _multinomial_count(self, hypothesis: int, n: int, threshold: float, ss) -> int:
        gen = _generator(ss)
        total = 0
        for count, mean in self._components(hypothesis, n, gen):
            if count:
                total += int(gen.binomial(count, float(special.ndtr(-(threshold - mean) / self._plan.noise_sd))))
        return total


# ----------------------------------------------------------------------------------------------- one audit

@dataclass(frozen=True)
class ScalarAudit:
    """One calibrated audit on the scalar projection (§2.1 Step 5, Eq. 28).

    Attributes:
        epsilon_lower: ε_lower on the fresh test trials at the frozen threshold.
        threshold: the frozen threshold (ℓ units; a grid point).
        calibration, test: ``ThresholdAudit`` records (counts, rates, Clopper–Pearson bounds).
        trials: trials per hypothesis per split. grid: the calibration ``ThresholdGrid``.
        method, backend: sampler and backend used. seconds: wall time.
    """

    epsilon_lower: float
    threshold: float
    calibration: ThresholdAudit
    test: ThresholdAudit
    trials: int
    grid: ThresholdGrid
    method: str
    backend: str
    seconds: float

    def as_row(self) -> dict:
        """Flat dict: scalar fields, ``calibration_*`` and ``test_*`` counts/bounds, grid size/step."""
        row = {"epsilon_lower": self.epsilon_lower, "threshold": self.threshold, "trials": self.trials,
               "method": self.method, "backend": self.backend, "grid_size": self.grid.size,
               "grid_step": self.grid.step, "seconds": self.seconds}
        for name in ("calibration", "test"):
            for k, v in getattr(self, name).as_dict().items():
                row[f"{name}_{k}"] = v
        return row


def audit_scalar(calibration: ScalarProblem, test: ScalarProblem | None = None, *, trials: int, gamma: float,
                 delta: float, seed, grid: ThresholdGrid | None = None, resolution: int = 256, **engine_options
                 ) -> ScalarAudit:
    """Calibrate a threshold on ``trials`` trials per hypothesis of ``calibration``, then bound ε on
    ``trials`` fresh trials per hypothesis of ``test`` (§2.1 Step 5; Eqs. 28–30).

    Calibration streams every trial into ``grid`` (default ``ThresholdGrid.for_problem(calibration,
    trials, resolution)``) and picks the threshold maximizing the bounded ε (``bounds.calibrate_from_counts``;
    ties → lowest; no positive ε → the H0 median grid point). The test split only counts the trials above
    that frozen threshold. Streams: seed keys (0, h) for calibration and (1, h) for the test, h = hypothesis.

    Args:
        calibration: ``ScalarProblem`` of the calibration population.
        test: ``ScalarProblem`` of the test population (None → ``calibration``, fresh trials).
        trials: trials per hypothesis per split (≥ 1).
        gamma: one-sided Clopper–Pearson tail γ in (0, 1); delta: δ in [0, 1).
        seed: int / sequence / SeedSequence. grid: candidate thresholds. resolution: grid steps per sd.
        engine_options: ``TrialEngine`` keywords (backend, device, method, group_size, block_trials,
            n_workers, parallel, progress).

    Returns:
        ``ScalarAudit``.

    Raises:
        ValueError: on bad γ, δ, trials, seed or engine options.
    """
    if not 0 < gamma < 1:
        raise ValueError(f"gamma={gamma} must lie in (0, 1) (α / (4·n_canaries))")
    if not 0 <= delta < 1:
        raise ValueError(f"delta={delta} must lie in [0, 1)")
    if int(trials) != trials or trials < 1:
        raise ValueError(f"trials={trials} must be an integer ≥ 1")
    trials = int(trials)
    test = calibration if test is None else test
    t0 = time.perf_counter()
    grid = grid or ThresholdGrid.for_problem(calibration, trials, resolution)
    cal_engine = TrialEngine(calibration, **engine_options)
    test_engine = cal_engine if test is calibration else TrialEngine(test, **engine_options)
    fp = cal_engine.counts_above(0, trials, grid, stream_seed(seed, 0, 0))
    tp = cal_engine.counts_above(1, trials, grid, stream_seed(seed, 0, 1))
    cal = calibrate_from_counts(grid.thresholds, tp, fp, trials, trials, gamma, delta)
    fp_t = test_engine.count_above(0, trials, cal.threshold, stream_seed(seed, 1, 0))
    tp_t = test_engine.count_above(1, trials, cal.threshold, stream_seed(seed, 1, 1))
    tst = threshold_audit_from_counts(cal.threshold, tp_t, fp_t, trials, trials, gamma, delta)
    return ScalarAudit(epsilon_lower=tst.epsilon, threshold=cal.threshold, calibration=cal, test=tst, trials=trials,
                       grid=grid, method=cal_engine.method, backend=cal_engine.backend,
                       seconds=time.perf_counter() - t0)


# ----------------------------------------------------------------------------------------------- expectations

def _cp_real(x, n, gamma: float, side: str):
    """Clopper–Pearson endpoints (Eqs. 29–30) at real-valued 'expected' counts x ∈ [0, n]."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        if side == "lower":
            return np.where(x <= 0, 0.0, special.betaincinv(np.maximum(x, 1e-300), n - x + 1, gamma))
        return np.where(x >= n, 1.0, special.betaincinv(x + 1, np.maximum(n - x, 1e-300), 1 - gamma))


def _expected_eps_at(a, mu: float, q: float, n: float | None, gamma: float, delta: float):
    a = np.asarray(a, dtype=np.float64)
    z0, z1 = (a + mu * mu / 2) / mu, (a - mu * mu / 2) / mu
    fpr, tnr = special.ndtr(-z0), special.ndtr(z0)
    tpr = (1 - q) * fpr + q * special.ndtr(-z1)
    fnr = (1 - q) * tnr + q * special.ndtr(z1)
    if n is None:
        tpr_l, fpr_u, tnr_l, fnr_u = tpr, fpr, tnr, fnr
    else:
        tpr_l, fpr_u = _cp_real(n * tpr, n, gamma, "lower"), _cp_real(n * fpr, n, gamma, "upper")
        tnr_l, fnr_u = _cp_real(n * tnr, n, gamma, "lower"), _cp_real(n * fnr, n, gamma, "upper")
    with np.errstate(all="ignore"):
        b1 = np.where((tpr_l - delta > 0) & (fpr_u > 0), np.log(np.maximum(tpr_l - delta, 1e-300) / fpr_u), -np.inf)
        b2 = np.where((tnr_l - delta > 0) & (fnr_u > 0), np.log(np.maximum(tnr_l - delta, 1e-300) / fnr_u), -np.inf)
    return np.maximum(0.0, np.maximum(b1, b2))


def expected_epsilon(mu_eff: float, sample_rate: float, trials: int | None, gamma: float = 0.0025,
                     delta: float = 1e-5, return_threshold: bool = False):
    """Expected ε_lower of the Gaussian pair at μ_eff with Clopper–Pearson at ``trials`` (App. E.4–E.6).

    Derivation. By Eqs. 16–17 and 21, one release's LLR score is ℓ ~ N(−μ²/2, μ²) under H0 and
    (1−q)·N(−μ²/2, μ²) + q·N(+μ²/2, μ²) under H1 (μ = μ_eff). At threshold a,
    FPR(a) = Φ̄((a + μ²/2)/μ), TPR(a) = (1−q)FPR(a) + qΦ̄((a − μ²/2)/μ) (Eqs. 18–19, 23), and TNR, FNR
    are their complements. Replacing each confusion count by its expectation (x = n·rate, real-valued)
    in the Clopper–Pearson endpoints p_L = Beta(x, n−x+1)⁻¹(γ), p_U = Beta(x+1, n−x)⁻¹(1−γ) (Eqs. 29–30)
    gives ε(a) = max{0, log((TPR_L−δ)/FPR_U), log((TNR_L−δ)/FNR_U)} (Eq. 28); the expected curve is
    max_a ε(a) (dense grid over a ∈ [−μ²/2 − 10μ, μ²/2 + 10μ], then Brent refinement). With
    ``trials=None`` the bounds are the rates themselves: the n → ∞ limit, i.e. the tightest (ε, δ) of
    the threshold tests of the pair, which approaches ε_theory for a perfect canary (μ = 1/σ). A real
    audit falls a little below this curve: its threshold is calibrated on noisy trials and its test
    counts fluctuate around their expectations.

    Args:
        mu_eff: μ > 0. sample_rate: q in (0, 1]. trials: n per hypothesis (≥ 1) or None for the limit.
        gamma: γ in (0, 1). delta: δ in [0, 1). return_threshold: also return the maximizing a.

    Returns:
        float ε (and the threshold a in ℓ units if asked).

    Raises:
        ValueError: on out-of-range arguments.
    """
    if not (math.isfinite(mu_eff) and mu_eff > 0):
        raise ValueError(f"mu_eff={mu_eff} must be finite and > 0")
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate={sample_rate} must satisfy 0 < q ≤ 1")
    if trials is not None and (int(trials) != trials or trials < 1):
        raise ValueError(f"trials={trials} must be an integer ≥ 1 or None (the n → ∞ limit)")
    if not 0 < gamma < 1 or not 0 <= delta < 1:
        raise ValueError(f"gamma={gamma} must lie in (0, 1) and delta={delta} in [0, 1)")
    mu, q, n = float(mu_eff), float(sample_rate), (None if trials is None else float(trials))
    grid = np.linspace(-mu * mu / 2 - 10 * mu, mu * mu / 2 + 10 * mu, 4001)
    eps = _expected_eps_at(grid, mu, q, n, gamma, delta)
    i = int(np.argmax(eps))
    best_a, best = float(grid[i]), float(eps[i])
    if best > 0:
        lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
        res = optimize.minimize_scalar(lambda x: -float(_expected_eps_at(x, mu, q, n, gamma, delta)),
                                       bounds=(lo, hi), method="bounded", options={"xatol": 1e-9 * max(mu, 1)})
        if -res.fun > best:
            best_a, best = float(res.x), float(-res.fun)
    return (best, best_a) if return_threshold else best


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

    from .accounting import epsilon_theory as _eps_theory
    from .sweep import AuditTask, run_sweep

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
                    m = method
                    no_background = all(np.asarray(x.projections).size == 0 and x.noise_sd > 0 for x in (cal, test))
                    if m == "auto" and no_background:
                        m = "multinomial"
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
