"""Real-text black-box designs: a study ``World`` and a frozen Table-1 ``ProbeDesign`` (App. B) → the bank with the
probes at their positions (Alg. A.1 line 11), P = the probe positions (``ordinary``: the canary's natural top-k
support), the canary's record embeddings and each split's users. Both arguments are duck-typed.
"""
from __future__ import annotations

import numpy as np

from pe_kit.attack.bug_canaries import ImplementationDesign
from pe_kit.settings import MechanismConfig
from pe_kit.pe.mechanism import topk_routes
from pe_kit.pe.release_protocol import user_records

__all__ = ["release_design", "world_users"]

_SPLITS = ("aux", "calibration", "test")


def world_users(world, split: str) -> list:
    """A world's split as per-user float32 (n_u, d) record embeddings; raises ValueError for an unknown split."""
    records = getattr(world, "records", None) or {}
    if split not in records:
        raise ValueError(f"world.records has no split {split!r} (it has {sorted(records)}): pass a "
                         "pe_kit.study.world.World built by build_world")
    rec = records[split]
    emb = np.asarray(rec["emb"], dtype=np.float32)
    return user_records(emb, np.asarray(rec["owner"], dtype=np.int64), len(rec["ids"]))


def release_design(world, design, mechanism: MechanismConfig | None = None, *,
                   name: str | None = None) -> ImplementationDesign:
    """The black-box ``ImplementationDesign`` of one study canary; ``mechanism`` gives k for ``ordinary``; ``name``
    defaults to ``"<variant>:<canary_id>"``. Raises ValueError on probes and positions of different lengths,
    positions outside the bank, embeddings of another dimension, or calibration and test splits of different sizes."""
    mechanism = mechanism or MechanismConfig()
    bank = np.array(world.bank, dtype=np.float32, copy=True)
    canary = np.asarray(design.canary_embeddings, dtype=np.float32)
    if canary.ndim != 2 or canary.shape[1] != bank.shape[1]:
        raise ValueError(f"design.canary_embeddings has shape {canary.shape}; expected (m, {bank.shape[1]}) like the "
                         "world's bank: embed the canary with the world's encoder")
    positions = getattr(design, "positions", None)
    if positions is not None:
        positions = np.asarray(positions, dtype=np.int64).ravel()
        probes = np.asarray(design.probe_embeddings, dtype=np.float32)
        if probes.shape != (positions.size, bank.shape[1]):
            raise ValueError(f"design.probe_embeddings has shape {probes.shape}; expected ({positions.size}, "
                             f"{bank.shape[1]}) (one per position)")
        if positions.min() < 0 or positions.max() >= bank.shape[0]:
            raise ValueError(f"design.positions must lie in [0, {bank.shape[0]}) (the world's bank)")
        bank[positions] = probes
        coords = np.sort(positions)
    else:  # ordinary: the canary's natural top-k support on the unchanged bank
        coords = np.unique(topk_routes(canary, bank, mechanism.top_k))
    users = {s: world_users(world, s) for s in _SPLITS}
    if len(users["calibration"]) != len(users["test"]):
        raise ValueError(f"world has {len(users['calibration'])} calibration and {len(users['test'])} test users: the "
                         "black-box statistic needs n_calibration = n_test (StudyConfig)")
    variant, cid = str(getattr(design, "variant", "")), str(getattr(design, "canary_id", ""))
    info = {"variant": variant, "canary_id": cid, "bank_size": int(bank.shape[0]), "n_coords": int(coords.size),
            "canary_records": int(canary.shape[0]), **{f"n_{s}": len(users[s]) for s in _SPLITS}}
    return ImplementationDesign(name or f"{variant}:{cid}", bank, coords, canary, users["aux"], users["calibration"],
                                users["test"], info)
