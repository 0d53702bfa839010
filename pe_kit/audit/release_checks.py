"""Checks of a black-box release implementation itself: are its trials independent releases of one mechanism drawn
from the auditor's generator (§2.1 Steps 3–4)? Each runs the release on the design's test split.

* ``seed_check``: the same seed gives the same release, two seeds two (deterministic; no α spent).
* ``batch_call_check``: ``release_batch`` draws what ``release(...)`` draws on the probe coordinates: a
  two-sample KS test (``scipy.stats.ks_2samp``) at level γ.
* ``repeat_check``: on coordinates J0 no user votes on, a correct release is f(Z_j), Z_j ~ N(0, (σC)²) i.i.d.
  (Eq. 1), f any coordinate-wise post-processing; so no release vector has probability above ρ = f^|J0|, f the
  largest probability of one value (Clopper–Pearson upper bound at γ/2 on the pooled values). P(some g of n
  releases equal) ≤ C(n, g)·ρ^(g−1) and P(some coordinate holds h equal values) ≤ |J0|·C(n, h)·f^(h−1); the
  flag (either < γ/4) has level γ.
* ``stage_check`` (with ``snapshot`` and ``randomise``): the snapshot is deterministic and the staged releases
  equal the one-call ones seed for seed (deterministic; no α spent).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats

from pe_kit.audit.confusion import clopper_pearson
from pe_kit.audit.release_runner import CALL_CHUNK, call_release, implementation_name, population, release_scores
from pe_kit.settings import COUNT, LEVEL, REPEATS, MechanismConfig, check_param
from pe_kit.pe.release_protocol import ReferenceRelease, check_release_output, staged

__all__ = ["seed_check", "batch_call_check", "repeat_check", "stage_check"]

#: batched scores per per-call score in ``batch_call_check``
_BATCH_FACTOR = 10


def _inputs(release, design, hypothesis: int) -> tuple:
    """(bank float32, records, owner, n, name): the test split's users as a release takes them."""
    records, owner, n = population(design, "test", hypothesis, len(design.test))
    return np.asarray(design.bank, dtype=np.float32), records, owner, n, implementation_name(release)


def seed_check(release, design, mechanism: MechanismConfig) -> dict:
    """Three back-to-back H1 calls, seed 0 twice and seed 1 once (also through ``release_batch`` when offered).
    Returns ``seed_same_release``, ``seed_different_release`` and ``seed_flag`` (either fails).
    Raises ValueError on a release of the wrong shape / None / NaN."""
    bank, records, owner, n, name = _inputs(release, design, 1)
    coords = np.asarray(design.coords, dtype=np.int64).ravel()

    def draw(seed):
        rng = np.random.Generator(np.random.PCG64(seed))
        out = []
        if callable(release):
            out.append(call_release(release, bank, records, owner, n, mechanism, rng, name))
        if hasattr(release, "release_batch"):
            rng = np.random.Generator(np.random.PCG64(seed))
            y = release.release_batch(bank, records, owner, n, mechanism, rng, 2, coords)
            out.append(check_release_output(y, (2, coords.size), name, "release_batch(...)").ravel())
        return np.concatenate(out)

    a, b, c = draw(0), draw(0), draw(1)
    same, different = bool(np.array_equal(a, b)), not bool(np.array_equal(a, c))
    return {"seed_same_release": same, "seed_different_release": different, "seed_flag": not (same and different)}


def batch_call_check(release, design, mechanism: MechanismConfig, stat, *, n_call: int = 2_000, gamma: float = 0.0025,
                     seed=0, scheduler=None, show_progress: bool | None = None) -> dict:
    """``n_call`` (≥ 2) per-call and 10·``n_call`` batched H1 scores compared at level ``gamma``.
    Returns ``batch_call_pvalue`` (NaN without ``release_batch``), ``batch_call_statistic`` (KS D),
    ``batch_call_flag`` (p < γ), ``batch_call_n``. Raises ValueError on n_call < 2 or γ outside (0, 1)."""
    n_call = check_param("n_call", n_call, REPEATS)
    check_param("gamma", gamma, LEVEL)
    if not (callable(release) and hasattr(release, "release_batch")):
        return {"batch_call_pvalue": float("nan"), "batch_call_statistic": float("nan"), "batch_call_flag": False,
                "batch_call_n": 0}
    g_call, g_batch = np.random.default_rng(seed).spawn(2)
    per_call = release_scores(release, design, mechanism, stat, "test", 1, n_call, g_call, batched=False,
                              chunk=CALL_CHUNK, scheduler=scheduler, show_progress=show_progress)
    batched = release_scores(release, design, mechanism, stat, "test", 1, n_call * _BATCH_FACTOR, g_batch,
                             batched=True, chunk=8192, scheduler=scheduler, show_progress=show_progress)
    ks = stats.ks_2samp(per_call, batched)
    return {"batch_call_pvalue": float(ks.pvalue), "batch_call_statistic": float(ks.statistic),
            "batch_call_flag": bool(ks.pvalue < gamma), "batch_call_n": n_call}


