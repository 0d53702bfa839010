"""Running a black-box release implementation (§2.1 Steps 3–4): argument and output checks, a dry call on a tiny
design, a pilot's seconds per release, populations, and chunked seeds: chunk j of a stream draws from the j-th
``Generator.spawn`` child, so scores depend only on the seed and the chunk size, serially or on a
``dask.distributed.Client`` (``scheduler=``).
"""
from __future__ import annotations

import contextlib
import inspect
import time
from dataclasses import dataclass

import numpy as np

from pe_kit.settings import COUNT, MechanismConfig, check_param, closest
from pe_kit.pe.release_protocol import check_release_output, stack_users
from pe_kit.progress import progress

__all__ = ["seed_sequence", "implementation_name", "check_audit_arguments", "call_release", "canary_index", "population",
           "release_scores", "CALL_CHUNK", "check_keywords", "dry_call", "pilot_seconds"]

#: releases per chunk of an implementation without ``release_batch`` (one Dask task, one progress step)
CALL_CHUNK = 64
_SPLITS = ("calibration", "test")
_DESIGN_FIELDS = ("bank", "coords", "canary", "aux", "calibration", "test")


def seed_sequence(seed) -> np.random.SeedSequence:
    """A fresh ``numpy.random.SeedSequence`` of an int / sequence of ints / SeedSequence (a copy: spawning from it
    never moves the caller's)."""
    if isinstance(seed, np.random.SeedSequence):
        return np.random.SeedSequence(seed.entropy, spawn_key=seed.spawn_key, pool_size=seed.pool_size)
    return np.random.SeedSequence(seed)


def implementation_name(release) -> str:
    """The label of an implementation in audit rows: its ``name`` attribute, else the function's ``__qualname__``,
    else its class name."""
    name = getattr(release, "name", None)
    if isinstance(name, str) and name:
        return name
    for obj in (release, getattr(release, "func", None)):  # functools.partial keeps the function in .func
        q = getattr(obj, "__qualname__", None)
        if isinstance(q, str) and q and not isinstance(obj, type):
            return q
    return type(release).__name__


_RELEASE_ARGS = ("bank", "records", "owner", "n_users", "config", "rng")


def check_audit_arguments(release, design, mechanism) -> None:
    """Check a black-box audit's positional arguments before any work (``design`` None: not checked); a plain callable
    must accept ``(bank, records, owner, n_users, config, rng)`` (unreadable signatures pass). Raises TypeError naming
    what was expected and what came (swapped arguments, a class for an instance, a non-callable release or wrong
    signature, a design missing fields, a mechanism that is not a ``MechanismConfig``)."""
    if isinstance(release, type):
        raise TypeError(f"release is the class {release.__name__}, not an implementation: pass an instance, "
                        f"{release.__name__}(), or a function (bank, records, owner, n_users, config, rng) -> (p,)")
    if not callable(release) and not hasattr(release, "release_batch"):
        hint = " (did you swap release and design? the release comes first)" if hasattr(release, "bank") else ""
        raise TypeError(f"release must be a PERelease: a callable (bank, records, owner, n_users, config, rng) -> "
                        f"(p,) histogram; got {type(release).__name__}{hint}")
    try:
        sig = None if hasattr(release, "release_batch") else inspect.signature(release)
    except (TypeError, ValueError):  # builtins, some C extensions: the call itself will tell
        sig = None
    try:
        if sig is not None:
            sig.bind(*_RELEASE_ARGS)
    except TypeError as exc:
        raise TypeError(f"{implementation_name(release)}{sig} cannot be called as a PERelease "
                        f"(bank, records, owner, n_users, config, rng) -> (p,) histogram ({exc}); wrap it, e.g. "
                        f"lambda bank, records, owner, n_users, config, rng: my_fn(...), or use "
                        f"pe_kit.pe.release_protocol.HistogramAdapter") from None
    missing = [f for f in _DESIGN_FIELDS if not hasattr(design, f)] if design is not None else []
    if missing:
        hint = (" (did you swap release and design? the release comes first, the design second)"
                if callable(design) else "")
        raise TypeError(f"design must carry {_DESIGN_FIELDS} (e.g. pe_kit.attack.bug_canaries.ImplementationDesign or "
                        f"pe_kit.attack.release_designs.release_design); got {type(design).__name__} without "
                        f"{missing}{hint}")
    if not isinstance(mechanism, MechanismConfig):
        raise TypeError("mechanism must be a pe_kit.settings.MechanismConfig (the settings the implementation "
                        f"claims); got {type(mechanism).__name__}")


