"""One audit study on real data: users → embeddings → bank → frozen designs → ε_lower rows.

Glue between ``pe_kit.data``, ``pe_kit.text``, ``pe_kit.pe``, ``pe_kit.attack`` and ``pe_kit.audit`` (the
flow of docs/architecture.md).
A ``World`` holds everything that does not depend on the attack (split users' record embeddings,
the base bank, each record's nearest base entries); ``audit_design`` audits one frozen
``ProbeDesign`` against it and returns a tidy result row.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from pe_kit.attack.variants import ProbeDesign
from pe_kit.audit.canary import _audit_canary
from pe_kit.audit.trials import check_equal_populations
from pe_kit.settings import AuditConfig, MechanismConfig, WorldSettings
from pe_kit.data.corpus_cache import cached_corpus
from pe_kit.data.loaders import Corpus
from pe_kit.data.splits import Splits, empty_arm_message, make_arm, split_users
from pe_kit.pe.mechanism import build_neighbor_index, contributions, routes_with_probes
from pe_kit.report.results import versions
from pe_kit.text.encoder import Encoder

__all__ = ["SPLITS", "StudyConfig", "World", "input_digests", "check_bank_b", "reserved_users", "world_texts", "bank_reserved_users", "study_splits", "world_fingerprint", "build_world", "truncation_fields",
           "canary_contribution", "audit_design", "aux_pool_covariance", "DEFAULT_PARAPHRASER", "paraphrase_pool_seed",
           "paraphrase_pool", "make_design"]

SPLITS = ("aux", "calibration", "test")


@dataclass(frozen=True)
class StudyConfig(WorldSettings):
    """Everything that fixes a study's data and bank (one row's provenance): the fields of
    ``pe_kit.settings.WorldSettings`` (declared there, once), with calibration and test of equal size.

    Attributes:
        data: corpus path (None = bundled Blogs sample); fmt: loader (``auto``).
        arm: ``long`` or ``short`` (App. D).
        n_canary, n_aux, n_calibration, n_test: split sizes (paper: 500 aux, 1000 test). Calibration and test
            are disjoint users of the same size N (``audit.trials.check_equal_populations``; the paper's
            500 calibration users could not score the statistic of 1000 test users without resampling).
            n_canary ≥ 25 gives each of the five real-canary variants its own five canaries
            (``pe_kit.attack.variants.canary_assignment``); nonce canaries are synthetic and need no slot.
        bank: ``bankA`` (bundled label-only SmolLM2 bank), ``bankB`` (bundled SmolLM2 bank from a label and three
            public examples; its example authors stay out of every private split), ``public`` (label-stratified
            records of users in no split), ``llm-label`` / ``llm-icl`` (generated, SmolLM2 by default), or ``file:<path>`` / a path
            to a JSON Lines file with a ``text`` field (``pe_kit.text.banks.make_bank``).
        bank_size: p (8192). max_probes: r (64), the depth reserve of the neighbour index.
        model: encoder name/path; max_seq_length: token cap (None = model default).
        seed: seed of splits and bank sampling.
        on_error: what the loader does with a malformed line (``raise``, the default, or ``skip``: count it,
            reported by ``Corpus.report()``); left out of :meth:`as_dict` (and so of every cache key): a
            world that loads at all holds the same users under either policy.

    Raises:
        ValueError: a field of the wrong type or range (checked against its declaration, ``pe_kit.settings.setting``: ``n_test=True`` or
            ``n_test=2.5`` are refused, ``n_test=1e3`` is 1000), naming the field and the accepted values.
    """

    def __post_init__(self) -> None:
        super().__post_init__()  # each field checked against its own declaration (pe_kit.settings.setting)
        check_equal_populations(self.n_calibration, self.n_test)
        if self.max_probes > self.bank_size:  # the probes are bank entries (as the presets check)
            raise ValueError(f"max_probes={self.max_probes} > bank_size={self.bank_size}: the r probes are bank "
                             f"entries; lower max_probes (e.g. {min(64, self.bank_size)}) or raise bank_size")

    def as_dict(self) -> dict:
        """Plain dict of the fields that fix the world (``on_error`` excluded, see above)."""
        d = asdict(self)
        d.pop("on_error")
        return d


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
        fingerprint: content key of everything the world holds (:func:`world_fingerprint`); step-cache
            keys use it instead of the paths in ``config``.
        truncation: texts the encoder cuts at its cap (:func:`truncation_fields`): ``token_cap``,
            ``records_truncated`` / ``records_total`` (every split's records), ``bank_truncated`` / ``bank_total``.
    """

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
    """Digests of the files a study reads, so that keys follow their bytes rather than their paths.

    Returns a dict: ``data`` (SHA-256 of the corpus file; the bundled Blogs sample when ``config.data`` is
    None), ``bank_file`` (SHA-256 of the bank file for ``bankA`` / ``file:<path>`` / a path; None for
    ``public`` and generated banks, whose texts are hashed by :func:`world_fingerprint`), ``model``
    (``pe_kit.text.encoder.model_fingerprint`` of the encoder). Digests come from
    ``pe_kit.cache.file_digest`` (size+mtime+ctime only short-cut a re-hash).

    Raises:
        FileNotFoundError: if the data or bank file is missing. ValueError: ``bankB`` before its file ships
            (``text.banks.bank_b_missing_message``).
    """
    from pe_kit.cache import file_digest
    from pe_kit.data.loaders import check_path, default_bank_path, default_data_path
    from pe_kit.text.encoder import model_fingerprint

    from pe_kit.data.loaders import default_bank_b_path

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
    """Refuse ``bank="bankB"`` before any work while its file is not shipped.

    Raises:
        ValueError: with ``text.banks.bank_b_missing_message()`` (how to build it, how much is committed).
    """
    from pe_kit.data.loaders import default_bank_b_path
    from pe_kit.text.banks import bank_b_missing_message

    if config.bank == "bankB" and not default_bank_b_path().is_file():
        raise ValueError(bank_b_missing_message())


