"""One audit study on real data: users → embeddings → bank → frozen designs → ε_lower rows.

A ``World`` holds what does not depend on the attack (split users' record embeddings, the base bank, each
record's nearest base entries); ``audit_design`` audits one frozen ``ProbeDesign`` into a tidy row.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from pe_kit.attack.variants import (ALL_VARIANTS, ProbeDesign, design_exact, design_nonce, design_ordinary,
                                    design_paraphrase, design_selected, nonce_canary_and_pool, replacement_positions,
                                    unknown_variant, variant_objective)
from pe_kit.audit.canary import _audit_canary
from pe_kit.audit.trials import check_equal_populations
from pe_kit.code_hash import versions
from pe_kit.settings import AuditConfig, MechanismConfig, WorldSettings
from pe_kit.settings.sections import row_columns
from pe_kit.data.corpus_cache import cached_corpus
from pe_kit.data.loaders import Corpus
from pe_kit.data.splits import Splits, empty_arm_message, make_arm, split_users
from pe_kit.pe.mechanism import build_neighbor_index, canary_votes, contributions, routes_with_probes
from pe_kit.study.pools import paraphrase_pool
from pe_kit.text.encoder import Encoder

__all__ = ["SPLITS", "StudyConfig", "World", "input_digests", "check_bank_b",
           "bank_reserved_users", "study_splits", "world_fingerprint", "build_world", "canary_contribution",
           "audit_design", "aux_pool_covariance", "make_design"]

SPLITS = ("aux", "calibration", "test")


@dataclass(frozen=True)
class StudyConfig(WorldSettings):
    """Everything that fixes a study's data and bank: the fields of ``pe_kit.settings.WorldSettings`` (each
    documented there); calibration and test have equal sizes and r = ``max_probes`` ≤ p. Raises ValueError naming a
    field of the wrong type or range and the accepted values."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_equal_populations(self.n_calibration, self.n_test)
        if self.max_probes > self.bank_size:
            raise ValueError(f"max_probes={self.max_probes} > bank_size={self.bank_size}: the r probes are bank "
                             f"entries; lower max_probes (e.g. {min(64, self.bank_size)}) or raise bank_size")

    def as_dict(self) -> dict:
        """Plain dict of the fields that fix the world (``on_error``, the loader's policy, excluded)."""
        d = asdict(self)
        d.pop("on_error")
        return d


@dataclass
class World:
    """Attack-independent state of a study: the base ``bank`` ((p, d)), ``records`` per split (``emb``, ``owner``
    user rows, user ``ids``, ``index``: the records' ``NeighborIndex`` on the bank), ``fingerprint``
    (:func:`world_fingerprint`) and ``truncation`` (``pe_kit.text.tokens.truncation_report``; empty for a
    hand-built world)."""

    config: StudyConfig
    corpus: Corpus
    splits: Splits
    bank_texts: list[str]
    bank: np.ndarray
    records: dict = field(default_factory=dict)
    encoder: Encoder | None = None
    bank_info: dict = field(default_factory=dict)
    fingerprint: str = ""
    truncation: dict = field(default_factory=dict)

    def users(self, split: str) -> list:
        by_id = self.corpus.by_id()
        return [by_id[i] for i in getattr(self.splits, split)]

    def contributions(self, split: str, mechanism: MechanismConfig, design: ProbeDesign | None) -> sp.csr_matrix:
        """(n_users, p) contributions of a split's users on the bank after ``design``'s probes."""
        rec = self.records[split]
        probes = None if design is None else design.probe_embeddings
        positions = None if design is None else design.positions
        routes = routes_with_probes(rec["index"], rec["emb"], probes, positions, mechanism.top_k)
        return contributions(routes, rec["owner"], len(rec["ids"]), self.bank.shape[0], mechanism.clip_norm)


