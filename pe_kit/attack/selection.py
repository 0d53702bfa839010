"""Greedy forward probe selection (Alg. B.1, Eq. 6) and the routing it needs (App. B; Σ̂_Q: Eqs. 31–35).

r ordered positions ρ_1..ρ_r are reserved in the bank S (S_base: S without them); probe T[t] of a trial set T
sits at ρ_t. ProbeVotes re-routes every canary record to its k nearest entries of S_base ∪ {c_j : j ∈ T}
(ties → lowest final bank index): w_T = counts / (m·k). Eq. 6: J_norm(T) = ‖w_T‖², J_μeff(T) =
w_Tᵀ[Σ̂_Q]_{T,T}⁻¹w_T. ``greedy_select`` scores all candidates of a round at once (a candidate only displaces the
k-th entry of the records it beats); ties go to the lowest pool index (Alg. B.1 line 19).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from pe_kit.audit.moments import aux_moments, null_moments
from pe_kit.settings import MechanismConfig
from pe_kit.pe.mechanism import NeighborIndex, contributions, topk_routes

__all__ = ["OBJECTIVES", "Selection", "base_neighbors", "pool_routes", "pool_covariance", "probe_votes",
           "greedy_select"]

OBJECTIVES = ("norm", "mu_eff")
TIE_RTOL = 1e-10  # J_μeff scores this close (relative) to the best tie


def _check_positions(positions, bank_size: int | None = None) -> np.ndarray:
    pos = np.asarray(positions)
    if pos.ndim != 1 or (pos.size and not np.issubdtype(pos.dtype, np.integer)):
        raise ValueError(f"positions must be a 1-D integer array of bank positions; got shape {pos.shape}, "
                         f"dtype {pos.dtype}")
    pos = pos.astype(np.int64)
    if len(np.unique(pos)) != pos.size or (pos.size and pos.min() < 0):
        raise ValueError("positions must be distinct, non-negative bank positions; draw them with "
                         "probes.replacement_positions")
    if bank_size is not None and pos.size and pos.max() >= bank_size:
        raise ValueError(f"positions must lie in [0, {bank_size}); got max {pos.max()}")
    return pos


def base_neighbors(index: NeighborIndex, removed_positions, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each record's k nearest entries of S_base, the bank without ``removed_positions`` (App. B): (indices int64
    (n, k), squared distances float64 (n, k)), nearest first. ``index``: the records' ``NeighborIndex`` on the
    full bank, depth ≥ top_k + r. Raises ValueError if the index is too shallow or the positions are invalid."""
    pos = _check_positions(removed_positions, index.bank_size)
    if top_k < 1:
        raise ValueError(f"top_k={top_k} must be ≥ 1")
    if index.depth < min(index.bank_size, top_k + pos.size):
        raise ValueError(f"NeighborIndex depth {index.depth} < top_k + r = {top_k + pos.size}: rebuild it deeper "
                         "(build_neighbor_index(records, bank, top_k + r))")
    return index.without(pos, top_k)


def pool_routes(index: NeighborIndex, records: np.ndarray, pool: np.ndarray, removed_positions,
                top_k: int) -> np.ndarray:
    """Top-k routes (int64 (n, k) in [0, p + M)) of ``records`` in S_base ∪ Q, the whole pool (Alg. B.1 line 6);
    pool entry j gets index p + j, so exact ties go to the base. Raises ValueError on a too-shallow ``index`` or
    mismatched shapes."""
    records = np.asarray(records)
    pool = np.asarray(pool)
    if records.shape[0] != index.indices.shape[0]:
        raise ValueError(f"records has {records.shape[0]} rows but the index has {index.indices.shape[0]}")
    if pool.ndim != 2 or pool.shape[1] != records.shape[1]:
        raise ValueError(f"pool must be (M, {records.shape[1]}); got {pool.shape}")
    b_idx, b_d = base_neighbors(index, removed_positions, top_k)
    p, m_pool = index.bank_size, pool.shape[0]
    kp = min(top_k, m_pool)
    out = np.empty((records.shape[0], top_k), dtype=np.int64)
    for s in range(0, records.shape[0], 4096):
        e = min(records.shape[0], s + 4096)
        # only a record's k nearest pool entries can enter its top k: merge 2k candidates, not k + M
        p_idx, p_d = topk_routes(records[s:e], pool, kp, return_distances=True)
        cd = np.concatenate([b_d[s:e], p_d], axis=1)
        ci = np.concatenate([b_idx[s:e], p_idx + p], axis=1)
        o = np.lexsort((ci, cd), axis=1)[:, :top_k]
        out[s:e] = np.take_along_axis(ci, o, axis=1)
    return out


