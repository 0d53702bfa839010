"""One audit study on real data: users → embeddings → bank → frozen designs → ε_lower rows.

Glue between ``data``, ``embedding``, ``mechanism``, ``probes`` and ``audit`` (design.md "The flow").
A ``World`` holds everything that does not depend on the attack (split users' record embeddings,
the base bank, each record's nearest base entries); ``audit_design`` audits one frozen
``ProbeDesign`` against it and returns a tidy result row.
"""
from __future__ import annotations

import platform
from dataclasses import asdict, dataclass, field
from importlib import metadata

import numpy as np
import scipy.sparse as sp

from .audit import audit_canary
from .config import AuditConfig, MechanismConfig
from .data import Corpus, Splits, load_bank_texts, load_corpus, make_arm, split_users
from .embedding import Encoder
from .mechanism import NeighborIndex, build_neighbor_index, contributions, routes_with_probes
from .probes import ProbeDesign

__all__ = ["StudyConfig", "World", "build_world", "audit_design", "versions"]

SPLITS = ("aux", "calibration", "test")


@dataclass(frozen=True)
class StudyConfig:
    """Everything that fixes a study's data and bank (one row's provenance).

    Attributes:
        data: corpus path (None = bundled Blogs sample); fmt: loader (``auto``).
        arm: ``long`` or ``short`` (App. D).
        n_canary, n_aux, n_calibration, n_test: split sizes (paper: 40 = 8×5, 500, 500, 1000).
        bank: ``bankA`` (bundled label-only SmolLM2 bank), ``public`` (records of users in no split),
            or a path to a JSON Lines file with a ``text`` field.
        bank_size: p (8192). max_probes: r (64), the depth reserve of the neighbour index.
        model: encoder name/path; max_seq_length: token cap (None = model default).
        seed: seed of splits and bank sampling.
    """

    data: str | None = None
    fmt: str = "auto"
    arm: str = "long"
    n_canary: int = 5
    n_aux: int = 500
    n_calibration: int = 500
    n_test: int = 1000
    bank: str = "bankA"
    bank_size: int = 8192
    max_probes: int = 64
    model: str = "all-MiniLM-L6-v2"
    max_seq_length: int | None = None
    record_cap: int = 64
    seed: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class World:
    """Attack-independent state of a study.

    Attributes:
        config: the ``StudyConfig``.
        corpus: the arm's users; splits: disjoint user ids.
        bank_texts: list of p str; bank: float32 (p, d).
        records: per split name (``aux``, ``calibration``, ``test``, ``canary``): float32 (n_records, d)
            embeddings, ``owner`` int (n_records,) user row, ``ids`` user ids, ``index`` NeighborIndex.
        encoder: the ``Encoder`` used everywhere (probes must use it too).
        bank_info: how the bank was made.
    """

    config: StudyConfig
    corpus: Corpus
    splits: Splits
    bank_texts: list[str]
    bank: np.ndarray
    records: dict = field(default_factory=dict)
    encoder: Encoder | None = None
    bank_info: dict = field(default_factory=dict)

    def users(self, split: str) -> list:
        by_id = self.corpus.by_id()
        return [by_id[i] for i in getattr(self.splits, split)]

    def base_contributions(self, split: str, mechanism: MechanismConfig) -> sp.csr_matrix:
        """(n_users, p) contributions of a split on the unchanged bank."""
        return self.contributions(split, mechanism, None)

    def contributions(self, split: str, mechanism: MechanismConfig, design: ProbeDesign | None) -> sp.csr_matrix:
        """(n_users, p) contributions of a split's users on the bank after ``design``'s probes."""
        rec = self.records[split]
        probes = None if design is None else design.probe_embeddings
        positions = None if design is None else design.positions
        routes = routes_with_probes(rec["index"], rec["emb"], probes, positions, mechanism.top_k)
        return contributions(routes, rec["owner"], len(rec["ids"]), self.bank.shape[0], mechanism.clip_norm)