def input_digests(config: StudyConfig) -> dict:
    """Digests of the files a study reads: ``data``, ``bank_file`` (None for ``public`` and generated banks) and
    ``model``. Raises FileNotFoundError for a missing file; ValueError for ``bankB`` before its file ships."""
    from pe_kit.cache import file_digest
    from pe_kit.data.loaders import check_path, default_bank_b_path, default_bank_path, default_data_path
    from pe_kit.text.encoder import model_fingerprint

    bank = config.bank
    check_bank_b(config)
    shipped = {"bankA": default_bank_path(), "bankB": default_bank_b_path()}
    bank_path = shipped.get(bank) or (bank[5:] if bank.startswith("file:") else bank)
    bank_digest = None
    if bank in shipped or bank.startswith("file:") or (bank not in ("public", "llm-label", "llm-icl")
                                                       and os.path.isfile(bank_path)):
        bank_digest = file_digest(bank_path)
    return {"data": file_digest(check_path(config.data) if config.data is not None else default_data_path()),
            "bank_file": bank_digest, "model": model_fingerprint(config.model)}


def check_bank_b(config: StudyConfig) -> None:
    """ValueError (``bank_b_missing_message``) for ``bank="bankB"`` while its file is not shipped."""
    from pe_kit.data.loaders import default_bank_b_path
    from pe_kit.text.banks import bank_b_missing_message

    if config.bank == "bankB" and not default_bank_b_path().is_file():
        raise ValueError(bank_b_missing_message())


def bank_reserved_users(bank: str) -> frozenset[str]:
    """User ids a world on ``bank`` keeps out of its private splits: the example authors of ``bankB`` or of any bank
    file whose rows carry ``examples``. Raises DataError for a malformed row."""
    from pe_kit.data.loaders import bank_b_authors, default_bank_b_path, has_examples
    from pe_kit.text.banks import BANK_KINDS

    if bank == "bankB":
        path = default_bank_b_path()
    elif bank in BANK_KINDS:
        return frozenset()
    else:
        path = Path(bank[len("file:"):] if bank.startswith("file:") else bank)
    if not has_examples(path):
        return frozenset()
    return bank_b_authors(path)


def study_splits(config: StudyConfig, corpus: Corpus) -> Splits:
    """The seeded splits of a study (App. D): canaries with exactly ``record_cap`` records, the
    :func:`bank_reserved_users` of its bank kept public."""
    return split_users(corpus, config.n_canary, config.n_aux, config.n_calibration, config.n_test, seed=config.seed,
                       canary_records=config.record_cap, reserved=bank_reserved_users(config.bank))


def world_fingerprint(config: StudyConfig, bank_texts, encoder: Encoder | None = None) -> str:
    """Content key (64 hex) of a ``World``: settings, :func:`input_digests`, bank texts and encoder identity."""
    from pe_kit.cache import content_hash

    enc = encoder.model_id if encoder is not None else None
    reserved = sorted(bank_reserved_users(config.bank))
    extra = (content_hash(reserved),) if reserved else ()
    return content_hash("world/v1", config.as_dict(), input_digests(config), content_hash(list(bank_texts)), enc,
                        *extra)


