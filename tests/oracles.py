"""Slow, literal reference forms that the tests (and benchmarks/bench_selection.py) check the package's fast paths
against; none of them is reached from the public calls."""
from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Sequence

import numpy as np
import scipy.linalg as sla
from scipy import special

from pe_kit.attack.selection import TIE_RTOL, _pick, probe_votes
from pe_kit.audit.engine import TrialEngine, _block_task
from pe_kit.audit.one_run_bounds import _check_sample_rate, _fq
from pe_kit.cache import content_hash
from pe_kit.text.generators.base import _WS
from pe_kit.text.generators.pools import record_prompt


def objective_value(counts, n_records: int, top_k: int, objective: str, sigma_sub=None) -> float:
    """J_norm = ‖w‖² or J_μeff = wᵀ[Σ̂_Q]_{T,T}⁻¹w (Eq. 6, by Cholesky) of one trial set from its vote counts,
    w = counts / (n_records·top_k); ``sigma_sub`` is [Σ̂_Q]_{T,T}."""
    w = np.asarray(counts, dtype=np.float64) / (n_records * top_k)
    if objective == "norm" or w.size == 0:
        return float(w @ w)
    return float(w @ sla.cho_solve(sla.cho_factor(sigma_sub, lower=True), w))


def greedy_plain(pool_d2, base_d2, base_idx, positions, objective: str = "norm", sigma=None):
    """Alg. B.1 lines 8–21 literally: every round re-routes all canary records for every candidate
    (``probe_votes``) and scores J by Cholesky (``objective_value``); ties as ``greedy_select``. Arguments as
    ``selection.greedy_select`` (already checked inputs); returns (order int64 (r,), scores (r,), ties (r,))."""
    pool_d2 = np.asarray(pool_d2, dtype=np.float64)
    pos = np.asarray(positions, dtype=np.int64)
    m, k = np.shape(base_d2)
    tol_floor = 0.0 if objective == "norm" else TIE_RTOL / (m * k) ** 2 / float(np.diag(sigma).max())
    order: list[int] = []
    scores, ties = np.empty(pos.size), np.empty(pos.size, np.int64)
    available = np.ones(pool_d2.shape[1], bool)
    for t in range(pos.size):
        cand = np.flatnonzero(available)
        s = np.empty(cand.size, dtype=np.int64 if objective == "norm" else np.float64)
        for a, j in enumerate(cand):
            trial = order + [int(j)]
            c = probe_votes(pool_d2, base_d2, base_idx, pos, trial)
            if objective == "norm":
                s[a] = int(c @ c)
            else:
                s[a] = objective_value(c, m, k, "mu_eff", sigma[np.ix_(trial, trial)])
        j, n_tied = _pick(s, cand, tol_floor, 0.0 if objective == "norm" else TIE_RTOL)
        scores[t] = (s.max() / float(m * k) ** 2) if objective == "norm" else s.max()
        ties[t] = n_tied
        order.append(j)
        available[j] = False
    return np.asarray(order, dtype=np.int64), scores, ties