def pool_covariance(aux_index: NeighborIndex, aux_records: np.ndarray, aux_owner: np.ndarray, n_aux_users: int,
                    pool: np.ndarray, removed_positions, mechanism: MechanismConfig, n_users: int,
                    shrinkage: float = 0.1, ridge: float = 1e-9) -> np.ndarray:
    """Frozen pool covariance Σ̂_Q (M, M) from auxiliary users (Alg. B.1 line 6; Eqs. 31–35): aux users routed to
    S_base ∪ Q (``pool_routes``) and clipped (Eq. 1); Σ̂_Q = q(1−q)N·shrink(M̂_Q) + (σC)² I + ridge·I, N =
    ``n_users``. Raises ValueError on no aux users or bad shapes."""
    if n_aux_users < 1:
        raise ValueError("n_aux_users must be ≥ 1: Σ̂_Q is estimated from auxiliary users")
    if n_users < 1:
        raise ValueError(f"n_users={n_users} must be ≥ 1 (the eligible population N)")
    pool = np.asarray(pool)
    routes = pool_routes(aux_index, aux_records, pool, removed_positions, mechanism.top_k)
    p = aux_index.bank_size
    c = contributions(routes, aux_owner, n_aux_users, p + pool.shape[0], mechanism.clip_norm)
    moments = aux_moments(c[:, p:], shrinkage)
    _, sigma = null_moments(moments, n_users, mechanism, ridge)
    return sigma


def _check_inputs(pool_d2, base_d2, base_idx, positions):
    pool_d2 = np.asarray(pool_d2, dtype=np.float64)
    base_d2 = np.asarray(base_d2, dtype=np.float64)
    base_idx = np.asarray(base_idx)
    if pool_d2.ndim != 2 or base_d2.ndim != 2:
        raise ValueError(f"pool_d2 (m, M) and base_d2 (m, k) must be 2-D; got {pool_d2.shape}, {base_d2.shape}")
    m, k = base_d2.shape
    if pool_d2.shape[0] != m or base_idx.shape != (m, k):
        raise ValueError(f"pool_d2 {pool_d2.shape}, base_d2 {base_d2.shape} and base_idx {base_idx.shape} must "
                         "agree on m records (and k)")
    if m == 0 or k == 0:
        raise ValueError("need at least one canary record and top_k ≥ 1")
    if not (np.isfinite(pool_d2).all() and np.isfinite(base_d2).all()):
        raise ValueError("distances contain NaN or inf; re-embed the texts")
    base_idx = base_idx.astype(np.int64)
    o = np.lexsort((base_idx, base_d2), axis=1)
    if not (o == np.arange(k)).all():
        raise ValueError("base_d2/base_idx rows must be sorted by (distance, index); use base_neighbors")
    pos = _check_positions(positions)
    if np.isin(base_idx, pos).any():
        raise ValueError("base_idx contains a reserved position: remove the positions first (base_neighbors)")
    return pool_d2, base_d2, base_idx, pos


def probe_votes(pool_d2: np.ndarray, base_d2: np.ndarray, base_idx: np.ndarray, positions, selected) -> np.ndarray:
    """ProbeVotes(S(T), D_can, k) by full re-routing (Alg. B.1 line 11): int64 (|T|,) votes per slot.

    ``pool_d2``: float64 (m, M) squared distances canary records → pool; ``base_d2``, ``base_idx``: (m, k) of
    ``base_neighbors``; probe ``selected[t]`` sits at ``positions[t]``. Raises ValueError on inconsistent shapes or
    more probes than positions.
    """
    pool_d2, base_d2, base_idx, pos = _check_inputs(pool_d2, base_d2, base_idx, positions)
    sel = np.asarray(selected, dtype=np.int64).ravel()
    if sel.size > pos.size:
        raise ValueError(f"{sel.size} probes but only {pos.size} reserved positions")
    m, k = base_d2.shape
    if sel.size == 0:
        return np.zeros(0, dtype=np.int64)
    cd = np.concatenate([base_d2, pool_d2[:, sel]], axis=1)
    ci = np.concatenate([base_idx, np.broadcast_to(pos[:sel.size], (m, sel.size))], axis=1)
    slot = np.concatenate([np.full((m, k), -1, np.int64), np.broadcast_to(np.arange(sel.size), (m, sel.size))], axis=1)
    o = np.lexsort((ci, cd), axis=1)[:, :k]
    s = np.take_along_axis(slot, o, axis=1).ravel()
    return np.bincount(s[s >= 0], minlength=sel.size).astype(np.int64)