def _stack(users, encoder: Encoder, desc: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    texts = [t for u in users for t in u.texts]
    owner = np.repeat(np.arange(len(users)), [len(u.texts) for u in users])
    return encoder.encode(texts, desc=desc), owner, [u.user_id for u in users]


def build_world(config: StudyConfig, encoder: Encoder | None = None, mechanism: MechanismConfig | None = None) -> World:
    """Load, split, embed and index everything a study needs (the expensive, cached part).

    Raises:
        ValueError / DataError: on unreadable data, too few users, or a bank smaller than ``bank_size``.
    """
    mechanism = mechanism or MechanismConfig(record_cap=config.record_cap)
    encoder = encoder or Encoder(config.model, max_seq_length=config.max_seq_length)
    corpus = make_arm(load_corpus(config.data, config.fmt, record_cap=config.record_cap), config.arm,
                      config.record_cap)
    splits = split_users(corpus, config.n_canary, config.n_aux, config.n_calibration, config.n_test,
                         seed=config.seed, canary_records=config.record_cap)
    bank_texts, bank_info = _bank_texts(config, corpus, splits)
    bank = encoder.encode(bank_texts, desc="bank")
    world = World(config, corpus, splits, bank_texts, bank, encoder=encoder, bank_info=bank_info)
    depth = mechanism.top_k + config.max_probes
    for split in SPLITS + ("canary",):
        emb, owner, ids = _stack(world.users(split), encoder, desc=split)
        world.records[split] = {"emb": emb, "owner": owner, "ids": ids,
                                "index": build_neighbor_index(emb, bank, depth) if len(emb) else None}
    return world


def _bank_texts(config: StudyConfig, corpus: Corpus, splits: Splits) -> tuple[list[str], dict]:
    rng = np.random.default_rng([config.seed, 1])
    if config.bank == "public":
        by_id = corpus.by_id()
        texts = sorted({t for uid in splits.public for t in by_id[uid].texts})
        info = {"bank": "public", "public_users": len(splits.public), "available": len(texts)}
    else:
        texts, info = load_bank_texts(None if config.bank == "bankA" else config.bank)
        info = {"bank": config.bank, **info}
    if len(texts) < config.bank_size:
        raise ValueError(f"bank {config.bank!r} has {len(texts)} distinct texts but bank_size={config.bank_size}; "
                         "lower bank_size or supply more candidates")
    chosen = np.sort(rng.choice(len(texts), size=config.bank_size, replace=False))
    return [texts[i] for i in chosen], {**info, "bank_size": config.bank_size}


def canary_contribution(world: World, design: ProbeDesign, mechanism: MechanismConfig) -> np.ndarray:
    """The canary's full clipped contribution (p,) on the design's bank (Eq. 1)."""
    emb = design.canary_embeddings
    index = build_neighbor_index(emb, world.bank, mechanism.top_k + world.config.max_probes)
    routes = routes_with_probes(index, emb, design.probe_embeddings, design.positions, mechanism.top_k)
    c = contributions(routes, np.zeros(len(emb), dtype=np.int64), 1, world.bank.shape[0], mechanism.clip_norm)
    return np.asarray(c.todense()).ravel()


def audit_design(world: World, design: ProbeDesign, mechanism: MechanismConfig, audit: AuditConfig,
                 rng: np.random.Generator) -> dict:
    """Audit one frozen design on the world's aux/calibration/test users; returns a tidy result row.

    The inspected coordinates P are the probe positions (active variants) or the canary's natural
    top-k support (``ordinary``). The row carries every setting, the seed-free provenance of the
    design, the ``AuditResult`` fields and package versions.
    """
    v_full = canary_contribution(world, design, mechanism)
    coords = design.positions if design.positions is not None else np.flatnonzero(v_full)
    contribs = {s: world.contributions(s, mechanism, design) for s in SPLITS}
    result = audit_canary(v_full, np.sort(np.asarray(coords)), contribs["aux"], contribs["calibration"],
                          contribs["test"], mechanism, audit, rng)
    row = {"variant": design.variant, "canary_id": design.canary_id,
           "canary_votes_on_P": float(v_full[np.asarray(coords)].sum() / max(v_full.sum(), 1e-300)),
           **result.as_row(), **{f"mech_{k}": v for k, v in mechanism.as_dict().items()},
           **{f"audit_{k}": v for k, v in audit.as_dict().items()}, "gamma": audit.gamma,
           **{f"study_{k}": v for k, v in world.config.as_dict().items()},
           "bank_source": world.bank_info.get("bank"), **versions()}
    return row


def versions() -> dict:
    """Versions of Python and the packages that shape the numbers (for every result row)."""
    out = {"python": platform.python_version()}
    for pkg in ("pe_kit", "numpy", "scipy", "opacus", "sentence-transformers", "torch"):
        try:
            out[f"version_{pkg}"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[f"version_{pkg}"] = None
    return out


def make_design(world: World, variant: str, canary_slot: int, rng: np.random.Generator) -> ProbeDesign:
    """Build the frozen ``ProbeDesign`` of ``variant`` for the ``canary_slot``-th canary of the study.

    Real-canary variants use ``world.splits.canary[canary_slot]``; nonce variants draw a fresh synthetic
    canary from ``rng``. Raises ValueError for an unknown variant or slot.
    """
    from .probes import VARIANTS, design_nonce, design_ordinary

    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r} is unknown; use one of {VARIANTS}")
    if variant.startswith("nonce"):
        if variant == "nonce":
            return design_nonce(world.encoder, world.bank.shape[0], rng, records=world.config.record_cap,
                                r=world.config.max_probes)
    else:
        if not 0 <= canary_slot < len(world.splits.canary):
            raise ValueError(f"canary_slot={canary_slot} out of range: the study has {len(world.splits.canary)} "
                             "canaries (raise StudyConfig.n_canary)")
        user = world.corpus.by_id()[world.splits.canary[canary_slot]]
        if variant == "ordinary":
            return design_ordinary(user.user_id, user.texts, world.encoder.encode(user.texts, desc="canary"))
    raise NotImplementedError(f"variant {variant!r} is not implemented yet")