def tradeoff_inverse_blowup(y: np.ndarray, mu: np.ndarray, sample_rate: float = 1.0) -> np.ndarray:
    """f̄⁻¹(y) for f = C_q(G_μ) by bisection: the x in [0, 1] with 1 − f(x) = y (Mahloujifar et al.'s "inverse
    blow-up"). Pieces of 1 − C_q(G_μ) (Dong, Roth, Su 2022, x* = Φ(−μ/2)): x ≤ x*: q Φ(Φ⁻¹(x) + μ) + (1−q)x
    (bisection on Φ⁻¹(x); Φ(Φ⁻¹(y) − μ) at q = 1); x* ≤ x ≤ f_q(x*): the −1-slope segment; beyond: x = f_q(1 − y).
    ``mu`` broadcasts with ``y``. The reference for ``one_run_bounds._FastInverseBlowup``."""
    q = _check_sample_rate(sample_rate)
    y = np.clip(np.asarray(y, dtype=np.float64), 0.0, 1.0)
    mu = np.asarray(mu, dtype=np.float64)
    y, mu = np.broadcast_arrays(y, mu)
    if q == 1.0:
        with np.errstate(all="ignore"):
            return special.ndtr(special.ndtri(y) - mu)
    x_star = special.ndtr(-mu / 2)
    f_star = _fq(x_star, mu, q)
    out = np.where(y > 1 - x_star, _fq(1 - y, mu, q), y - 1 + x_star + f_star)  # 1 − x* = 1 − C(f_q(x*))
    lo_part = (y <= 1 - f_star) & (y <= 1 - x_star)  # 1 − f_q(x*) = 1 − C(x*)
    if lo_part.any():
        yy, mm = y[lo_part], mu[lo_part]
        a = np.full(yy.shape, -40.0)
        b = special.ndtri(x_star[lo_part])
        for _ in range(46):  # g(z) = q Φ(z + μ) + (1−q)Φ(z) is increasing in z = Φ⁻¹(x)
            z = 0.5 * (a + b)
            g = q * special.ndtr(z + mm) + (1 - q) * special.ndtr(z)
            below = g < yy
            a = np.where(below, z, a)
            b = np.where(below, b, z)
        out[lo_part] = special.ndtr(0.5 * (a + b))
    return np.clip(out, 0.0, 1.0)


def recompute_entries(entry: dict, records: Sequence[str], generator, indices: Sequence[int]) -> list[str]:
    """Regenerate entries ``indices`` of a stored paraphrase pool from their own (prompt, seed), whitespace
    collapsed as stored (``paraphrase_pools.build_pool`` records one seed per entry)."""
    assert content_hash(list(records)) == entry["records_digest"], "records are not the ones this pool was built from"
    idx = [int(j) for j in indices]
    prompts = [record_prompt(generator)(records[entry["sources"][j]]) for j in idx]
    outs = generator.generate_seeded(prompts, np.asarray([entry["seeds"][j] for j in idx], dtype=np.int64))
    return [_WS.sub(" ", o).strip() for o in outs]



_WORKER_PLAN = None


def _set_worker_plan(plan) -> None:
    """Process-pool initializer: the plan every block job of this worker uses (sent once, not per job)."""
    global _WORKER_PLAN
    _WORKER_PLAN = plan


def _worker_block(args):
    return _block_task((_WORKER_PLAN, *args[1:]))


class ParallelTrialEngine(TrialEngine):
    """``TrialEngine`` whose seeded blocks run on ``n_workers`` threads or processes (``parallel``): the same counts
    as the serial engine, since each block's stream depends only on (seed, block) (tests, bench_trials)."""

    def __init__(self, problem, *, n_workers: int = 1, parallel: str = "threads", **options) -> None:
        super().__init__(problem, **options)
        if parallel not in ("threads", "processes"):
            raise ValueError(f"parallel={parallel!r} must be 'threads' or 'processes'")
        self.n_workers, self.parallel = int(n_workers), parallel

    def _results(self, jobs):
        if self.n_workers == 1 or len(jobs) == 1:
            yield from map(_block_task, jobs)
        elif self.parallel == "threads":
            with ThreadPoolExecutor(max_workers=self.n_workers) as pool:
                yield from pool.map(_block_task, jobs)
        else:
            with ProcessPoolExecutor(max_workers=self.n_workers, initializer=_set_worker_plan,
                                     initargs=(self._plan,)) as pool:
                yield from pool.map(_worker_block, [(None, *job[1:]) for job in jobs],
                                    chunksize=max(1, len(jobs) // (16 * self.n_workers)))


def engine_scores(engine: TrialEngine, hypothesis: int, n_trials: int, seed) -> np.ndarray:
    """float64 (n_trials,) the very trials that ``engine.histogram`` and ``count_above`` reduce (same seed → same
    values). Raises ValueError for method='multinomial' (it never draws individual trials)."""
    jobs = engine._jobs(hypothesis, n_trials, seed, None)
    if engine.method == "multinomial":
        raise ValueError("method='multinomial' draws counts, not individual scores; use method='sample'")
    return np.concatenate(list(engine._results(jobs)))
