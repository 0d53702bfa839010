"""Canary designs for black-box implementation audits, built geometrically in the embedding space.

``concentrated``: the canary's records sit on a tight cluster of exactly k probes, far from everyone else, so
μ_eff = 1/σ under the specification (Eq. 20) and 1/(σC√k) without clipping. ``displacement`` (for
``pe.mutants.FixedSizeSample``): calibration and test users vote on a second cluster B (c ⊥ v, ‖c‖ = C), aux
users on both, so w = Σ̂⁻¹v (Eqs. 14, 31–35) leans towards v − c, the shift of a canary that displaces one c.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pe_kit.settings import COUNT, check_param

__all__ = ["ImplementationDesign", "concentrated_design", "displacement_design", "DESIGNS", "DESIGN_FOR_BUG",
           "design_for"]


@dataclass(frozen=True)
class ImplementationDesign:
    """What the auditor controls: ``bank`` (p, d), probe ``coords`` P, the ``canary``'s records and one (n_u, d)
    array per user of ``aux``, ``calibration``, ``test``; ``canary_position``: its row under H1
    (``audit.release_runner.canary_index``)."""

    name: str
    bank: np.ndarray
    coords: np.ndarray
    canary: np.ndarray
    aux: list
    calibration: list
    test: list
    info: dict = field(default_factory=dict)
    canary_position: object = "last"


def _info(design: str, **sizes) -> dict:
    """The design's ``info``: its name and sizes, checked (integers ≥ 1; n_calibration None: n_test, equal to it)."""
    from pe_kit.audit.trials import check_equal_populations

    if sizes["n_calibration"] is None:
        sizes["n_calibration"] = sizes["n_test"]
    for name, v in sizes.items():
        check_param(name, v, COUNT)
    check_equal_populations(int(sizes["n_calibration"]), int(sizes["n_test"]))  # distinct users, never resampled
    return {"design": design, **sizes}


def _background(rng: np.random.Generator, dim: int, bank_size: int, reserved: int):
    """Background bank rows (unit Gaussian directions) and the positions left for the clusters."""
    if bank_size < reserved + 8:
        raise ValueError(f"bank_size={bank_size} must be ≥ {reserved + 8} (the probe clusters need {reserved} "
                         "entries and the background at least 8)")
    bank = rng.normal(size=(bank_size, dim)).astype(np.float32)
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)
    positions = rng.choice(bank_size, size=reserved, replace=False)
    background = np.setdiff1d(np.arange(bank_size), positions)
    return bank, positions.astype(np.int64), background


def _cluster(rng, centre: np.ndarray, n: int, spread: float) -> np.ndarray:
    return (centre[None, :] + spread * rng.normal(size=(n, centre.size))).astype(np.float32)


def _natural_users(rng, bank, background, n_users: int, records: int, spread: float = 0.05) -> list:
    """Users whose records sit near random background entries (they never vote on a cluster)."""
    out = []
    for _ in range(n_users):
        anchors = bank[rng.choice(background, size=records)]
        out.append((anchors + spread * rng.normal(size=anchors.shape)).astype(np.float32))
    return out


def _centre(rng, dim: int, radius: float) -> np.ndarray:
    c = rng.normal(size=dim)
    return radius * c / np.linalg.norm(c)


def concentrated_design(rng: np.random.Generator, *, top_k: int = 5, dim: int = 16, bank_size: int = 128,
                        n_aux: int = 50, n_calibration: int | None = None, n_test: int = 50, records: int = 4,
                        canary_records: int = 8) -> ImplementationDesign:
    """The ``concentrated`` design (|P| = k); ``records`` per background user, ``canary_records`` the canary's m;
    n_calibration None: n_test. Raises ValueError on a size < 1, n_calibration ≠ n_test, or a bank too small for
    the cluster."""
    info = _info("concentrated", top_k=top_k, dim=dim, bank_size=bank_size, n_aux=n_aux, n_calibration=n_calibration,
                 n_test=n_test, records=records, canary_records=canary_records)
    bank, probes, background = _background(rng, dim, bank_size, top_k)
    a = _centre(rng, dim, 10.0)
    bank[probes] = _cluster(rng, a, top_k, 0.01)
    canary = _cluster(rng, a, canary_records, 0.001)
    users = {s: _natural_users(rng, bank, background, n, records)
             for s, n in (("aux", n_aux), ("calibration", info["n_calibration"]), ("test", n_test))}
    return ImplementationDesign("concentrated", bank, np.sort(probes), canary, users["aux"], users["calibration"],
                                users["test"], info)


def displacement_design(rng: np.random.Generator, *, top_k: int = 5, dim: int = 16, bank_size: int = 128,
                        n_aux: int = 50, n_calibration: int | None = None, n_test: int = 100, records: int = 4,
                        canary_records: int = 8) -> ImplementationDesign:
    """The ``displacement`` design (P = A ∪ B, |P| = 2k), as ``concentrated_design``; ``records`` must be even."""
    info = _info("displacement", top_k=top_k, dim=dim, bank_size=bank_size, n_aux=n_aux, n_calibration=n_calibration,
                 n_test=n_test, records=records, canary_records=canary_records)
    n_calibration = info["n_calibration"]
    if records % 2:
        raise ValueError(f"records={records} must be even: aux users put half their records on each cluster")
    bank, positions, background = _background(rng, dim, bank_size, 2 * top_k)
    pa, pb = positions[:top_k], positions[top_k:]
    a, b = _centre(rng, dim, 10.0), _centre(rng, dim, 10.0)
    while np.linalg.norm(a - b) < 5.0:
        b = _centre(rng, dim, 10.0)
    bank[pa], bank[pb] = _cluster(rng, a, top_k, 0.01), _cluster(rng, b, top_k, 0.01)
    canary = _cluster(rng, a, canary_records, 0.001)
    same = [_cluster(rng, b, records, 0.001) for _ in range(n_calibration + n_test)]
    aux = [np.concatenate([_cluster(rng, a, records // 2, 0.001), _cluster(rng, b, records // 2, 0.001)])
           for _ in range(n_aux)]
    return ImplementationDesign("displacement", bank, np.sort(positions), canary, aux, same[:n_calibration],
                                same[n_calibration:], {**info, "background": bool(len(background))})


DESIGNS = {"concentrated": concentrated_design, "displacement": displacement_design}

#: the design the auditor uses against each bug class (``pe.mutants`` names; others: ``concentrated``)
DESIGN_FOR_BUG = {"fixed_size_sample": "displacement"}


def design_for(implementation, rng: np.random.Generator, **sizes) -> ImplementationDesign:
    """The design for ``implementation`` (its ``name`` in ``DESIGN_FOR_BUG``, default ``concentrated``)."""
    name = DESIGN_FOR_BUG.get(getattr(implementation, "name", ""), "concentrated")
    return DESIGNS[name](rng, **sizes)