@dataclass(frozen=True)
class Selection:
    """Outcome of Alg. B.1: ``order`` (int64 (r,) pool indices, probe t → ρ_t), ``scores`` (J after each round,
    Eq. 6), ``counts`` (final canary votes per slot), ``ties`` (candidates tied at the best score per round)."""

    order: np.ndarray
    scores: np.ndarray
    counts: np.ndarray
    objective: str
    n_records: int
    top_k: int
    seconds: float
    ties: np.ndarray


def _single_thread_blas():
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn (the notebooks extra)
        import contextlib
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _pick(scores: np.ndarray, cand: np.ndarray, tol_floor: float, rtol: float) -> tuple[int, int]:
    """Lowest pool index among the candidates within rtol·|best| + tol_floor of the best score (Alg. B.1 line 19;
    both 0 for J_norm's integer scores: exact ties); returns (index, #ties)."""
    best = scores.max()
    hits = cand[scores >= best - (rtol * abs(best) + tol_floor)]
    return int(hits.min()), int(hits.size)


def greedy_select(pool_d2: np.ndarray, base_d2: np.ndarray, base_idx: np.ndarray, positions, objective: str = "norm",
                  sigma: np.ndarray | None = None) -> Selection:
    """Greedy forward selection of r = len(positions) probes from a pool of M (Alg. B.1, Eq. 6) → ``Selection``.

    Arrays as in ``probe_votes``; ``objective``: ``"norm"`` or ``"mu_eff"`` (needs ``sigma``, the frozen (M, M)
    Σ̂_Q). Raises ValueError naming the bad argument (shapes, r > M, objective, Σ not PD).
    """
    pool_d2, base_d2, base_idx, pos = _check_inputs(pool_d2, base_d2, base_idx, positions)
    if objective not in OBJECTIVES:
        raise ValueError(f"objective={objective!r} is unknown; use one of {OBJECTIVES}")
    m, k = base_d2.shape
    n_pool = pool_d2.shape[1]
    r = pos.size
    if r > n_pool:
        raise ValueError(f"r={r} probes cannot be selected from a pool of M={n_pool}; raise the pool size or lower r")
    if objective == "mu_eff":
        if sigma is None:
            raise ValueError("objective 'mu_eff' needs sigma, the frozen (M, M) pool covariance (pool_covariance)")
        sigma = np.asarray(sigma, dtype=np.float64)
        if sigma.shape != (n_pool, n_pool) or not np.isfinite(sigma).all():
            raise ValueError(f"sigma must be a finite ({n_pool}, {n_pool}) matrix; got {sigma.shape}")
        if not np.allclose(sigma, sigma.T, rtol=1e-10, atol=0):
            raise ValueError("sigma must be symmetric")
        if (np.diag(sigma) <= 0).any():
            raise ValueError("sigma must have a positive diagonal (add the DP noise term (σC)² I or a ridge)")
        tol_floor = TIE_RTOL / (m * k) ** 2 / float(np.diag(sigma).max())
    else:
        tol_floor = 0.0
    t0 = time.perf_counter()
    with _single_thread_blas():  # tiny matrix products: threads only add contention
        order, scores, ties = _greedy_incremental(pool_d2, base_d2, base_idx, pos, objective, sigma, tol_floor)
    counts = probe_votes(pool_d2, base_d2, base_idx, pos, order)
    return Selection(order=order, scores=scores, counts=counts, objective=objective, n_records=m,
                     top_k=k, seconds=time.perf_counter() - t0, ties=ties)


