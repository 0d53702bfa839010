"""A design battery: variants of one black-box design, one axis at a time, that vary what an implementation may
treat specially (one design sees a bug only where its canary sits):

* ``position``: the canary's user row under H1: ``first``, ``last`` (the base) or a seeded ``random`` row;
* ``records``: ``1`` (its record with the most top-k votes on P), the population's ``median`` (records repeated
  cyclically) or the ``cap`` m (m copies of the 1-record canary's record: the same specified contribution, but
  record-level code sees m records, ``pe.mutants`` ``RecordLevelSampling``);
* ``population``: the first N calibration and test users each, down to 1, or up to ``x4`` = 4N repeated
  cyclically (``pe.mutants`` ``NoiseShrinksWithUsers``);
* ``bank``: padded to ``large_bank`` entries nobody routes to, probes moved to its tail (``with_large_bank``);
* ``sensitivity``: the 1-record canary at q = 1, δ = 0.1 (``SENSITIVITY_CLAIM``), for bugs in the sensitivity
  (``pe.mutants`` ``ClipAtTwiceC``): a record's h̄ has norm 1/√k, the largest possible (Eq. 1), so clipping at 2C
  doubles it when 1/√k ≥ 2C, which the claimed q's subsampling hides.

The audit recomputes each variant's statistic under the specification (Eqs. 14, 31–35), so each is a valid test of
the same claim (``sensitivity``: of its ``info["claim"]``).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pe_kit.attack.bug_canaries import ImplementationDesign
from pe_kit.settings import MechanismConfig
from pe_kit.pe.mechanism import topk_routes

__all__ = ["battery_designs", "check_design", "with_canary_records", "with_population",
           "with_large_bank", "with_sensitivity_claim", "DEFAULT_AXES", "LARGE_BANK", "SENSITIVITY_CLAIM"]

#: the paper's p: probes moved past 4,096 (a common power of two in buggy code) on a bank of 8,192
LARGE_BANK = 8192
#: the settings the ``sensitivity`` design is audited at (``audit.battery.design_claim``)
SENSITIVITY_CLAIM = {"sample_rate": 1.0, "delta": 0.1}
#: the default axes (one variant per value, the base excluded): position, records, population, bank, sensitivity
DEFAULT_AXES = {"position": ("first", "random"), "records": (1, "median", "cap"), "population": (1, "x4"),
                "bank": ("large",), "sensitivity": ("q=1",)}
#: the one value of a single-choice axis
_ONLY = {"bank": "large", "sensitivity": "q=1"}


def _renamed(design, axis: str, value, **changes) -> ImplementationDesign:
    info = {**dict(getattr(design, "info", {}) or {}), "axis": axis, "setting": str(value)}
    fields = {f.name: getattr(design, f.name, None) for f in dataclasses.fields(ImplementationDesign)}
    fields.update(name=f"{design.name}|{axis}={value}", info=info, **changes)
    if fields["canary_position"] is None:
        fields["canary_position"] = "last"
    return ImplementationDesign(**fields)


def with_canary_records(design, n_records, mechanism: MechanismConfig) -> ImplementationDesign:
    """The design with an ``n_records``-record canary (int ≥ 1, ``"median"`` or ``"cap"``; else ValueError)."""
    canary = np.asarray(design.canary, dtype=np.float32)
    if n_records == "cap":
        m = int(mechanism.record_cap)
    elif n_records == "median":
        m = max(1, int(np.median([len(u) for u in list(design.calibration) + list(design.test)])))
    elif isinstance(n_records, (int, np.integer)) and n_records >= 1:
        m = int(n_records)
    else:
        raise ValueError(f"n_records={n_records!r} must be an integer ≥ 1, 'median' or 'cap'")
    if m == 1 or n_records == "cap":  # the record that casts the most top-k votes on P (ties → the first)
        hits = np.isin(topk_routes(canary, np.asarray(design.bank), mechanism.top_k), design.coords).sum(axis=1)
        new = canary[[int(np.argmax(hits))] * m]
    else:
        new = canary[np.arange(m) % len(canary)]
    return _renamed(design, "records", n_records, canary=new)


def with_population(design, n_users) -> ImplementationDesign:
    """The design with ``n_users`` calibration and test users, repeated cyclically beyond N; ``"x<f>"`` is f·N.
    Raises ValueError unless an integer ≥ 1 or ``"x<f>"`` with an integer f ≥ 1."""
    n = min(len(design.test), len(design.calibration))
    label = n_users
    if isinstance(n_users, str) and n_users[:1] == "x" and n_users[1:].isdigit():
        n_users = n * int(n_users[1:])
    if isinstance(n_users, str) or int(n_users) != n_users or n_users < 1:
        raise ValueError(f"n_users={label!r} must be an integer ≥ 1 or 'x<f>' (f times the design's {n} users)")
    k = int(n_users)
    pos = design.canary_position if isinstance(design.canary_position, str) else min(int(design.canary_position), k)
    rows = np.arange(k) % n
    return _renamed(design, "population", k, calibration=[design.calibration[i] for i in rows],
                    test=[design.test[i] for i in rows], canary_position=pos)


def with_large_bank(design, size: int = LARGE_BANK) -> ImplementationDesign:
    """The design on a bank of ``max(size, p)`` entries with the probes at its tail; padding rows lie at 10·R + 10
    along base directions (R: the largest norm), so no record routes to them. Raises ValueError on size < |P| + 1."""
    bank = np.asarray(design.bank, dtype=np.float32)
    coords = np.asarray(design.coords, dtype=np.int64)
    size = max(int(size), bank.shape[0])
    if size < coords.size + 1:
        raise ValueError(f"size={size} must exceed the {coords.size} probe coordinates")
    others = np.setdiff1d(np.arange(bank.shape[0]), coords)
    users = [np.asarray(design.canary)] + [np.asarray(u) for s in ("aux", "calibration", "test")
                                           for u in getattr(design, s)]
    radius = max(float(np.linalg.norm(x, axis=1).max()) for x in [bank] + [u for u in users if len(u)])
    src = bank[np.arange(size - bank.shape[0]) % bank.shape[0]].astype(np.float64)
    norms = np.linalg.norm(src, axis=1, keepdims=True)
    pad = (src / np.where(norms > 0, norms, 1.0) * (10 * radius + 10)).astype(np.float32)
    new = np.concatenate([bank[others], pad, bank[coords]])
    return _renamed(design, "bank", size, bank=new, coords=np.arange(size - coords.size, size, dtype=np.int64))


def with_sensitivity_claim(design, mechanism: MechanismConfig) -> ImplementationDesign:
    """The 1-record canary audited at ``SENSITIVITY_CLAIM`` (in ``info["claim"]``)."""
    d = _renamed(design, "sensitivity", "q=1", canary=with_canary_records(design, 1, mechanism).canary)
    return dataclasses.replace(d, info={**d.info, "claim": dict(SENSITIVITY_CLAIM)})


def battery_designs(design, mechanism: MechanismConfig, rng: np.random.Generator, *, axes: dict | None = None,
                    large_bank: int = LARGE_BANK) -> list[ImplementationDesign]:
    """The base design, then one variant per value of ``axes`` (default ``DEFAULT_AXES``; values equal to the base's
    skipped), each with ``axis`` and ``setting`` in its ``info``; ``rng`` draws the ``random`` position only.
    Raises ValueError on an unknown axis or value."""
    axes = DEFAULT_AXES if axes is None else axes
    base = _renamed(design, "base", "base")
    base = dataclasses.replace(base, name=str(design.name))
    out = [base]
    n = len(base.test)
    for axis, values in axes.items():
        for v in values:
            if axis in _ONLY and v != _ONLY[axis]:
                raise ValueError(f"{axis} value {v!r} must be {_ONLY[axis]!r}")
            if axis == "position":
                if v not in ("first", "last", "random"):
                    raise ValueError(f"position value {v!r} must be 'first', 'last' or 'random'")
                if v != "last":
                    pos = int(rng.integers(0, n + 1)) if v == "random" else v
                    out.append(_renamed(base, "position", v, canary_position=pos))
            elif axis == "records":
                d = with_canary_records(base, v, mechanism)
                if v == 1 or not np.array_equal(d.canary, base.canary):
                    out.append(d)
            elif axis == "population":
                d = with_population(base, v)
                if len(d.test) != n:
                    out.append(d)
            elif axis == "bank":
                out.append(with_large_bank(base, large_bank))
            elif axis == "sensitivity":
                out.append(with_sensitivity_claim(base, mechanism))
            else:
                raise ValueError(f"axis {axis!r} is unknown; use {sorted(DEFAULT_AXES)}")
    return out


def check_design(design, mechanism: MechanismConfig) -> ImplementationDesign:
    """The design of the implementation checks: one canary record (its clipping binds hardest), one other user, on the
    ``LARGE_BANK`` bank."""
    return dataclasses.replace(with_large_bank(with_population(with_canary_records(design, 1, mechanism), 1)),
                               name=f"{design.name}|check")