def reserved_users(config: StudyConfig) -> frozenset[str]:
    """User ids a world on ``config`` keeps out of its private splits (:func:`bank_reserved_users` of its bank)."""
    return bank_reserved_users(config.bank)


def bank_reserved_users(bank: str) -> frozenset[str]:
    """User ids a world on ``bank`` keeps out of its private splits: the example authors of a bank-B file
    (``data.loaders.bank_b_authors``): the shipped one for ``bank == "bankB"``, and any bank file
    (``file:<path>`` or a bare path) whose rows carry ``examples`` (a copy or a rebuild of bank B); else none.

    Raises:
        DataError: a bank file whose first row has ``examples`` but a later row is malformed (it would reserve the
            wrong users).
    """
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
    """The seeded splits of a study (App. D; ``data.splits.split_users`` with the config's sizes, canaries with
    exactly ``record_cap`` records, :func:`reserved_users` kept public): the one draw every entry point makes."""
    return split_users(corpus, config.n_canary, config.n_aux, config.n_calibration, config.n_test, seed=config.seed,
                       canary_records=config.record_cap, reserved=reserved_users(config))


def world_fingerprint(config: StudyConfig, bank_texts, encoder: Encoder | None = None) -> str:
    """Content key of a ``World`` (64 hex): its settings, :func:`input_digests`, the bank texts themselves
    (covers generated banks) and the encoder's identity (model file digest and token cap).

    Every step cache of ``pe_kit.study.experiments`` keys on it, so a corpus or bank rewritten in place, or
    another model under the same folder name, recomputes the steps.
    """
    from pe_kit.cache import content_hash

    enc = encoder.model_id if encoder is not None else None
    reserved = sorted(reserved_users(config))
    extra = (content_hash(reserved),) if reserved else ()   # only bank-B worlds: every other key stays as it was
    return content_hash("world/v1", config.as_dict(), input_digests(config), content_hash(list(bank_texts)), enc,
                        *extra)