def call_release(release, bank, records, owner, n_users: int, mechanism: MechanismConfig, rng, name: str,
                 form: str = "release(...)") -> np.ndarray:
    """One ``release(...)`` call, its float64 (p,) output checked (``check_release_output``)."""
    return check_release_output(release(bank, records, owner, n_users, mechanism, rng), (bank.shape[0],), name, form)


def canary_index(design, n_users: int) -> int:
    """The canary's H1 row among ``n_users`` + 1 from ``design.canary_position``: ``"last"`` (default, row N),
    ``"first"`` or an int in [0, N]. Raises ValueError on another value."""
    pos = getattr(design, "canary_position", "last")
    if isinstance(pos, str):
        if pos in ("last", "first"):
            return int(n_users) if pos == "last" else 0
    elif int(pos) == pos and 0 <= int(pos) <= n_users:
        return int(pos)
    raise ValueError(f"design.canary_position={pos!r} must be 'last', 'first' or a user row in [0, {n_users}]")


def population(design, split: str, hypothesis: int, n_users: int) -> tuple:
    """(records float32 (n, d), owner int64 (n,), n) of one split's N users, plus the canary under H1 at
    ``canary_index``. Raises ValueError when the split does not hold exactly ``n_users`` users."""
    users = list(getattr(design, split, None) or [])
    if len(users) != n_users:
        raise ValueError(f"design.{split} has {len(users)} users but the statistic was built for N={n_users}: "
                         "calibration and test splits are distinct users of equal size, never resampled; rebuild "
                         "the design with n_calibration = n_test")
    if hypothesis == 1:
        users.insert(canary_index(design, n_users), np.asarray(design.canary))
    return stack_users(users)


@dataclass(frozen=True)
class _Job:
    """What every chunk of one stream needs (scattered once to Dask workers)."""

    release: object
    bank: np.ndarray
    records: np.ndarray
    owner: np.ndarray
    n_users: int
    mechanism: MechanismConfig
    stat: object
    batched: bool
    name: str


def _chunk(job: _Job, rng: np.random.Generator, t: int) -> np.ndarray:
    """Scores float64 (t,) of t releases drawn from ``rng`` (one chunk)."""
    coords = job.stat.coords
    if job.batched:
        y = job.release.release_batch(job.bank, job.records, job.owner, job.n_users, job.mechanism, rng, t, coords)
        return job.stat.score(check_release_output(y, (t, coords.size), job.name, "release_batch(...)"))
    out = np.empty(t)
    for i in range(t):
        y = call_release(job.release, job.bank, job.records, job.owner, job.n_users, job.mechanism, rng, job.name)
        out[i] = job.stat.score(y[coords][None, :])[0]
    return out


def release_scores(release, design, mechanism: MechanismConfig, stat, split: str, hypothesis: int, n_trials: int,
                   rng: np.random.Generator, *, batched: bool, chunk: int, scheduler=None,
                   show_progress: bool | None = None) -> np.ndarray:
    """float64 (n_trials,) scores of one stream in chunks of ``chunk`` releases (module docstring), as
    ``blackbox.implementation_scores``; on a ``scheduler`` the chunks are ``Client.map`` tasks."""
    chunk = check_param("chunk", chunk, COUNT)
    records, owner, n = population(design, split, hypothesis, stat.n_users)
    name = implementation_name(release)
    job = _Job(release, np.asarray(design.bank, dtype=np.float32), records, owner, n, mechanism, stat, bool(batched),
               name)
    sizes = [min(chunk, int(n_trials) - s) for s in range(0, int(n_trials), chunk)]
    gens = rng.spawn(len(sizes))
    show = (not batched) if show_progress is None else bool(show_progress)
    bar = progress(total=int(n_trials), desc=f"{name} {split} H{hypothesis}", unit="release") if show else None
    with bar if bar is not None else contextlib.nullcontext():
        if scheduler is None:
            done = ((i, _chunk(job, g, t)) for i, (g, t) in enumerate(zip(gens, sizes)))
        else:
            from distributed import as_completed

            [shared] = scheduler.scatter([job], broadcast=True, hash=False)
            futures = scheduler.map(_chunk, [shared] * len(sizes), gens, sizes, pure=False)
            index = {f.key: i for i, f in enumerate(futures)}
            done = ((index[f.key], f.result()) for f in as_completed(futures))
        parts = [None] * len(sizes)
        for i, part in done:
            parts[i] = part
            if bar is not None:
                bar.update(sizes[i])
        return np.concatenate(parts)


