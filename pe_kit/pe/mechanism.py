"""The PE histogram mechanism: exact top-k routing, vote normalization, clipping, Gaussian release.

Eq. 1 and Alg. A.1 lines 8–20. Distances are Euclidean in the encoder's space; exact ties go to the lowest
bank index (App. B).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from pe_kit.settings import MechanismConfig, check_param

__all__ = ["squared_distances", "topk_routes", "NeighborIndex", "build_neighbor_index", "routes_with_probes",
           "contributions", "routed_contributions", "canary_votes", "release", "sample_participation"]


def _as_matrix(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n, d); got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or inf; re-embed the texts")
    return x


def squared_distances(x: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances float64 (n, p) between rows of ``x`` (n, d) and ``s`` (p, d): ‖x‖² + ‖s‖² − 2 x·s,
    the product in float32 and the sums in float64, clipped at 0; every routing in the kit uses it."""
    x32 = np.asarray(x, dtype=np.float32)
    s32 = np.ascontiguousarray(s, dtype=np.float32)
    first, inverse = _duplicate_rows(s32)
    if first is not None:  # exact duplicates of a bank row get one column, hence identical distances
        return squared_distances(x32, s32[first])[:, inverse]
    dots = (x32 @ s32.T).astype(np.float64)
    xn = np.einsum("ij,ij->i", x32, x32, dtype=np.float64)
    sn = np.einsum("ij,ij->i", s32, s32, dtype=np.float64)
    d = xn[:, None] + sn[None, :] - 2.0 * dots
    np.maximum(d, 0.0, out=d)
    return d