def _stack(users, encoder: Encoder, desc: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    texts = [t for u in users for t in u.texts]
    owner = np.repeat(np.arange(len(users)), [len(u.texts) for u in users])
    return encoder.encode(texts, desc=desc), owner, [u.user_id for u in users]


def build_world(config: StudyConfig, encoder: Encoder | None = None, mechanism: MechanismConfig | None = None) -> World:
    """Load, split, embed and index everything a study needs (the expensive, cached part).

    Raises:
        ValueError / DataError: on unreadable data, too few users, or a bank smaller than ``bank_size``; ``bankB``
            before its file ships (checked first, before the corpus is read).
    """
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
    """The study's data arm and its seeded splits (bank B's file checked first, before the corpus is read)."""
    check_bank_b(config)
    loaded = cached_corpus(config.data, config.fmt, record_cap=config.record_cap, on_error=config.on_error)
    corpus = make_arm(loaded, config.arm, config.record_cap)
    if not corpus.users:
        raise ValueError(empty_arm_message(loaded, config.arm, config.record_cap))
    return corpus, study_splits(config, corpus)


def world_texts(config: StudyConfig) -> tuple[list[str], int]:
    """The texts :func:`build_world` embeds for ``config``, found without embedding any: the bank's, then the
    records of every split (aux, calibration, test, canary). A generated bank (``llm-label`` / ``llm-icl``) is not
    generated here: its texts are unknown until then, so its ``bank_size`` is returned as a count instead.

    Returns: (texts, number of generated bank texts not among them). Raises what :func:`build_world` raises
    before it embeds.
    """
    corpus, splits = _arm_splits(config)
    generated = config.bank in ("llm-label", "llm-icl")
    texts = [] if generated else _bank_texts(config, corpus, splits)[0]
    by_id = corpus.by_id()
    texts += [t for split in SPLITS + ("canary",) for i in getattr(splits, split) for t in by_id[i].texts]
    return texts, config.bank_size if generated else 0


def _truncation(world: World) -> dict:
    from pe_kit.text.tokens import truncation_report

    records = [t for split in SPLITS + ("canary",) for u in world.users(split) for t in u.texts]
    enc = world.encoder
    try:
        return truncation_report({"records": records, "bank": world.bank_texts}, enc.model, enc.max_seq_length)
    except (OSError, ValueError, ImportError) as exc:  # a model without a local tokenizer: say so in the rows
        import warnings

        warnings.warn(f"cannot count truncated texts for model {enc.model!r}: {exc}", stacklevel=3)
        return {"token_cap": None}


def truncation_fields(world: World) -> dict:
    """The world's truncation counts for a result row (``pe_kit.text.tokens.truncation_report``): ``token_cap``
    (word pieces the encoder keeps), ``records_truncated`` / ``records_total`` (records of every split longer
    than the cap, embedded truncated) and ``bank_truncated`` / ``bank_total``. Empty for a hand-built world."""
    return dict(world.truncation)


def _bank_texts(config: StudyConfig, corpus: Corpus, splits: Splits) -> tuple[list[str], dict]:
    """The study's base bank texts and provenance, built by ``pe_kit.text.banks.make_bank`` (seed [seed, 1])."""
    from pe_kit.text.banks import make_bank

    bank = make_bank(config.bank, config.bank_size, np.random.default_rng([config.seed, 1]), corpus=corpus,
                     splits=splits)
    return list(bank.texts), dict(bank.info)


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
    design, the ``_audit_canary`` audit's ``row`` and package versions, and for pool-based designs ``pool_generator`` and
    ``pool_source`` (``shipped`` / ``generated``: which generator made the paraphrase or nonce pool).
    """
    v_full = canary_contribution(world, design, mechanism)
    coords = design.positions if design.positions is not None else np.flatnonzero(v_full)
    contribs = {s: world.contributions(s, mechanism, design) for s in SPLITS}
    result = _audit_canary(v_full, np.sort(np.asarray(coords)), contribs["aux"], contribs["calibration"],
                          contribs["test"], mechanism, audit, rng)
    row = {"variant": design.variant, "canary_id": design.canary_id,
           "canary_votes_on_P": float(v_full[np.asarray(coords)].sum() / max(v_full.sum(), 1e-300)),
           **result.row, **{f"mech_{k}": v for k, v in mechanism.as_dict().items()},
           **{f"audit_{k}": v for k, v in audit.as_dict().items()}, "gamma": audit.gamma,
           **{f"study_{k}": v for k, v in world.config.as_dict().items()},
           "bank_source": world.bank_info.get("bank"), **truncation_fields(world), **versions(),
           **{k: design.info[k] for k in ("pool_generator", "pool_source", "beyond_paper") if k in design.info}}
    return row


def aux_pool_covariance(world: World, pool_embeddings: np.ndarray, positions: np.ndarray,
                        mechanism: MechanismConfig, audit: AuditConfig | None = None) -> np.ndarray:
    """Frozen Σ̂_Q over a whole candidate pool from the world's aux users (Alg. B.1 line 6; Eqs. 31–35).

    Aux users are routed to S_base ∪ Q (bank without ``positions`` plus all M pool entries), clipped,
    and Σ̂_Q = q(1−q)N·shrink(M̂_Q) + (σC)²I + ridge·I with N = the test split size (see
    ``selection.pool_covariance``). Test users never enter.

    Args:
        world: the study. pool_embeddings: float32 (M, d). positions: int (r,) reserved positions.
        mechanism: k, C, σ, q. audit: shrinkage and ridge (defaults: 0.1, 1e-9).

    Returns:
        float64 (M, M).
    """
    from pe_kit.attack.selection import pool_covariance

    audit = audit or AuditConfig()
    aux = world.records["aux"]
    return pool_covariance(aux["index"], aux["emb"], aux["owner"], len(aux["ids"]), pool_embeddings, positions,
                           mechanism, n_users=len(world.splits.test), shrinkage=audit.shrinkage, ridge=audit.ridge)


#: Paraphrase route when none is given: ``"auto"``, the shipped SmolLM2 pool
#: (``pe_kit.text.generators.paraphrase_pools.SHIPPED_POOLS_FILE`` covers all 31 paraphrase canaries of the quick
#: preset on the bundled sample: both arms and notebook 05's sweep canary, and those of the paper run on the full Blog corpus,
#: ``scripts/paper_run.sh``; docs/paraphrase_pools.md says which) and WordNet with a warning for canaries without
#: one (the tiny preset, other sizes or seeds, other data). ``generator="smollm2"`` always gives LLM rewrites (shipped, else generated);
#: ``"wordnet"`` synonym swaps (App. B's pools are LLM rewrites; docs/paraphrase_pools.md).
DEFAULT_PARAPHRASER = "auto"


_FALLBACKS_WARNED: set = set()


def _warn_fallback_once(key: tuple, fallback: str) -> None:
    """Warn about the ``auto`` route's WordNet fallback once per (data, M, study seed) and process: a study designs
    every paraphrase canary for several variants, arms and banks, and ``warnings``' own once-per-location registry is
    reset by every ``catch_warnings`` block, so without this a notebook repeats the line dozens of times. Every
    fallback stays recorded in its design (``info["pool_fallback"]``) and counted in results.md's pool line."""
    if key in _FALLBACKS_WARNED:
        return
    import warnings

    _FALLBACKS_WARNED.add(key)
    warnings.warn(f"{fallback}; for LLM rewrites pass --set paraphraser=smollm2 (Python: generator='smollm2'), which "
                  f"generates them (slow; docs/paraphrase_pools.md) (warned once for data {key[0]}, M={key[1]}, "
                  f"seed {key[2]}: "
                  "each design's info['pool_fallback'] names its canary; results.md counts the pools per generator)", stacklevel=3)


def paraphrase_pool_seed(seed: int, canary_id: str) -> list[int]:
    """Seed (list of 3 int for ``numpy.random.default_rng``) of a canary's paraphrase pool: (study seed, 3,
    first 32 bits of SHA-256("paraphrase-pool", canary id)); every variant auditing the canary gets the same pool."""
    from pe_kit.cache import content_hash

    return [int(seed), 3, int(content_hash("paraphrase-pool", str(canary_id))[:8], 16)]


def paraphrase_pool(world: World, user, pool_size: int = 512, generator=None) -> tuple[list[str], np.ndarray, np.ndarray, dict]:
    """The paraphrase probe pool Q of a real canary: ``pool_size`` non-verbatim rewrites spread over its records.

    Built by ``generation.make_paraphrase_pool`` (round robin over records, verbatim and duplicate outputs
    rejected, ``on_shortfall="reassign"``). The pool is a property of the canary: its seed is
    :func:`paraphrase_pool_seed` (study seed, canary id), so every variant auditing this canary sees the same
    pool (and the cached generator / embedding cache make the rebuild cheap).

    Args:
        world: the study. user: the canary (``data.User``). pool_size: M.
        generator: ``"smollm2"`` (LLM rewrites, ``paraphrase_pools.llm_paraphraser``: the pool shipped in
            ``pe_kit/data_files`` when its content key matches, else generated and cached, ~2.5 CPU-seconds per
            rewrite), ``"auto"`` (the shipped SmolLM2 pool, else the WordNet pool with a warning and
            ``info["pool_fallback"]``; never generates with the LLM), ``"wordnet"``
            (``CachedGenerator(WordNetParaphraser())``), None (:data:`DEFAULT_PARAPHRASER`), or any
            ``generation`` text generator object.

    Returns:
        (texts list of M str, sources int64 (M,) record index per entry, embeddings float32 (M, d), info dict
        with ``pool_generator``, ``pool_generator_config``, ``pool_seed``, ``pool_source`` (``shipped`` /
        ``generated``) and, for the LLM route, ``pool_key``).

    Raises:
        ValueError: for pool_size < 1, an unknown generator name or an object that is not a generator, and for a
            damaged pools file (``paraphrase_pools.load_pools`` / ``find_pool``); generation errors from the backend.
    """
    from pe_kit.text.generators.cached import CachedGenerator
    from pe_kit.text.generators.paraphrase_pools import PARAPHRASERS, build_pool, find_pool, llm_paraphraser, pool_spec
    from pe_kit.text.generators.pools import make_paraphrase_pool
    from pe_kit.text.generators.wordnet import WordNetParaphraser

    if int(pool_size) != pool_size or pool_size < 1:
        raise ValueError(f"pool_size={pool_size!r} must be an integer ≥ 1")
    generator = DEFAULT_PARAPHRASER if generator is None else generator
    if isinstance(generator, str) and generator not in PARAPHRASERS:
        raise ValueError(f"generator={generator!r} is unknown; use one of {PARAPHRASERS} or a generator object")
    if not isinstance(generator, str) and not callable(getattr(generator, "generate", None)):
        raise ValueError(f"generator={generator!r} is neither a route name {PARAPHRASERS} nor a text generator "
                         "(an object with .generate, e.g. pe_kit.text.generators.CachedGenerator(...))")
    pool_seed = paraphrase_pool_seed(world.config.seed, user.user_id)
    records = list(user.texts)
    entry, fallback = None, None
    if generator in ("smollm2", "auto"):
        llm = llm_paraphraser()
        # auto only reads shipped text (never generates), so the installed model file does not matter to it
        model = _installed_model(llm) if generator == "smollm2" else None
        entry = find_pool(records, int(pool_size), pool_seed, pool_spec(llm), model=model)
        source = "shipped"
        if entry is None and generator == "smollm2":
            cached = CachedGenerator(llm, with_code=False, sort_by_length=True)
            entry, source = build_pool(records, int(pool_size), pool_seed, cached), "generated"
        elif entry is None:
            fallback = (f"no shipped SmolLM2 pool matches canary {user.user_id} (records, M={pool_size}, study seed "
                        f"{world.config.seed}); WordNet pool")
            _warn_fallback_once((str(getattr(world.config, "data", None) or "bundled sample"), int(pool_size),
                                 world.config.seed), fallback)
            generator = "wordnet"
    if entry is not None:
        texts, sources = list(entry["texts"]), entry["sources"]
        info = {"pool_generator": llm.name, "pool_generator_config": llm.config(), "pool_seed": pool_seed,
                "pool_source": source, "pool_key": entry["key"]}
    else:
        generator = CachedGenerator(WordNetParaphraser()) if generator == "wordnet" else generator
        texts, sources = make_paraphrase_pool(records, int(pool_size), generator,
                                              np.random.default_rng(pool_seed), on_shortfall="reassign")
        cfg = getattr(generator, "config", None)
        info = {"pool_generator": getattr(generator, "name", type(generator).__name__),
                "pool_generator_config": cfg() if callable(cfg) else {}, "pool_seed": pool_seed,
                "pool_source": "generated", **({"pool_fallback": fallback} if fallback else {})}
    return texts, np.asarray(sources, np.int64), world.encoder.encode(texts, desc="pool"), info


def _installed_model(generator) -> str | None:
    """Digest of the generator's model files, or None when the model is not installed (shipped pools still apply)."""
    from pe_kit.text.generators.base import GenerationError

    try:
        return generator.identity()
    except (GenerationError, OSError):
        return None


def make_design(world: World, variant: str, canary_slot: int, rng: np.random.Generator, *,
                mechanism: MechanismConfig | None = None, audit: AuditConfig | None = None, generator=None,
                pool_size: int = 512, r: int | None = None) -> ProbeDesign:
    """Build the frozen ``ProbeDesign`` of ``variant`` (Table 1, App. B) for one canary of the study.

    Real-canary variants audit ``world.splits.canary[canary_slot]`` (which slots a variant uses:
    ``pe_kit.attack.variants.canary_assignment``); nonce variants draw a fresh synthetic canary (m = record_cap nonce
    records) and an independent nonce pool from ``rng``. Active variants reserve r ordered replacement
    positions from ``rng`` *before* selection (exact: r = m), probe t goes to position t, and the design
    is frozen before any trial:

    * ``ordinary``: no probes. ``exact``: a verbatim copy of each record.
    * ``paraphrase``: ``pool_size`` rewrites across the records (``generator``: see :func:`paraphrase_pool`)
      (``paraphrase_pool``), r of them spread across records (``pe_kit.attack.variants.spread_select``).
    * ``nonce``: r drawn uniformly from the nonce pool (``pe_kit.attack.variants.design_nonce``).
    * ``*-norm`` / ``*-mu_eff``: Alg. B.1 on the pool (``pe_kit.attack.variants.design_selected``); μ_eff uses Σ̂_Q from
      aux users (``aux_pool_covariance``), frozen before selection.
    * ``composed-mu_eff`` (beyond the paper): Alg. B.1 on a pool composed of the canary's own records, with
      aux-only edit rounds (``pe_kit.attack.composed_probes.design_composed``; its pool size is ``ComposedConfig``'s).

    Args:
        world: the study (its neighbour indices have depth k + max_probes).
        variant: one of ``pe_kit.attack.variants.ALL_VARIANTS`` (Table 1's eight and ``composed-mu_eff``). canary_slot: index into the canary split (real variants).
        rng: the only source of randomness (positions, nonce strings, spread draws).
        mechanism: k, C, σ, q (default ``MechanismConfig(record_cap=world.config.record_cap)``).
        audit: shrinkage / ridge of Σ̂_Q. generator: paraphrase route (``"smollm2"``, ``"wordnet"``, None = :data:`DEFAULT_PARAPHRASER`, or a
            generator object; :func:`paraphrase_pool`). pool_size: M (512).
        r: probes (default ``world.config.max_probes``; at most that).

    Raises:
        ValueError: unknown variant, slot out of range, r > max_probes, r > pool_size, or m > max_probes
            for ``exact``.
    """
    from pe_kit.attack.variants import (
        ALL_VARIANTS,
        unknown_variant,
        design_exact,
        design_nonce,
        design_ordinary,
        design_paraphrase,
        design_selected,
        nonce_canary_and_pool,
        replacement_positions,
        variant_objective,
    )

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
    objective = variant_objective(variant)
    if variant.startswith("nonce"):
        if variant == "nonce":
            return design_nonce(world.encoder, p, rng, records=world.config.record_cap, pool_size=pool_size, r=r)
        canary, pool = nonce_canary_and_pool(world.config.record_cap, pool_size, rng)
        positions = replacement_positions(p, r, rng)
        emb = world.encoder.encode(canary + pool, desc="nonce")
        c_emb, pool_emb = emb[:len(canary)], emb[len(canary):]
        sigma = aux_pool_covariance(world, pool_emb, positions, mechanism, audit) if objective == "mu_eff" else None
        return design_selected(variant, f"nonce-{int(rng.integers(1 << 31))}", canary, c_emb, pool, pool_emb,
                               world.bank, positions, mechanism.top_k, sigma, info={"canary": "nonce"})
    if not 0 <= canary_slot < len(world.splits.canary):
        raise ValueError(f"canary_slot={canary_slot} out of range: the study has {len(world.splits.canary)} "
                         "canaries (raise StudyConfig.n_canary)")
    user = world.corpus.by_id()[world.splits.canary[canary_slot]]
    rec = world.records["canary"]
    rows = rec["owner"] == rec["ids"].index(user.user_id)
    c_emb = rec["emb"][rows]
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
    sigma = aux_pool_covariance(world, pool_emb, positions, mechanism, audit) if objective == "mu_eff" else None
    # the canary's base neighbours are computed exactly as ``canary_contribution`` does (same distances)
    return design_selected(variant, user.user_id, user.texts, c_emb, texts, pool_emb, world.bank, positions,
                           mechanism.top_k, sigma, info=info)
