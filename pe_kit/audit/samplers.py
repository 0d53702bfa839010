"""Exact samplers of the background sum Σ_u I_u a_u (Eq. 7 projected on w, Eq. 14) for the trial engine: ``groups``
(a subset per group of g users by exact inverse CDF) and ``gaps`` (Geometric(q) gaps), each drawing a block of
trials from its own ``SeedSequence``."""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from pe_kit.audit.trials import ScalarProblem

METHODS = ("auto", "groups", "gaps", "sample", "multinomial")
_SCALE_BITS = 62            # subset positions are uniform integers in [0, 2^62)
_CELL_BITS = 16             # lookup-table cells: top 16 of the 62 bits
_SUB_ELEMS = 1 << 20        # transient elements per sub-batch inside a block (memory bound)
_BITGEN = np.random.SFC64           # fastest numpy bit generator here (benchmarks/bench_trials.py)
_TILE = 1 << 14             # trials per cache tile of the numpy groups sampler
_TILE_GROUPS = 8            # groups per sub-batch inside a tile


def _seed_sequence(seed) -> np.random.SeedSequence:
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0:
        return np.random.SeedSequence(int(seed))
    if isinstance(seed, (tuple, list)) and seed and all(
            isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0 for s in seed):
        return np.random.SeedSequence([int(s) for s in seed])
    raise ValueError(f"seed={seed!r} must be a non-negative int, a non-empty sequence of them, or a "
                     "numpy SeedSequence")


def stream_seed(seed, *key: int) -> np.random.SeedSequence:
    """The seed of a named sub-stream (distinct keys: independent streams): ``SeedSequence(entropy,
    spawn_key=seed.spawn_key + key)`` of a seed (int ≥ 0, a sequence of them or a ``SeedSequence``) and
    non-negative int keys (e.g. split, hypothesis, block). Raises ValueError on a malformed seed or a negative key."""
    ss = _seed_sequence(seed)
    if any(int(k) < 0 for k in key):
        raise ValueError(f"stream key {key!r} must hold non-negative ints")
    return np.random.SeedSequence(ss.entropy, spawn_key=tuple(ss.spawn_key) + tuple(int(k) for k in key),
                                  pool_size=ss.pool_size)


def _generator(ss: np.random.SeedSequence) -> np.random.Generator:
    return np.random.Generator(_BITGEN(ss))


@lru_cache(maxsize=64)
def _subset_tables(group_size: int, q: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact inverse-CDF tables of the product-Bernoulli law on the 2^g subsets of a group: position r ∈ [0, 2⁶²)
    belongs to the i-th most probable subset iff B_{i−1} ≤ r < B_i, B_i = ⌊2⁶² Σ_{j≤i} p_j⌋ in exact rationals.
    Returns (boundaries uint64 (2^g − 1,), lut int16 (2^16,) the subset owning each top-16-bit cell or −1 if it
    straddles a boundary, order int16 (2^g,) the subset of each ordered atom)."""
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
    lut16: np.ndarray | None       # int16 (2^16,) the subset owning each top-16-bit cell (−1: look up)
    order: np.ndarray | None       # int16 (2^g,)


def _resolve_method(method: str, problem: ScalarProblem, group_size: int) -> str:
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
    if method in ("groups", "gaps"):
        return method
    if method == "sample":
        method = "auto"
    # cost model (benchmarks/bench_trials.py): ≈45 ns per gap hit (qK per trial), ≈10 ns per group draw (K/g)
    if 45.0 * q * k < 10.0 * math.ceil(k / group_size):
        return "gaps"
    return "groups"


def _make_plan(problem: ScalarProblem, method: str, group_size: int) -> _Plan:
    a = np.ascontiguousarray(problem.projections, dtype=np.float64)
    sums = bounds = lut16 = order = None
    if method == "groups":
        g = group_size
        n_groups = -(-a.size // g)
        padded = np.zeros(n_groups * g)
        padded[:a.size] = a
        sums = np.full((n_groups, (1 << g) + 1), np.nan)
        sums[:, :-1] = padded.reshape(n_groups, g) @ _subset_bits(g).T
        bounds, lut16, order = _subset_tables(g, float(problem.sample_rate))
    return _Plan(projections=a, sample_rate=float(problem.sample_rate), canary_shift=float(problem.canary_shift),
                 noise_sd=float(problem.noise_sd), offset=float(problem.offset), method=method, group_size=group_size,
                 sums=sums, boundaries=bounds, lut16=lut16, order=order)


def _groups_numpy(plan: _Plan, t: int, gen: np.random.Generator) -> np.ndarray:
    """Σ_u I_u a_u for t trials by exact group-subset draws, tiled for the cache. float64 (t,).
    One uniform 16-bit cell per (group, trial) → subset by the lookup table; a straddling cell gets 46 fresh bits
    and a binary search."""
    out = np.empty(t)
    sums, lut16, bnd, order = plan.sums, plan.lut16, plan.boundaries, plan.order
    n_groups = sums.shape[0]
    fine_shift = np.uint64(64 - (_SCALE_BITS - _CELL_BITS))
    cell_shift = np.uint64(_SCALE_BITS - _CELL_BITS)
    tile = min(_TILE, max(t, 1))
    per = _TILE_GROUPS
    idx_buf = np.empty(per * tile, dtype=np.int16)
    tmp = np.empty(tile)
    for s0 in range(0, t, tile):
        tt = min(tile, t - s0)
        total = out[s0:s0 + tt]
        total[:] = 0.0
        gathered = tmp[:tt]
        for g0 in range(0, n_groups, per):
            g1 = min(n_groups, g0 + per)
            n = (g1 - g0) * tt
            cells = gen.bit_generator.random_raw(-(-n // 4)).view(np.uint16)[:n]
            idx = lut16.take(cells, out=idx_buf[:n], mode="wrap")  # 'wrap': no bounds check (cells < 2^16)
            neg = np.flatnonzero(idx < 0)
            if neg.size:                             # straddling cells: exact completion + binary search
                pos = (cells[neg].astype(np.uint64) << cell_shift) | (
                    gen.bit_generator.random_raw(neg.size) >> fine_shift)
                idx[neg] = order[np.searchsorted(bnd, pos, side="right")]
            idx = idx.reshape(g1 - g0, tt)
            for j in range(g1 - g0):
                total += sums[g0 + j].take(idx[j], out=gathered, mode="wrap")
    return out


def _gaps_numpy(plan: _Plan, t: int, gen: np.random.Generator) -> np.ndarray:
    """Σ_u I_u a_u for t trials from Geometric(q) gaps ⌊E/λ⌋ + 1 (E ~ Exp(1), λ = −log(1 − q)) over the
    user-major K × t grid, in user slices of ≈2²⁰ expected hits. float64 (t,)."""
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