def _same(a, b) -> bool:
    if hasattr(a, "toarray") or hasattr(b, "toarray"):  # scipy.sparse snapshots
        a, b = (x.toarray() if hasattr(x, "toarray") else np.asarray(x) for x in (a, b))
    return bool(np.shape(a) == np.shape(b) and np.array_equal(np.asarray(a), np.asarray(b)))


def stage_check(release, design, mechanism: MechanismConfig, *, n_calls: int = 8) -> dict:
    """On H1 users the snapshot twice with NumPy's global RNG reseeded between (must be equal), then for seeds
    0 … ``n_calls`` − 1 the one-call release against ``randomise(snapshot, ...)`` (must be equal).
    Returns ``stage_deterministic``, ``stage_equal_calls``, ``stage_calls`` (0 when not ``staged``), ``stage_flag``.
    Raises ValueError on n_calls < 1, or a release of the wrong shape / None / NaN."""
    n_calls = check_param("n_calls", n_calls, COUNT)
    if not (callable(release) and staged(release)):
        return {"stage_deterministic": True, "stage_equal_calls": 0, "stage_calls": 0, "stage_flag": False}
    bank, records, owner, n, name = _inputs(release, design, 1)
    state = np.random.get_state()  # the caller's global RNG is left as it was
    try:
        np.random.seed(0)
        snap = release.snapshot(bank, records, owner, n, mechanism)
        np.random.seed(1)
        deterministic = _same(snap, release.snapshot(bank, records, owner, n, mechanism))
        equal = 0
        for s in range(n_calls):
            one = call_release(release, bank, records, owner, n, mechanism, np.random.Generator(np.random.PCG64(s)),
                               name)
            two = check_release_output(release.randomise(snap, mechanism, np.random.Generator(np.random.PCG64(s))),
                                       (bank.shape[0],), name, "randomise(snapshot(...))")
            equal += int(np.array_equal(one, two))
    finally:
        np.random.set_state(state)
    return {"stage_deterministic": deterministic, "stage_equal_calls": equal, "stage_calls": n_calls,
            "stage_flag": not (deterministic and equal == n_calls)}


def repeat_check(release, design, mechanism: MechanismConfig, *, n_releases: int = 200, gamma: float = 0.0025,
                 seed=0) -> dict:
    """``n_releases`` (≥ 2) H0 releases read on J0 (module docstring). Returns ``repeat_largest`` (g),
    ``repeat_allowed`` (ρ_U), ``repeat_value_largest`` (h), ``repeat_pvalue`` (the smaller bound; NaN when J0 is
    empty), ``repeat_flag`` (p < γ/4), ``repeat_n``. Raises ValueError on n_releases < 2 or γ outside (0, 1)."""
    n = check_param("n_releases", n_releases, REPEATS)
    check_param("gamma", gamma, LEVEL)
    bank, records, owner, n_users, name = _inputs(release, design, 0)
    free = np.flatnonzero(ReferenceRelease().prepare(bank, records, owner, n_users, mechanism).getnnz(axis=0) == 0)
    out = {"repeat_largest": 0, "repeat_allowed": float("nan"), "repeat_value_largest": 0,
           "repeat_pvalue": float("nan"), "repeat_flag": False, "repeat_n": n}
    if free.size == 0:
        return out
    rng = np.random.Generator(np.random.PCG64(seed))
    if hasattr(release, "release_batch"):
        y = check_release_output(release.release_batch(bank, records, owner, n_users, mechanism, rng, n, free),
                                 (n, free.size), name, "release_batch(...)")
    else:
        y = np.stack([call_release(release, bank, records, owner, n_users, mechanism, rng, name)[free]
                      for _ in range(n)])
    g = int(np.unique(y, axis=0, return_counts=True)[1].max())
    h = max(int(np.unique(column, return_counts=True)[1].max()) for column in y.T)
    log_f = float(np.log(clopper_pearson(int(np.unique(y, return_counts=True)[1].max()), y.size, gamma / 2, "upper")))

    def bound(size, log_p):  # log C(n, size)·p^(size−1), 0 (p = 1) for size < 2
        log_choose = math.lgamma(n + 1) - math.lgamma(size + 1) - math.lgamma(n - size + 1)
        return 0.0 if size < 2 else min(0.0, log_choose + (size - 1) * log_p)

    p = float(np.exp(min(bound(g, free.size * log_f), np.log(free.size) + bound(h, log_f))))
    return {**out, "repeat_largest": g, "repeat_allowed": float(np.exp(free.size * log_f)), "repeat_value_largest": h,
            "repeat_pvalue": p, "repeat_flag": bool(p < gamma / 4)}
