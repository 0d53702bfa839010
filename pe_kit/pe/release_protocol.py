"""The PE release protocol: what a black-box audit may call, the reference implementation, and an adapter.

A *PE release* (Eq. 1, Alg. A.1 lines 7–20) is any callable

    release(bank, records, owner, n_users, config, rng) -> float64 (p,)

taking bank embeddings (p, d), the eligible users' record embeddings (n, d) with user rows ``owner`` in
[0, n_users), a ``MechanismConfig`` and a ``numpy.random.Generator``; it samples participation (Bernoulli(q)),
routes, normalises and clips votes, and returns one noisy histogram. An optional batched form

    release.release_batch(bank, records, owner, n_users, config, rng, n_releases, coords)
        -> float64 (n_releases, |coords|)

draws independent releases on the probe coordinates only. An optional two-stage form (SnapAudit, Xia et al. 2025)

    release.snapshot(bank, records, owner, n_users, config) -> S
    release.randomise(S, config, rng) -> float64 (p,)

composes to ``release`` (``audit.release_checks.stage_check``); ``staged_batch`` then draws only the randomness per
release.
"""
from __future__ import annotations

import functools
from typing import Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np
import scipy.sparse as sp

from pe_kit.settings import COUNT, MechanismConfig, check_param
from pe_kit.pe.mechanism import contributions, release, routed_contributions, sample_participation, topk_routes

__all__ = ["PERelease", "BatchedPERelease", "ReleasePipeline", "ReferenceRelease", "reference_release",
           "HistogramAdapter", "staged", "staged_batch", "check_release_inputs", "check_release_output",
           "user_records", "stack_users"]


@runtime_checkable
class PERelease(Protocol):
    """One PE histogram release (module docstring): ``(bank, records, owner, n_users, config, rng) -> (p,)``."""

    def __call__(self, bank: np.ndarray, records: np.ndarray, owner: np.ndarray, n_users: int,
                 config: MechanismConfig, rng: np.random.Generator) -> np.ndarray: ...


@runtime_checkable
class BatchedPERelease(Protocol):
    """A release that also offers ``release_batch`` (module docstring)."""

    def release_batch(self, bank: np.ndarray, records: np.ndarray, owner: np.ndarray, n_users: int,
                      config: MechanismConfig, rng: np.random.Generator, n_releases: int,
                      coords: np.ndarray) -> np.ndarray: ...


