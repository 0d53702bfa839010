"""PE release implementations written for the tests from the paper (Eq. 1, Alg. A.1): plain functions in the
``PERelease`` protocol, one correct, some harmless variants, and the bugs of issue 31 that escaped one design.

Each routes every record to its k nearest bank entries (exact Euclidean, ties → lowest index), normalises a user's
votes by |D_u|·k, clips them to C, samples users Bernoulli(q) and adds N(0, (σC)²) noise to every coordinate, except
where its docstring says otherwise. Routing is memoised per (bank, records) object pair, as a real implementation
might cache it between releases of one round; the arrays are held so that their ids stay unique.
"""
from __future__ import annotations

import time

import numpy as np

_CACHE: list = []  # [(bank, records, owner, n_users, k, clip, votes (N, p) unclipped, counts (N,))]


def _votes(bank, records, owner, n_users, k):
    """Normalised, unclipped votes float64 (N, p) (by-vote normalisation h̄_u = counts / (|D_u| k))."""
    for b, r, o, n, kk, h, c in _CACHE:
        if b is bank and r is records and o is owner and n == n_users and kk == k:
            return h, c
    d = (records.astype(np.float64) ** 2).sum(1)[:, None] - 2.0 * records.astype(np.float64) @ bank.T.astype(
        np.float64) + (bank.astype(np.float64) ** 2).sum(1)[None, :]
    routes = np.argsort(d, axis=1, kind="stable")[:, :k]
    h = np.zeros((n_users, bank.shape[0]))
    np.add.at(h, (np.repeat(owner, k), routes.ravel()), 1.0)
    counts = np.bincount(owner, minlength=n_users).astype(np.float64)
    h /= np.maximum(counts, 1.0)[:, None] * k
    _CACHE.insert(0, (bank, records, owner, n_users, k, h, counts))
    del _CACHE[4:]
    return h, counts


def _clipped(h, clip):
    norms = np.linalg.norm(h, axis=1)
    return h * np.minimum(1.0, clip / np.maximum(norms, 1e-300))[:, None]


def _release(bank, records, owner, n_users, config, rng, *, mask=None, clip=True, noise=None):
    h, _ = _votes(bank, records, owner, n_users, config.top_k)
    v = _clipped(h, config.clip_norm) if clip else h
    if mask is None:
        mask = rng.random(n_users) < config.sample_rate
    total = mask.astype(np.float64) @ v
    z = rng.normal(0.0, config.noise_multiplier * config.clip_norm, size=bank.shape[0]) if noise is None else noise
    return total + z


# ---------------------------------------------------------------------------------------------- correct / harmless

def reference_fn(bank, records, owner, n_users, config, rng):
    """The mechanism as specified (Eq. 1)."""
    return _release(bank, records, owner, n_users, config, rng)


def noise_multiplier_as_std(bank, records, owner, n_users, config, rng):
    """Harmless at C < 1: noise std σ instead of σC (more noise than claimed)."""
    return _release(bank, records, owner, n_users, config, rng,
                    noise=rng.normal(0.0, config.noise_multiplier, size=bank.shape[0]))


def clamped(bank, records, owner, n_users, config, rng):
    """Harmless (post-processing): the reference with negative counts set to 0."""
    return np.maximum(reference_fn(bank, records, owner, n_users, config, rng), 0.0)


def rounded(bank, records, owner, n_users, config, rng):
    """Harmless (post-processing): the reference rounded to 3 decimals."""
    return np.round(reference_fn(bank, records, owner, n_users, config, rng), 3)


def as_float16(bank, records, owner, n_users, config, rng):
    """Harmless (post-processing): the reference cast to float16."""
    return reference_fn(bank, records, owner, n_users, config, rng).astype(np.float16)


def count_threshold(bank, records, owner, n_users, config, rng):
    """Harmless (post-processing): PE's count threshold, counts below 3σC set to 0 (most coordinates, most times)."""
    y = reference_fn(bank, records, owner, n_users, config, rng)
    return np.where(y >= 3 * config.noise_multiplier * config.clip_norm, y, 0.0)


