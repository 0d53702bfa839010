"""Synthetic-data utility (paper Fig. 2): MAUVE (Pillutla et al., 2021; PyPI ``mauve-text``) between a synthetic
population and held-out private records on the kit's sentence embeddings, mean ± sd over k-means seeds.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

__all__ = ["MauveResult", "mauve_score", "paired_gain"]


@dataclass(frozen=True)
class MauveResult:
    """MAUVE over k-means seeds: ``mean``, ``sd`` (ddof=1; 0 for one seed), per-seed ``scores``, samples and distinct
    rows of each side, ``num_buckets`` used and requested."""

    mean: float
    sd: float
    scores: tuple[float, ...]
    seeds: tuple[int, ...]
    n_p: int
    n_q: int
    num_buckets: int
    num_buckets_requested: int | str = "auto"
    distinct_p: int = 0
    distinct_q: int = 0

    def as_dict(self) -> dict:
        """Plain dict (tuples as lists) for result rows."""
        return {**asdict(self), "scores": list(self.scores), "seeds": list(self.seeds)}


def _features(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"{name} must be a 2-D array (n ≥ 2, d) of embeddings; got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or inf; re-embed the texts")
    return x


def _subsample(x: np.ndarray, max_samples: int | None, rng: np.random.Generator | None) -> np.ndarray:
    """At most ``max_samples`` rows of ``x``, drawn without replacement from ``rng``, in their order."""
    if max_samples is None:
        return x
    if max_samples < 2:
        raise ValueError(f"max_samples={max_samples} must be ≥ 2 (or None)")
    if x.shape[0] <= max_samples:
        return x
    if rng is None:
        raise ValueError("subsampling to max_samples needs rng= (a numpy Generator)")
    return x[np.sort(rng.choice(x.shape[0], size=max_samples, replace=False))]


def _buckets(num_buckets: int | str, n: int, distinct_p: int, distinct_q: int) -> int:
    """k-means clusters for ``num_buckets`` (see :func:`mauve_score`), warning when an int exceeds a side's distinct
    rows."""
    if num_buckets == "auto":
        return max(2, min(int(round(n / 10)), distinct_p, distinct_q))
    buckets = int(num_buckets)
    for side, d in (("p_features", distinct_p), ("q_features", distinct_q)):
        if d < buckets:
            import warnings

            warnings.warn(f"num_buckets={buckets} but {side} has only {d} distinct rows: k-means splits the other "
                          f"side's clusters where this side has no points, and MAUVE drops for that alone; pass "
                          f"num_buckets='auto' (caps at each side's distinct rows) or num_buckets ≤ {d}",
                          UserWarning, stacklevel=3)
    return buckets


def mauve_score(p_features: np.ndarray, q_features: np.ndarray, seeds: Sequence[int] = (0, 1, 2, 3, 4),
                num_buckets: int | str = "auto", max_samples: int | None = None, rng: np.random.Generator | None = None,
                kmeans_num_redo: int = 1, kmeans_max_iter: int = 100) -> MauveResult:
    """MAUVE(P, Q) on embeddings, mean ± sd over k-means ``seeds``.

    ``p_features``, ``q_features``: float (n, d) embeddings of the synthetic population and held-out records;
    ``num_buckets``: k-means clusters, or ``"auto"`` = max(2, min(round(min(n_p, n_q) / 10), distinct_p,
    distinct_q)); ``max_samples``: subsample each side (from ``rng``) to at most this many rows;
    ``kmeans_num_redo``, ``kmeans_max_iter``: as in ``mauve.compute_mauve`` (whose defaults are 5, 500).

    Raises ValueError: bad shapes, non-finite features, empty seeds, subsampling without ``rng``, zero-variance
    features, or fewer than 2·num_buckets distinct rows in P ∪ Q."""
    p, q = _features(p_features, "p_features"), _features(q_features, "q_features")
    if p.shape[1] != q.shape[1]:
        raise ValueError(f"p_features have dimension {p.shape[1]} but q_features {q.shape[1]}: embed both with "
                         "the same encoder")
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise ValueError("seeds is empty: pass at least one k-means seed, e.g. seeds=(0, 1, 2, 3, 4)")
    p, q = _subsample(p, max_samples, rng), _subsample(q, max_samples, rng)
    if not (num_buckets == "auto" or (isinstance(num_buckets, (int, np.integer))
                                      and 2 <= int(num_buckets) <= p.shape[0] + q.shape[0])):
        raise ValueError(f"num_buckets={num_buckets!r} must be 'auto' or an int in [2, n_p + n_q]")
    from sklearn.preprocessing import normalize

    raw_uniq, inverse = np.unique(np.vstack([q, p]), axis=0, return_inverse=True)  # mauve's order: Q, then P
    inverse = inverse.reshape(-1)
    distinct_q = int(np.unique(inverse[:q.shape[0]]).size)
    distinct_p = int(np.unique(inverse[q.shape[0]:]).size)
    buckets = _buckets(num_buckets, min(p.shape[0], q.shape[0]), distinct_p, distinct_q)
    uniq = normalize(raw_uniq, norm="l2", axis=1)  # as mauve does (norm="l2")
    if float(np.ptp(uniq, axis=0).max()) <= 1e-6:  # every normalised row is the same point (up to rounding)
        raise ValueError("P and Q have zero-variance features: every (L2-normalised) row is the same point, so "
                         "there is nothing to quantize; MAUVE is undefined here (embed real, distinct texts)")
    if uniq.shape[0] < 2 * buckets:
        raise ValueError(f"too few distinct points: P ∪ Q has {uniq.shape[0]} distinct rows for num_buckets={buckets} "
                         f"k-means clusters (need ≥ {2 * buckets}, two per cluster); pass more samples or a smaller "
                         "num_buckets")
    from threadpoolctl import threadpool_limits

    from pe_kit.text.threads import resolve_threads

    # PCA (BLAS) and faiss k-means (OpenMP) on the cores of this process's CPU affinity (pe_kit.text.threads)
    with threadpool_limits(limits=resolve_threads("auto")):
        scores = [_mauve_once(uniq, inverse, q.shape[0], buckets, s, kmeans_num_redo, kmeans_max_iter)
                  for s in seeds]
    arr = np.asarray(scores)
    return MauveResult(mean=float(arr.mean()), sd=float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
                       scores=tuple(scores), seeds=seeds, n_p=int(p.shape[0]), n_q=int(q.shape[0]),
                       num_buckets=buckets, distinct_p=distinct_p, distinct_q=distinct_q,
                       num_buckets_requested=num_buckets if num_buckets == "auto" else buckets)


def _mauve_once(uniq: np.ndarray, inverse: np.ndarray, n_q: int, buckets: int, seed: int, num_redo: int,
                max_iter: int) -> float:
    """One MAUVE value as ``mauve.compute_mauve`` computes it (PCA to 90 % variance, faiss k-means with ``seed + 2``,
    25 weights, scaling factor 5), except that each distinct row is projected and assigned once, so identical rows
    of P and Q always share a cluster."""
    import faiss
    from mauve.compute_mauve import compute_area_under_curve, get_divergence_curve_for_multinomials
    from sklearn.decomposition import PCA

    pca = PCA(n_components=None, whiten=False, random_state=seed + 1).fit(uniq[inverse])
    keep = int(np.argmax(np.cumsum(pca.explained_variance_ratio_) >= 0.9)) + 1
    low = np.ascontiguousarray(pca.transform(uniq)[:, :keep], dtype=np.float32)
    km = faiss.Kmeans(low.shape[1], buckets, niter=max_iter, verbose=False, nredo=num_redo, update_index=True,
                      seed=seed + 2, min_points_per_centroid=1)  # no "please provide ≥ 39·k points" chatter
    km.train(np.ascontiguousarray(low[inverse]))
    _, lab = km.index.search(low, 1)
    labels = lab.reshape(-1)[inverse]
    q_hist = np.bincount(labels[:n_q], minlength=buckets) / n_q
    p_hist = np.bincount(labels[n_q:], minlength=buckets) / (labels.size - n_q)
    weights = np.linspace(1e-6, 1 - 1e-6, 25)
    x, y = get_divergence_curve_for_multinomials(p_hist, q_hist, weights, 5.0).T
    i1, i2 = np.argsort(x), np.argsort(y)
    return float(0.5 * (compute_area_under_curve(x[i1], y[i1]) + compute_area_under_curve(y[i2], x[i2])))


def paired_gain(treated: np.ndarray, control: np.ndarray, level: float = 0.95) -> dict:
    """Mean gain of ``treated`` over ``control`` MAUVE paired by PE seed ((n_seeds, n_kmeans) values or (n_seeds,)
    means) with its Student-t interval at ``level`` (nan for one seed) and whether it excludes 0 (``significant``).
    Raises ValueError on shape mismatch, no seeds, non-finite values or a level outside (0, 1)."""
    from scipy import stats

    a, b = np.asarray(treated, dtype=np.float64), np.asarray(control, dtype=np.float64)
    if a.shape != b.shape or a.ndim not in (1, 2) or a.shape[0] < 1:
        raise ValueError(f"treated {a.shape} and control {b.shape} must have the same shape (n_seeds[, n_kmeans]) "
                         "with n_seeds ≥ 1")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("treated / control contain NaN or inf")
    if not 0 < level < 1:
        raise ValueError(f"level={level!r} must lie in (0, 1), e.g. 0.95")
    ma, mb = (x.mean(axis=1) if x.ndim == 2 else x for x in (a, b))
    d = ma - mb
    n = d.size
    gain = float(d.mean())
    if n < 2:
        sd = lo = hi = float("nan")
    else:
        sd = float(d.std(ddof=1))
        half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / np.sqrt(n)
        lo, hi = gain - half, gain + half
    return {"gain": gain, "gain_sd": sd, "ci_low": lo, "ci_high": hi, "n_seeds": n, "level": level,
            "significant": bool(n >= 2 and (lo > 0 or hi < 0)), "treated_mean": float(ma.mean()),
            "control_mean": float(mb.mean())}