def _bordered_inverse(kinv: np.ndarray, sigma: np.ndarray, sel: np.ndarray, j: int) -> np.ndarray:
    """K_{P∪j} = [Σ̂]_{P∪j}⁻¹ from K_P = [Σ̂]_P⁻¹ (Schur complement); raises ValueError if Σ̂_T is not PD."""
    if not sel.size:
        return np.array([[1.0 / sigma[j, j]]])
    bj = sigma[sel, j]
    kbj = kinv @ bj
    sc = sigma[j, j] - bj @ kbj
    if not sc > 0:
        raise ValueError("Σ̂_T lost positive definiteness during selection; raise the ridge")
    top = kinv + np.outer(kbj, kbj) / sc
    return np.block([[top, -kbj[:, None] / sc], [-kbj[None, :] / sc, np.array([[1.0 / sc]])]])


def _greedy_incremental(pool_d2, base_d2, base_idx, pos, objective, sigma, tol_floor):
    m, k = base_d2.shape
    n_pool = pool_d2.shape[1]
    r = pos.size
    scale = 1.0 / (m * k)
    # each record's current top-k over S(P), sorted by (distance, bank index); slot -1 = base entry
    cur_d = base_d2.copy()
    cur_i = base_idx.copy()
    cur_s = np.full((m, k), -1, dtype=np.int64)
    counts = np.zeros(r, dtype=np.int64)
    available = np.ones(n_pool, bool)
    order = np.empty(r, dtype=np.int64)
    scores, ties = np.empty(r), np.empty(r, np.int64)
    diag = np.diag(sigma).copy() if sigma is not None else None
    kinv = np.zeros((0, 0))
    rows_m = np.arange(m)
    for t in range(r):
        cand = np.flatnonzero(available)
        d_c = pool_d2[:, cand]
        kd, ki, ks = cur_d[:, -1], cur_i[:, -1], cur_s[:, -1]
        enters = (d_c < kd[:, None]) | ((d_c == kd[:, None]) & (pos[t] < ki)[:, None])  # (m, |cand|)
        new_votes = enters.sum(axis=0).astype(np.int64)
        if t > 0:
            # evictions: votes each committed probe loses when j enters a record whose k-th entry it holds
            evict = np.zeros((t, cand.size), dtype=np.int64)
            held = np.flatnonzero(ks >= 0)
            if held.size:
                held = held[np.argsort(ks[held], kind="stable")]
                slots, starts = np.unique(ks[held], return_index=True)
                evict[slots] = np.add.reduceat(enters[held].astype(np.int64), starts, axis=0)
            trial = counts[:t, None] - evict
        else:
            trial = np.zeros((0, cand.size), dtype=np.int64)
        if objective == "norm":
            s = np.einsum("ij,ij->j", trial, trial) + new_votes * new_votes
            j, n_tied = _pick(s, cand, 0.0, 0.0)
            scores[t] = s.max() * scale * scale
        else:
            x = trial * scale
            xj = new_votes * scale
            if t > 0:
                sel = order[:t]
                b = sigma[np.ix_(sel, cand)]  # (t, |cand|)
                kb = kinv @ b
                kx = kinv @ x
                q1 = np.einsum("ij,ij->j", x, kx)
                cross = np.einsum("ij,ij->j", kb, x)
                schur = diag[cand] - np.einsum("ij,ij->j", b, kb)
                s = q1 + (xj - cross) ** 2 / schur
            else:
                s = xj * xj / diag[cand]
            j, n_tied = _pick(s, cand, tol_floor, TIE_RTOL)
            scores[t] = s.max()
        ties[t] = n_tied
        a = int(np.searchsorted(cand, j))
        hit = rows_m[enters[:, a]]
        if hit.size:
            ev = cur_s[hit, -1]
            np.subtract.at(counts, ev[ev >= 0], 1)
            cur_d[hit, -1] = pool_d2[hit, j]
            cur_i[hit, -1] = pos[t]
            cur_s[hit, -1] = t
            o = np.lexsort((cur_i[hit], cur_d[hit]), axis=1)
            cur_d[hit] = np.take_along_axis(cur_d[hit], o, axis=1)
            cur_i[hit] = np.take_along_axis(cur_i[hit], o, axis=1)
            cur_s[hit] = np.take_along_axis(cur_s[hit], o, axis=1)
        counts[t] = hit.size
        if objective == "mu_eff":
            kinv = _bordered_inverse(kinv, sigma, order[:t], j)
        order[t] = j
        available[j] = False
    return order, scores, ties