def check_release_inputs(bank, records, owner, n_users: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(bank float32 (p, d), records float32 (n, d), owner int64 (n,), n_users int), validated. Raises ValueError on
    non-2-D or mismatched embeddings, owner of the wrong length or out of [0, n_users), or n_users < 1."""
    bank = np.asarray(bank, dtype=np.float32)
    records = np.asarray(records, dtype=np.float32)
    owner = np.asarray(owner, dtype=np.int64)
    if bank.ndim != 2 or records.ndim != 2 or bank.shape[1] != records.shape[1]:
        raise ValueError(f"bank (p, d) and records (n, d) must be 2-D with the same d; got {bank.shape} and "
                         f"{records.shape}: embed both with the same encoder")
    if owner.shape != (records.shape[0],):
        raise ValueError(f"owner must have shape ({records.shape[0]},) (one user row per record); got {owner.shape}")
    n_users = check_param("n_users", n_users, COUNT)
    if owner.size and (owner.min() < 0 or owner.max() >= n_users):
        raise ValueError(f"owner values must lie in [0, n_users={n_users})")
    return bank, records, owner, n_users


def check_release_output(y, expected: tuple, name: str, form: str) -> np.ndarray:
    """The release ``y`` as float64 of shape ``expected``. Raises ValueError naming the implementation, the ``form``
    called, the expected shape and what came (None, non-numeric, another shape, NaN / ±inf)."""
    if y is None:
        raise ValueError(f"{name}: {form} returned None; expected a float array of shape {expected} (does the "
                         "function end with `return histogram`?)")
    try:
        arr = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {form} returned {type(y).__name__}, not numbers; expected a float array of shape "
                         f"{expected}") from None
    if len(expected) == 1 and arr.squeeze().shape == expected:
        arr = arr.reshape(expected)  # a (p, 1) or (1, p) histogram is one count per bank entry
    if arr.shape != expected:
        raise ValueError(f"{name}: {form} returned shape {arr.shape}; expected {expected} (one noisy count per bank "
                         "entry" + (", restricted to the probe coordinates)" if len(expected) == 2 else ")"))
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ValueError(f"{name}: {form} returned {int(bad.sum())} non-finite values (NaN or ±inf) of {arr.size}; a "
                         "PE release is finite (check the implementation's normalisation, e.g. a division by a zero "
                         "norm or count)")
    return arr


def _coords(coords, p: int) -> np.ndarray:
    coords = np.asarray(coords, dtype=np.int64).ravel()
    if coords.size == 0 or coords.min() < 0 or coords.max() >= p:
        raise ValueError(f"coords must be non-empty bank positions in [0, {p})")
    return coords


def staged(release) -> bool:
    """Whether ``release`` exposes the two-stage form (callable ``snapshot`` and ``randomise``; module docstring)."""
    return callable(getattr(release, "snapshot", None)) and callable(getattr(release, "randomise", None))


def staged_batch(release, bank, records, owner, n_users: int, config: MechanismConfig, rng: np.random.Generator,
                 n_releases: int, coords) -> np.ndarray:
    """The batched form of a two-stage release: one ``snapshot``, then ``n_releases`` ``randomise`` calls read on
    ``coords``, float64 (n_releases, |coords|). Raises ValueError on bad data arguments, n_releases < 1, coords
    outside [0, p), or a ``randomise`` output that is not p values."""
    bank, records, owner, n_users = check_release_inputs(bank, records, owner, n_users)
    coords, p = _coords(coords, bank.shape[0]), bank.shape[0]
    snap = release.snapshot(bank, records, owner, n_users, config)
    out = np.empty((check_param("n_releases", n_releases, COUNT), coords.size))
    for i in range(out.shape[0]):
        out[i] = check_release_output(release.randomise(snap, config, rng), (p,), type(release).__name__,
                                      "randomise(...)")[coords]
    return out


def user_records(records: np.ndarray, owner: np.ndarray, n_users: int) -> list[np.ndarray]:
    """Split stacked records (n, d) by ``owner`` (n,) into a list of n_users arrays (n_u, d), in user order."""
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(n_users + 1))
    return [records[order[bounds[u]:bounds[u + 1]]] for u in range(n_users)]


class ReleasePipeline:
    """The reference release as overridable steps (Eq. 1, Alg. A.1; ``pe.mutants`` override one each): ``routes`` →
    ``contributions`` → ``participation`` → ``accumulate`` → ``noise``; a ``PERelease`` with both optional forms."""

    name = "reference"

    def routes(self, bank: np.ndarray, records: np.ndarray, config: MechanismConfig) -> np.ndarray:
        """int64 (n, k) bank indices of each record's top-k (``mechanism.topk_routes``)."""
        return topk_routes(records, bank, config.top_k)

    def contributions(self, routes: np.ndarray, owner: np.ndarray, n_users: int, bank_size: int,
                      config: MechanismConfig) -> sp.csr_matrix:
        """CSR float64 (N, p) clipped, normalised vote vectors (``mechanism.contributions``)."""
        return contributions(routes, owner, n_users, bank_size, config.clip_norm)

    def participation(self, n_users: int, config: MechanismConfig, rng: np.random.Generator,
                      n_releases: int) -> np.ndarray:
        """bool (n_releases, N) independent Bernoulli(q) participation (App. E.2)."""
        return rng.random((n_releases, n_users)) < config.sample_rate

    def accumulate(self, mask: np.ndarray, contribs: np.ndarray) -> np.ndarray:
        """float64 (n_releases, |P|) Σ_u I_u v_u from the mask (t, N) and dense contributions (N, |P|)."""
        return mask.astype(np.float64) @ contribs

    def noise(self, totals: np.ndarray, coords: np.ndarray, bank_size: int, config: MechanismConfig,
              rng: np.random.Generator) -> np.ndarray:
        """float64 (t, |P|) totals + N(0, (σC)²) i.i.d."""
        return totals + rng.normal(0.0, config.noise_std, size=totals.shape)

    def prepare(self, bank, records, owner, n_users: int, config: MechanismConfig) -> sp.csr_matrix:
        """The (N, p) contributions of the eligible users, reused by the next call with equal inputs."""
        bank, records, owner, n_users = check_release_inputs(bank, records, owner, n_users)
        last = getattr(self, "_prepared", None)
        if last is not None and last[0] == (n_users, config) and all(
                a.shape == b.shape and np.array_equal(a, b) for a, b in zip(last[1], (bank, records, owner))):
            return last[2]
        routes = self.routes(bank, records, config) if len(records) else np.zeros((0, config.top_k), np.int64)
        out = self.contributions(routes, owner, n_users, bank.shape[0], config)
        self._prepared = ((n_users, config), (bank.copy(), records.copy(), owner.copy()), out)
        return out

    snapshot = prepare  # the deterministic stage of the two-stage form (module docstring)

    def _randomised(self, contribs: sp.csr_matrix, config: MechanismConfig, rng: np.random.Generator,
                    n_releases: int, coords: np.ndarray, chunk_size: int = 8192) -> np.ndarray:
        p = contribs.shape[1]
        dense = np.asarray(contribs[:, coords].todense(), dtype=np.float64)
        out = np.empty((n_releases, coords.size))
        for start in range(0, n_releases, chunk_size):
            t = min(chunk_size, n_releases - start)
            mask = self.participation(contribs.shape[0], config, rng, t)
            out[start:start + t] = self.noise(self.accumulate(mask, dense), coords, p, config, rng)
        return out

    def randomise(self, snapshot: sp.csr_matrix, config: MechanismConfig, rng: np.random.Generator) -> np.ndarray:
        """The randomised stage on the snapshot's (N, p) contributions: participation, Σ_u I_u v_u, noise."""
        return self._randomised(snapshot, config, rng, 1, np.arange(snapshot.shape[1]))[0]

    def release_batch(self, bank, records, owner, n_users: int, config: MechanismConfig, rng: np.random.Generator,
                      n_releases: int, coords, chunk_size: int = 8192) -> np.ndarray:
        """``n_releases`` independent releases on ``coords``, float64 (n_releases, |coords|)."""
        n_releases, coords = check_param("n_releases", n_releases, COUNT), _coords(coords, np.asarray(bank).shape[0])
        return self._randomised(self.prepare(bank, records, owner, n_users, config), config, rng, n_releases, coords,
                                chunk_size)

    def __call__(self, bank, records, owner, n_users: int, config: MechanismConfig,
                 rng: np.random.Generator) -> np.ndarray:
        """One full release, float64 (p,): ``randomise(snapshot(...))``."""
        return self.randomise(self.snapshot(bank, records, owner, n_users, config), config, rng)

    def breaks_guarantee(self, config: MechanismConfig, n_users: int) -> bool:
        """False: these steps are the mechanism the accountant prices (Eq. 1)."""
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ReferenceRelease(ReleasePipeline):
    """The kit's mechanism (``pe.mechanism``, Eq. 1) behind the release protocol; the audit's control."""


def reference_release(bank, records, owner, n_users: int, config: MechanismConfig,
                      rng: np.random.Generator) -> np.ndarray:
    """One release (float64 (p,), Eq. 1) by ``pe.mechanism``'s functions; ValueError on bad data arguments."""
    bank, records, owner, n_users = check_release_inputs(bank, records, owner, n_users)
    c = routed_contributions(records, owner, n_users, bank, config)
    return release(c, config, rng, sample_participation(n_users, config.sample_rate, rng))


class HistogramAdapter:
    """Wrap a third-party PE histogram ``histogram_fn(private, synthetic, **keywords)`` (``private``: per-user
    (n_u, d) arrays) as a ``PERelease``.

    ``settings``: ``MechanismConfig`` field → keyword (unlisted fields not passed); ``rng_arg``: keyword for the
    generator (None: an int seed from it under ``seed_arg``); ``per_user``: per-user arrays, else stacked records with
    ``owner_arg``; ``name``: label in audit rows; ``global_seed``: seed NumPy's global RNG from the audit's generator
    before every call (never on threads); ``noise_fn``: the library's randomised stage (DPSDA
    ``Gaussian.add_noise``), making ``histogram_fn`` the deterministic stage and adding the two-stage form.

    Returns float64 (p,); raises ValueError naming the function when it returns anything else."""

    def __init__(self, histogram_fn: Callable, *, settings: Mapping[str, str] | None = None,
                 rng_arg: str | None = "rng", seed_arg: str | None = "seed", per_user: bool = True,
                 owner_arg: str = "owner", name: str | None = None, global_seed: bool = False,
                 noise_fn: Callable | None = None):
        if not callable(histogram_fn):
            raise ValueError(f"histogram_fn must be callable, got {type(histogram_fn).__name__}")
        if noise_fn is not None and not callable(noise_fn):
            raise ValueError(f"noise_fn must be callable or None, got {type(noise_fn).__name__}")
        self.histogram_fn = histogram_fn
        self.settings = dict(settings) if settings is not None else {
            "top_k": "k", "clip_norm": "clip", "noise_multiplier": "noise_multiplier", "sample_rate": "sample_rate"}
        bad = set(self.settings) - set(MechanismConfig.__dataclass_fields__)
        if bad:
            raise ValueError(f"settings keys {sorted(bad)} are not MechanismConfig fields "
                             f"{sorted(MechanismConfig.__dataclass_fields__)}")
        self.rng_arg, self.seed_arg = rng_arg, seed_arg
        self.per_user, self.owner_arg = per_user, owner_arg
        self.name = name or getattr(histogram_fn, "__name__", "third-party")
        self.global_seed = bool(global_seed)
        self.noise_fn = noise_fn
        if noise_fn is not None:  # the two-stage form, on this instance only
            self.snapshot, self.randomise = self._snapshot, self._randomise
            self.release_batch = functools.partial(staged_batch, self)

    def _kwargs(self, config: MechanismConfig, rng: np.random.Generator | None) -> dict:
        """The mapped settings, plus the generator or a seed drawn from it (and the global RNG seeded) if given."""
        kwargs = {kw: getattr(config, field) for field, kw in self.settings.items()}
        if rng is None:
            return kwargs
        if self.global_seed:
            np.random.seed(int(rng.integers(0, 2**32)))
        if self.rng_arg is not None:
            kwargs[self.rng_arg] = rng
        elif self.seed_arg is not None:
            kwargs[self.seed_arg] = int(rng.integers(0, 2**63))
        return kwargs

    def _histogram(self, bank, records, owner, n_users: int, config: MechanismConfig, rng) -> np.ndarray:
        bank, records, owner, n_users = check_release_inputs(bank, records, owner, n_users)
        kwargs = self._kwargs(config, rng)
        private = user_records(records, owner, n_users) if self.per_user else records
        if not self.per_user:
            kwargs[self.owner_arg] = owner
        return check_release_output(self.histogram_fn(private, bank, **kwargs), (bank.shape[0],), self.name,
                                    "histogram_fn")

    def _snapshot(self, bank, records, owner, n_users: int, config: MechanismConfig) -> np.ndarray:
        return self._histogram(bank, records, owner, n_users, config, None)

    def _randomise(self, clean: np.ndarray, config: MechanismConfig, rng: np.random.Generator) -> np.ndarray:
        clean = np.asarray(clean)
        return check_release_output(self.noise_fn(clean, **self._kwargs(config, rng)), clean.shape, self.name,
                                    f"noise_fn {getattr(self.noise_fn, '__qualname__', '')}".rstrip())

    def __call__(self, bank, records, owner, n_users: int, config: MechanismConfig,
                 rng: np.random.Generator) -> np.ndarray:
        if self.noise_fn is None:
            return self._histogram(bank, records, owner, n_users, config, rng)
        return self._randomise(self._snapshot(bank, records, owner, n_users, config), config, rng)

    def __repr__(self) -> str:
        return f"HistogramAdapter({self.name}{', two-stage' if self.noise_fn is not None else ''})"


def stack_users(users: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, int]:
    """Per-user (n_u, d) arrays → (records float32 (n, d), owner int64 (n,), n_users); ValueError if empty."""
    if len(users) == 0:
        raise ValueError("users is empty: a release needs at least one eligible user")
    users = [np.asarray(u, dtype=np.float32) for u in users]
    owner = np.repeat(np.arange(len(users)), [len(u) for u in users]).astype(np.int64)
    return np.concatenate(users), owner, len(users)