def _stack(users, encoder: Encoder, desc: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    texts = [t for u in users for t in u.texts]
    owner = np.repeat(np.arange(len(users)), [len(u.texts) for u in users])
    return encoder.encode(texts, desc=desc), owner, [u.user_id for u in users]


def build_world(config: StudyConfig, encoder: Encoder | None = None, mechanism: MechanismConfig | None = None) -> World:
    """Load, split, embed and index a study; ValueError / DataError for bad data, too few users or a small bank."""
    mechanism = mechanism or MechanismConfig(record_cap=config.record_cap)
    encoder = encoder or Encoder(config.model, max_seq_length=config.max_seq_length)
    corpus, splits = _arm_splits(config)
    bank_texts, bank_info = _bank_texts(config, corpus, splits)
    bank = encoder.encode(bank_texts, desc="bank")
    world = World(config, corpus, splits, bank_texts, bank, encoder=encoder, bank_info=bank_info,
                  fingerprint=world_fingerprint(config, bank_texts, encoder))
    depth = mechanism.top_k + config.max_probes
    for split in SPLITS + ("canary",):
        emb, owner, ids = _stack(world.users(split), encoder, desc=split)
        world.records[split] = {"emb": emb, "owner": owner, "ids": ids,
                                "index": build_neighbor_index(emb, bank, depth) if len(emb) else None}
    world.truncation = _truncation(world)
    return world


def _arm_splits(config: StudyConfig) -> tuple[Corpus, Splits]:
    """The study's data arm and its seeded splits (bank B's file checked before the corpus is read)."""
    check_bank_b(config)
    loaded = cached_corpus(config.data, config.fmt, record_cap=config.record_cap, on_error=config.on_error)
    corpus = make_arm(loaded, config.arm, config.record_cap)
    if not corpus.users:
        raise ValueError(empty_arm_message(loaded, config.arm, config.record_cap))
    return corpus, study_splits(config, corpus)


def _truncation(world: World) -> dict:
    from pe_kit.text.tokens import truncation_report

    records = [t for split in SPLITS + ("canary",) for u in world.users(split) for t in u.texts]
    enc = world.encoder
    try:
        return truncation_report({"records": records, "bank": world.bank_texts}, enc.model, enc.max_seq_length)
    except (OSError, ValueError, ImportError) as exc:  # a model without a local tokenizer
        import warnings

        warnings.warn(f"cannot count truncated texts for model {enc.model!r}: {exc}", stacklevel=3)
        return {"token_cap": None}


def _bank_texts(config: StudyConfig, corpus: Corpus, splits: Splits) -> tuple[list[str], dict]:
    """The study's base bank texts and provenance (``pe_kit.text.banks.make_bank``, seed [seed, 1])."""
    from pe_kit.text.banks import make_bank

    bank = make_bank(config.bank, config.bank_size, np.random.default_rng([config.seed, 1]), corpus=corpus,
                     splits=splits)
    return list(bank.texts), dict(bank.info)


def canary_contribution(world: World, design: ProbeDesign, mechanism: MechanismConfig) -> np.ndarray:
    """The canary's full clipped contribution (p,) on the design's bank (Eq. 1)."""
    return canary_votes(design.canary_embeddings, world.bank, design.probe_embeddings, design.positions, mechanism)[1]


def audit_design(world: World, design: ProbeDesign, mechanism: MechanismConfig, audit: AuditConfig,
                 rng: np.random.Generator) -> dict:
    """Audit one frozen design on the world's aux/calibration/test users into a tidy row (settings, design
    provenance, ``_audit_canary``'s row, versions); P is the probe positions, or ``ordinary``'s top-k support."""
    v_full = canary_contribution(world, design, mechanism)
    coords = design.positions if design.positions is not None else np.flatnonzero(v_full)
    contribs = {s: world.contributions(s, mechanism, design) for s in SPLITS}
    result = _audit_canary(v_full, np.sort(np.asarray(coords)), contribs["aux"], contribs["calibration"],
                          contribs["test"], mechanism, audit, rng)
    return {"variant": design.variant, "canary_id": design.canary_id,
            "canary_votes_on_P": float(v_full[np.asarray(coords)].sum() / max(v_full.sum(), 1e-300)),
            **result.row, **row_columns("mech", mechanism), **row_columns("audit", audit), "gamma": audit.gamma,
            **row_columns("study", world.config),
            "bank_source": world.bank_info.get("bank"), **world.truncation, **versions(),
            **{k: design.info[k] for k in ("pool_generator", "pool_source", "beyond_paper") if k in design.info}}


def aux_pool_covariance(world: World, pool_embeddings: np.ndarray, positions: np.ndarray,
                        mechanism: MechanismConfig, audit: AuditConfig | None = None) -> np.ndarray:
    """``attack.selection.pool_covariance`` (Alg. B.1 line 6) from the world's aux users, N = the test split size."""
    from pe_kit.attack.selection import pool_covariance

    audit = audit or AuditConfig()
    aux = world.records["aux"]
    return pool_covariance(aux["index"], aux["emb"], aux["owner"], len(aux["ids"]), pool_embeddings, positions,
                           mechanism, n_users=len(world.splits.test), shrinkage=audit.shrinkage, ridge=audit.ridge)


def make_design(world: World, variant: str, canary_slot: int, rng: np.random.Generator, *,
                mechanism: MechanismConfig | None = None, audit: AuditConfig | None = None, generator=None,
                pool_size: int = 512, r: int | None = None) -> ProbeDesign:
    """The frozen ``ProbeDesign`` of ``variant`` (Table 1, App. B; ``attack.variants``) for canary
    ``world.splits.canary[canary_slot]``, or a synthetic canary drawn from ``rng`` for nonce variants. ``r``
    (default ``max_probes``) positions are reserved; ``generator``, ``pool_size``: the paraphrase pool
    (``pools.paraphrase_pool``). Raises ValueError: unknown variant, slot out of range, r > max_probes,
    r > pool_size, or m > max_probes for ``exact``."""
    if variant not in ALL_VARIANTS:
        raise unknown_variant(variant, ALL_VARIANTS)
    mechanism = mechanism or MechanismConfig(record_cap=world.config.record_cap)
    r = world.config.max_probes if r is None else int(r)
    if not 1 <= r <= world.config.max_probes:
        raise ValueError(f"r={r} must lie in [1, StudyConfig.max_probes={world.config.max_probes}] (the neighbour "
                         "index depth); raise max_probes")
    if variant not in ("ordinary", "exact", "composed-mu_eff") and r > pool_size:
        raise ValueError(f"r={r} probes cannot come from a pool of pool_size={pool_size}; raise pool_size")
    p = world.bank.shape[0]
    if variant == "nonce":
        return design_nonce(world.encoder, p, rng, records=world.config.record_cap, pool_size=pool_size, r=r)
    if variant.startswith("nonce"):
        canary, pool = nonce_canary_and_pool(world.config.record_cap, pool_size, rng)
        positions = replacement_positions(p, r, rng)
        emb = world.encoder.encode(canary + pool, desc="nonce")
        return _selected(world, variant, f"nonce-{int(rng.integers(1 << 31))}", canary, emb[:len(canary)], pool,
                         emb[len(canary):], positions, mechanism, audit, {"canary": "nonce"})
    if not 0 <= canary_slot < len(world.splits.canary):
        raise ValueError(f"canary_slot={canary_slot} out of range: the study has {len(world.splits.canary)} "
                         "canaries (raise StudyConfig.n_canary)")
    user = world.corpus.by_id()[world.splits.canary[canary_slot]]
    rec = world.records["canary"]
    c_emb = rec["emb"][rec["owner"] == rec["ids"].index(user.user_id)]
    if variant == "ordinary":
        return design_ordinary(user.user_id, user.texts, c_emb)
    if variant == "exact":
        if len(user.texts) > world.config.max_probes:
            raise ValueError(f"exact needs one probe per record: {len(user.texts)} records > max_probes="
                             f"{world.config.max_probes}; raise max_probes")
        return design_exact(user.user_id, user.texts, c_emb, replacement_positions(p, len(user.texts), rng))
    positions = replacement_positions(p, r, rng)
    if variant == "composed-mu_eff":
        from pe_kit.attack.composed_probes import AuxBackground, design_composed

        aux = world.records["aux"]
        background = AuxBackground(aux["index"], aux["emb"], aux["owner"], len(aux["ids"]), len(world.splits.test))
        return design_composed(world.encoder, user.user_id, user.texts, c_emb, world.bank, positions, mechanism,
                               background, rng, audit)
    texts, sources, pool_emb, info = paraphrase_pool(world, user, pool_size, generator)
    if variant == "paraphrase":
        return design_paraphrase(user.user_id, user.texts, c_emb, texts, pool_emb, sources, positions, rng, info)
    return _selected(world, variant, user.user_id, user.texts, c_emb, texts, pool_emb, positions, mechanism, audit,
                     info)


def _selected(world: World, variant: str, canary_id: str, canary_texts, c_emb, pool_texts, pool_emb, positions,
              mechanism: MechanismConfig, audit: AuditConfig | None, info: dict) -> ProbeDesign:
    """Alg. B.1 on a pool (``design_selected``), J_μeff with :func:`aux_pool_covariance`."""
    mu = variant_objective(variant) == "mu_eff"
    sigma = aux_pool_covariance(world, pool_emb, positions, mechanism, audit) if mu else None
    return design_selected(variant, canary_id, canary_texts, c_emb, pool_texts, pool_emb, world.bank, positions,
                           mechanism.top_k, sigma, info=info)