def check_keywords(given, accepted, call: str, aliases: dict | None = None) -> None:
    """TypeError for a keyword of ``given`` not in ``accepted`` of ``call``, naming the one likely meant."""
    accepted = sorted(accepted)
    for key in given:
        if key in accepted:
            continue
        guess = (aliases or {}).get(key) or closest(key, accepted)
        hint = f"did you mean {guess}=?" if guess else f"it takes {', '.join(accepted)}"
        raise TypeError(f"{call}() got {key}=, which it does not take: {hint}")


_DRY_USERS, _DRY_RECORDS, _DRY_BANK, _DRY_DIM = 3, 2, 16, 32


def dry_call(release, mechanism: MechanismConfig) -> None:
    """Call ``release`` (and ``release_batch``) once on a tiny seeded design (3 users of 2 records, 16-entry bank,
    d = 32), so errors about the function come before any world is built. Raises TypeError for a ``HistogramAdapter``
    whose function rejects its keywords (naming them, the signature and the fix); what the release raises, noted;
    ValueError for a wrong shape or non-finite output."""
    rng = np.random.default_rng(0)
    bank = rng.standard_normal((_DRY_BANK, _DRY_DIM)).astype(np.float32)
    records = rng.standard_normal((_DRY_USERS * _DRY_RECORDS, _DRY_DIM)).astype(np.float32)
    owner = np.repeat(np.arange(_DRY_USERS), _DRY_RECORDS).astype(np.int64)
    name = implementation_name(release)
    calls = [("release(...)", lambda: release(bank, records, owner, _DRY_USERS, mechanism, rng), (_DRY_BANK,))]
    if hasattr(release, "release_batch"):
        calls.append(("release_batch(...)", lambda: release.release_batch(
            bank, records, owner, _DRY_USERS, mechanism, rng, 2, np.arange(4)), (2, 4)))
    for form, call, shape in calls[0 if callable(release) else 1:]:
        try:
            y = call()
        except TypeError as exc:
            fn = getattr(release, "histogram_fn", None)
            if fn is not None and "argument" in str(exc):
                raise TypeError(_adapter_message(release, fn, exc)) from exc
            _note(exc, name, form)
            raise
        except Exception as exc:
            _note(exc, name, form)
            raise
        check_release_output(y, shape, name, form)


def _note(exc: BaseException, name: str, form: str) -> None:
    exc.add_note(f"raised by a dry call of {name}: {form} on a tiny design before any world was built; the kit calls "
                 f"release(bank float32 ({_DRY_BANK}, {_DRY_DIM}), records float32 ({_DRY_USERS * _DRY_RECORDS}, "
                 f"{_DRY_DIM}), owner int64 ({_DRY_USERS * _DRY_RECORDS},), n_users={_DRY_USERS}, "
                 "config=MechanismConfig, rng=numpy Generator) and expects a float (p,) histogram "
                 "(release_batch: (n_releases, |coords|))")


def _adapter_message(adapter, fn, exc: Exception) -> str:
    passed = list(adapter.settings.values())
    passed += [adapter.rng_arg] if adapter.rng_arg is not None else [adapter.seed_arg] if adapter.seed_arg else []
    try:
        sig = str(inspect.signature(fn))
    except (TypeError, ValueError):
        sig = "(…)"
    return (f"HistogramAdapter({adapter.name}) called {adapter.name} with keywords {passed} and it refused ({exc}); "
            f"its signature is {adapter.name}{sig}. Map the kit's settings onto its keywords with "
            f"HistogramAdapter({adapter.name}, settings={{'top_k': …, 'clip_norm': …, 'noise_multiplier': …, "
            f"'sample_rate': …}}) (fields it does not take left out) and name its generator keyword with rng_arg=… "
            f"(or rng_arg=None, seed_arg='…' for an integer seed, or global_seed=True)")


def pilot_seconds(release, design, mechanism: MechanismConfig, stat, *, releases: int = 64,
                  use_batch: bool | None = None) -> float:
    """Seconds per release of ``release`` on ``design``, measured on one chunk of ``releases`` H1 releases of the test
    split (×32 through ``release_batch``)."""
    batched = hasattr(release, "release_batch") if use_batch is None else bool(use_batch)
    n = int(releases) * (32 if batched else 1)  # a batch's fixed cost is amortised over its releases
    t0 = time.perf_counter()
    release_scores(release, design, mechanism, stat, "test", 1, n, np.random.default_rng(0), batched=batched,
                   chunk=n, show_progress=False)
    return (time.perf_counter() - t0) / n