def clip_to_half(bank, records, owner, n_users, config, rng):
    """Harmless: clips to C/2 (a smaller sensitivity than claimed)."""
    h, _ = _votes(bank, records, owner, n_users, config.top_k)
    v = _clipped(h, config.clip_norm / 2)
    mask = rng.random(n_users) < config.sample_rate
    return mask.astype(np.float64) @ v + rng.normal(0.0, config.noise_multiplier * config.clip_norm, bank.shape[0])


# ---------------------------------------------------------------------------------------------- the escaped bugs

def first_user_always(bank, records, owner, n_users, config, rng):
    """Bug: the first user in the list always participates (an off-by-one in the sampling mask)."""
    mask = rng.random(n_users) < config.sample_rate
    mask[0] = True
    return _release(bank, records, owner, n_users, config, rng, mask=mask)


def heavy_users_skip_sampling(bank, records, owner, n_users, config, rng):
    """Bug: users with ≥ 32 records skip sampling (always in)."""
    _, counts = _votes(bank, records, owner, n_users, config.top_k)
    mask = (rng.random(n_users) < config.sample_rate) | (counts >= 32)
    return _release(bank, records, owner, n_users, config, rng, mask=mask)


def empty_batch_zeros(bank, records, owner, n_users, config, rng):
    """Bug: a batch with no participant returns zeros without noise."""
    mask = rng.random(n_users) < config.sample_rate
    if not mask.any():
        return np.zeros(bank.shape[0])
    return _release(bank, records, owner, n_users, config, rng, mask=mask)


def noise_first_4096(bank, records, owner, n_users, config, rng):
    """Bug: noise only on the first 4,096 coordinates."""
    z = np.zeros(bank.shape[0])
    z[:4096] = rng.normal(0.0, config.noise_multiplier * config.clip_norm, size=min(4096, bank.shape[0]))
    return _release(bank, records, owner, n_users, config, rng, noise=z)


def clock_seeded(bank, records, owner, n_users, config, rng):
    """Bug: sampling and noise from a generator seeded with the clock (seconds), not from ``rng``."""
    return _release(bank, records, owner, n_users, config, np.random.default_rng(int(time.time())))


def constant_seeded(bank, records, owner, n_users, config, rng):
    """Bug: sampling and noise from a generator seeded with a constant, not from ``rng`` (every release the same)."""
    return _release(bank, records, owner, n_users, config, np.random.default_rng(0))


_IMPORT_RNG = np.random.default_rng(20260)


def import_seeded(bank, records, owner, n_users, config, rng):
    """Bug: sampling and noise from a generator created once at import, not from ``rng``."""
    return _release(bank, records, owner, n_users, config, _IMPORT_RNG)


class BatchDiffersFromCall:
    """Bug: ``release_batch`` is the kit's correct reference, the per-call path skips clipping."""

    name = "batch_differs_from_call"

    def __init__(self):
        from pe_kit.pe.release_protocol import ReferenceRelease

        self._batch = ReferenceRelease()

    def release_batch(self, bank, records, owner, n_users, config, rng, n_releases, coords):
        return self._batch.release_batch(bank, records, owner, n_users, config, rng, n_releases, coords)

    def __call__(self, bank, records, owner, n_users, config, rng):
        return _release(bank, records, owner, n_users, config, rng, clip=False)


ESCAPED = (first_user_always, heavy_users_skip_sampling, empty_batch_zeros, noise_first_4096, clock_seeded,
           import_seeded, BatchDiffersFromCall)
HARMLESS = (reference_fn, noise_multiplier_as_std, clip_to_half)
POST_PROCESSED = (clamped, rounded, as_float16, count_threshold)
SEEDED_NOISE = (constant_seeded, clock_seeded, import_seeded, empty_batch_zeros)