def _duplicate_rows(s32: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(first index of each distinct row, inverse map) when ``s32`` (p, d) has exact duplicate rows, else (None, None):
    BLAS may round one dot product differently at different columns, which would break the lowest-index tie rule."""
    if s32.shape[0] < 2:
        return None, None
    rows = s32.view(np.dtype((np.void, s32.dtype.itemsize * s32.shape[1]))).ravel()
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    if first.size == s32.shape[0]:
        return None, None
    return first, inverse.ravel()


def _stable_topk(d: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise k smallest of ``d`` (n, p) ordered by (distance, index); exact ties → lowest index."""
    n, p = d.shape
    if k >= p:
        order = np.argsort(d, axis=1, kind="stable")
    else:
        part = np.argpartition(d, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(d, part, axis=1).max(axis=1)
        n_le = (d <= kth[:, None]).sum(axis=1)
        ambiguous = np.flatnonzero(n_le > k)
        for row in ambiguous:  # a tie straddles the k-th place: resolve by index
            part[row] = np.argsort(d[row], kind="stable")[:k]
        vals = np.take_along_axis(d, part, axis=1)
        o = np.lexsort((part, vals), axis=1)
        order = np.take_along_axis(part, o, axis=1)
    order = order[:, :k]
    return order.astype(np.int64), np.take_along_axis(d, order, axis=1)


def topk_routes(records: np.ndarray, bank: np.ndarray, top_k: int, chunk_size: int = 2048,
                return_distances: bool = False):
    """Exact Euclidean top-k routing of each record (n, d) to the bank (p, d) (Alg. A.1 line 11): int64 (n, k) bank
    indices, nearest first, and with ``return_distances`` the squared distances. Raises ValueError on a shape
    mismatch, k ∉ [1, p], or non-finite embeddings.
    """
    records = _as_matrix(records, "records")
    bank = _as_matrix(bank, "bank")
    if records.shape[1] != bank.shape[1]:
        raise ValueError(f"records have dimension {records.shape[1]} but bank has {bank.shape[1]}: "
                         "embed both with the same encoder")
    if not 1 <= top_k <= bank.shape[0]:
        raise ValueError(f"top_k={top_k} must be between 1 and the bank size {bank.shape[0]}")
    n = records.shape[0]
    idx = np.empty((n, top_k), dtype=np.int64)
    dist = np.empty((n, top_k), dtype=np.float64)
    for start in range(0, n, chunk_size):
        stop = min(n, start + chunk_size)
        i, dd = _stable_topk(squared_distances(records[start:stop], bank), top_k)
        idx[start:stop], dist[start:stop] = i, dd
    return (idx, dist) if return_distances else idx


@dataclass(frozen=True)
class NeighborIndex:
    """Each record's ``depth`` nearest bank entries (``indices`` int64, ``distances`` float64, (n, depth)). With
    depth ≥ k + r, the top-k of the bank without any r positions is the first k left (App. B, "Trial-set routing").
    """

    indices: np.ndarray
    distances: np.ndarray
    bank_size: int

    @property
    def depth(self) -> int:
        return self.indices.shape[1]

    def without(self, positions: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each record's ``top_k`` nearest entries outside ``positions`` (S_base, App. B): (indices, distances)."""
        keep = np.argsort(np.isin(self.indices, positions), axis=1, kind="stable")[:, :top_k]
        return np.take_along_axis(self.indices, keep, axis=1), np.take_along_axis(self.distances, keep, axis=1)


def build_neighbor_index(records: np.ndarray, bank: np.ndarray, depth: int) -> NeighborIndex:
    """Precompute ``depth`` nearest bank entries per record (see ``NeighborIndex``); shapes as ``topk_routes``."""
    depth = min(int(depth), np.asarray(bank).shape[0])
    idx, dist = topk_routes(records, bank, depth, return_distances=True)
    return NeighborIndex(idx, dist, int(np.asarray(bank).shape[0]))


def routes_with_probes(index: NeighborIndex, records: np.ndarray, probes: np.ndarray | None,
                       probe_positions: np.ndarray | None, top_k: int) -> np.ndarray:
    """Top-k routes, int64 (n, k), in the bank whose ``probe_positions`` were replaced by ``probes`` (App. B): the
    top-k of each record's k nearest kept base entries merged with all probes. ``index`` needs depth ≥ top_k + r.
    Raises ValueError if the index is too shallow or the positions are out of range or repeated.
    """
    if probes is None or probe_positions is None or len(probe_positions) == 0:
        return index.indices[:, :top_k].copy()
    pos = np.asarray(probe_positions, dtype=np.int64)
    r = pos.size
    if len(np.unique(pos)) != r or pos.min() < 0 or pos.max() >= index.bank_size:
        raise ValueError("probe_positions must be distinct bank positions in [0, p)")
    if index.depth < min(index.bank_size, top_k + r):
        raise ValueError(f"NeighborIndex depth {index.depth} < top_k + r = {top_k + r} (top_k={top_k}): rebuild it "
                         f"deeper; a study World is built for one top_k: pe_kit.study.setup.world_for(config, "
                         f"top_k={top_k}) or build_world(config, mechanism=MechanismConfig(top_k={top_k}, …))")
    base_idx, base_d = index.without(pos, top_k)
    probe_d = squared_distances(records, probes)
    cand_idx = np.concatenate([base_idx, np.broadcast_to(pos, (base_idx.shape[0], r))], axis=1)
    cand_d = np.concatenate([base_d, probe_d], axis=1)
    o = np.lexsort((cand_idx, cand_d), axis=1)[:, :top_k]
    return np.take_along_axis(cand_idx, o, axis=1)


def contributions(routes: np.ndarray, owner: np.ndarray, n_users: int, bank_size: int,
                  clip_norm: float) -> sp.csr_matrix:
    """Per-user clipped, normalized vote vectors v_u (Eq. 1; Alg. A.1 lines 12–17), CSR float64 (N, p): row u is
    h̄_u · min(1, C/‖h̄_u‖₂) with h̄_u = counts / (|D_u| k) from ``routes`` (n_records, k) and ``owner`` user rows.
    Raises ValueError on inconsistent shapes, owners out of range, or C ≤ 0.
    """
    routes = np.asarray(routes)
    owner = np.asarray(owner, dtype=np.int64)
    if routes.ndim != 2 or owner.shape != (routes.shape[0],):
        raise ValueError(f"routes (n, k) and owner (n,) disagree: {routes.shape} vs {owner.shape}")
    if owner.size and (owner.min() < 0 or owner.max() >= n_users):
        raise ValueError(f"owner values must lie in [0, {n_users})")
    if clip_norm <= 0:  # C = ∞ (no clipping) is allowed here: the unclipped mutant of pe.mutants
        raise ValueError(f"clip_norm={clip_norm} must be > 0")
    n, k = routes.shape
    per_user = np.bincount(owner, minlength=n_users).astype(np.float64)
    rows = np.repeat(owner, k)
    data = 1.0 / (per_user[rows] * k)
    h = sp.csr_matrix((data, (rows, routes.ravel())), shape=(n_users, bank_size))
    h.sum_duplicates()
    norms = np.sqrt(np.asarray(h.multiply(h).sum(axis=1)).ravel())
    scale = np.ones(n_users)
    big = norms > clip_norm
    scale[big] = clip_norm / norms[big]
    return sp.csr_matrix(sp.diags(scale) @ h)


def routed_contributions(records: np.ndarray, owner: np.ndarray, n_users: int, bank: np.ndarray,
                         mechanism: MechanismConfig) -> sp.csr_matrix:
    """Eq. 1 end to end: the :func:`contributions` (n_users, p) of the :func:`topk_routes` of ``records`` (n, d)."""
    routes = topk_routes(records, bank, mechanism.top_k)
    return contributions(routes, owner, n_users, bank.shape[0], mechanism.clip_norm)


def canary_votes(records: np.ndarray, bank: np.ndarray, probes: np.ndarray | None, positions,
                 mechanism: MechanismConfig, index: NeighborIndex | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(routes (m, k), v (p,)) of one user's records on ``bank`` with ``probes`` at ``positions`` (Eq. 1,
    :func:`routes_with_probes`); ``index``: the records' ``NeighborIndex``, built at depth k + r when None."""
    if index is None:
        index = build_neighbor_index(records, bank, mechanism.top_k + (0 if positions is None else len(positions)))
    routes = routes_with_probes(index, records, probes, positions, mechanism.top_k)
    c = contributions(routes, np.zeros(len(records), dtype=np.int64), 1, bank.shape[0], mechanism.clip_norm)
    return routes, np.asarray(c.todense()).ravel()


def sample_participation(n_users: int, sample_rate: float, rng: np.random.Generator) -> np.ndarray:
    """Independent Bernoulli(q) participation indicators (App. E.2), bool (n_users,)."""
    return rng.random(n_users) < check_param("sample_rate", sample_rate)


def release(contribs: sp.spmatrix, config: MechanismConfig, rng: np.random.Generator,
            participation: np.ndarray | None = None) -> np.ndarray:
    """One DP histogram release Y = Σ_u I_u v_u + N(0, (σC)² I) (§2, Alg. A.1 line 20), float64 (p,);
    ``participation``: bool (N,) indicators, else drawn Bernoulli(q). Raises ValueError for a wrong length."""
    n_users, p = contribs.shape
    if participation is None:
        participation = sample_participation(n_users, config.sample_rate, rng)
    participation = np.asarray(participation, dtype=bool)
    if participation.shape != (n_users,):
        raise ValueError(f"participation must have shape ({n_users},); got {participation.shape}")
    total = np.asarray(contribs[participation].sum(axis=0)).ravel()
    return total + rng.normal(0.0, config.noise_std, size=p)
