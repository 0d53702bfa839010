"""Multi-round Private Evolution (Alg. A.1) with per-round checkpoints.

App. A (Alg. A.1); §3 "Multi-round PE with ICL"; App. D (T = 6 releases, q = 0.1, σ = 1.1088, δ = 1e-5).
Round t publishes a frozen bank S^(t), releases Y^(t) over the private users, keeps the top k̃ non-probe
candidates and every probe, and asks a generator for g = p − r − k̃ new texts from public feedback:
S^(t+1) = R^(t) ∪ V^(t). Round t draws from ``default_rng([entropy, t])``; each finished round is checkpointed
under a content key of every input and of the code.
"""
from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from pe_kit.cache import cache_dir, content_hash, read_verified, source_digest, write_verified
from pe_kit.settings import MechanismConfig
from pe_kit.pe.mechanism import release, routed_contributions, sample_participation
from pe_kit.text.generators.base import generator_identity
from pe_kit.text.variation import build_feedback, make_variations
from pe_kit.progress import progress

_FORMAT = "pe_kit.pe.multiround/v1"
#: Retention rules of ``PEConfig.retention``: the DP histogram (Alg. A.1) or the σ → ∞ random control.
RETENTION_RULES = ("histogram", "random")


def _readonly(a: np.ndarray, dtype) -> np.ndarray:
    a = np.array(a, dtype=dtype, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class PEConfig:
    """Settings of the multi-round loop (Alg. A.1; §3; App. D); ValueError naming a field out of range.

    ``rounds``: T releases. ``retain_fraction``: k̃ = max(1, round(fraction · p)) candidates kept per round.
    ``n_negatives``: lowest-Y candidates offered as negative ICL examples. ``icl_examples``, ``icl_negatives``: per
    ICL prompt. ``max_attempts``: generator calls per round for g distinct texts. ``retention``: ``"histogram"``
    (Alg. A.1 l. 21: Top_k̃(Y)) or ``"random"``, Fig. 2's σ → ∞ control (i.i.d. N(0, 1) ranks from
    ``default_rng([entropy, t, 1])``).
    """

    rounds: int = 6
    retain_fraction: float = 0.05
    n_negatives: int = 16
    icl_examples: int = 3
    icl_negatives: int = 2
    genre: str = "blog post"
    max_attempts: int = 5
    retention: str = "histogram"

    def __post_init__(self) -> None:
        if self.retention not in RETENTION_RULES:
            raise ValueError(f"retention={self.retention!r} is invalid: use one of {RETENTION_RULES} "
                             "('random' is the σ → ∞ control)")
        if int(self.rounds) != self.rounds or self.rounds < 1:
            raise ValueError(f"rounds={self.rounds!r} is invalid: use an integer T ≥ 1")
        if not 0 < self.retain_fraction < 1:
            raise ValueError(f"retain_fraction={self.retain_fraction!r} is invalid: use 0 < fraction < 1 (paper 0.05)")
        for name, low in (("n_negatives", 0), ("icl_examples", 1), ("icl_negatives", 0), ("max_attempts", 1)):
            v = getattr(self, name)
            if int(v) != v or v < low:
                raise ValueError(f"{name}={v!r} is invalid: use an integer ≥ {low}")

    def retain_count(self, bank_size: int, n_probes: int) -> int:
        """k̃ for a bank of ``bank_size`` with ``n_probes`` probes; ValueError if no slot is left for g ≥ 1."""
        k = max(1, int(round(self.retain_fraction * bank_size)))
        if k + n_probes >= bank_size:
            raise ValueError(f"retain_fraction={self.retain_fraction} keeps {k} candidates + {n_probes} probes of a "
                             f"bank of {bank_size}: nothing is left for new variations; lower retain_fraction")
        return k

    def as_dict(self) -> dict:
        """Plain dict of the settings (for result rows and checkpoint keys)."""
        return asdict(self)


@dataclass(frozen=True)
class Population:
    """Users' record embeddings (float32 (n_records, d)) and ``owner`` rows (int64 in [0, n_users)), read-only."""

    embeddings: np.ndarray
    owner: np.ndarray
    n_users: int
    name: str = "population"

    def __post_init__(self) -> None:
        emb = _readonly(self.embeddings, np.float32)
        own = _readonly(self.owner, np.int64)
        if emb.ndim != 2 or own.shape != (emb.shape[0],):
            raise ValueError(f"{self.name}: embeddings (n, d) and owner (n,) disagree: {emb.shape} vs {own.shape}")
        if own.size and (own.min() < 0 or own.max() >= self.n_users):
            raise ValueError(f"{self.name}: owner values must lie in [0, n_users={self.n_users})")
        object.__setattr__(self, "embeddings", emb)
        object.__setattr__(self, "owner", own)

    @classmethod
    def from_world(cls, world, split: str) -> "Population":
        """The ``split`` users of a ``study.world.World`` (``aux``, ``calibration``, ``test``, ``canary``)."""
        rec = world.records.get(split)
        if rec is None:
            raise ValueError(f"split={split!r} is not in the world; use one of {sorted(world.records)}")
        return cls(rec["emb"], rec["owner"], len(rec["ids"]), split)

    def digest(self) -> str:
        """Content hash of the records (part of checkpoint keys)."""
        return content_hash(self.embeddings.tobytes(), self.owner.tobytes(), int(self.n_users))

    def contributions(self, bank: "FrozenBank", mechanism: MechanismConfig) -> sp.csr_matrix:
        """Clipped contributions (n_users, p) on ``bank`` (exact top-k routing, Eq. 1)."""
        return routed_contributions(self.embeddings, self.owner, self.n_users, bank.embeddings, mechanism)


@dataclass(frozen=True)
class FrozenBank:
    """One published ordered bank S^(t) (Alg. A.1 line 6): p ``texts``, float32 (p, d) ``embeddings`` and int64
    ``probe_positions``, copied and read-only."""

    texts: tuple
    embeddings: np.ndarray
    probe_positions: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __post_init__(self) -> None:
        texts = tuple(self.texts)
        emb = _readonly(self.embeddings, np.float32)
        pos = _readonly(np.asarray(self.probe_positions).ravel(), np.int64)
        if emb.ndim != 2 or emb.shape[0] != len(texts):
            raise ValueError(f"bank embeddings must have shape ({len(texts)}, d); got {emb.shape}")
        if pos.size and (len(np.unique(pos)) != pos.size or pos.min() < 0 or pos.max() >= len(texts)):
            raise ValueError("probe_positions must be distinct positions in [0, p)")
        object.__setattr__(self, "texts", texts)
        object.__setattr__(self, "embeddings", emb)
        object.__setattr__(self, "probe_positions", pos)

    @property
    def size(self) -> int:
        """p, the number of bank entries (probes included)."""
        return len(self.texts)

    def candidate_mask(self) -> np.ndarray:
        """bool (p,): True for non-probe candidates."""
        m = np.ones(self.size, dtype=bool)
        m[self.probe_positions] = False
        return m


@dataclass(frozen=True)
class RoundRecord:
    """What round t (0-based) published and released (Alg. A.1 lines 6–25), read-only: ``bank`` S^(t),
    ``histogram`` Y^(t), ``participants`` |B^(t)|, ``retained`` (k̃ indices into S^(t), highest Y first) and V^(t)."""

    round: int
    bank: FrozenBank
    histogram: np.ndarray
    participants: int
    retained: np.ndarray
    new_texts: tuple
    new_embeddings: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "histogram", _readonly(self.histogram, np.float64))
        object.__setattr__(self, "retained", _readonly(self.retained, np.int64))
        object.__setattr__(self, "new_texts", tuple(self.new_texts))
        object.__setattr__(self, "new_embeddings", _readonly(self.new_embeddings, np.float32))


@dataclass(frozen=True)
class Transcript:
    """A finished multi-round PE run: T ``rounds``, ``final_bank`` S^(T) (Alg. A.1 line 27), the content ``key``
    and the ``entropy`` that lets ``pe_round`` replay any round; ``resumed_rounds`` is not part of equality."""

    rounds: tuple
    final_bank: FrozenBank
    key: str
    entropy: int = 0
    resumed_rounds: int = field(default=0, compare=False)

    @property
    def banks(self) -> list[FrozenBank]:
        """[S^(0), ..., S^(T)]."""
        return [r.bank for r in self.rounds] + [self.final_bank]


def release_round(bank: FrozenBank, private: Population, mechanism: MechanismConfig,
                  rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Y^(t) over a frozen bank: Poisson participation, exact routing, clipping, Gaussian noise (Alg. A.1 l. 7–20).
    Returns (float64 (p,) histogram, number of participants). Raises ValueError if the bank is not frozen."""
    if bank.embeddings.flags.writeable or bank.probe_positions.flags.writeable:
        raise ValueError("the bank must be frozen (read-only arrays) before its release; build a FrozenBank")
    contribs = private.contributions(bank, mechanism)
    part = sample_participation(private.n_users, mechanism.sample_rate, rng)
    return release(contribs, mechanism, rng, participation=part), int(part.sum())


def next_bank(bank: FrozenBank, retained: np.ndarray, new_texts: Sequence[str], new_embeddings: np.ndarray) -> FrozenBank:
    """S^(t+1) = R^(t) ∪ V^(t) (Alg. A.1 l. 25): probes stay; the non-probe slots, in increasing position, get the
    retained candidates (in S^(t) order) then the new texts. Raises ValueError unless k̃ + g fill p − r slots."""
    slots = np.flatnonzero(bank.candidate_mask())
    kept = np.sort(np.asarray(retained, dtype=np.int64))
    if kept.size + len(new_texts) != slots.size:
        raise ValueError(f"{kept.size} retained + {len(new_texts)} new texts must fill {slots.size} non-probe slots")
    texts = list(bank.texts)
    emb = np.array(bank.embeddings)
    fill_t = [bank.texts[i] for i in kept] + list(new_texts)
    fill_e = np.concatenate([bank.embeddings[kept], np.asarray(new_embeddings, np.float32).reshape(len(new_texts), -1)])
    for s, t in zip(slots, fill_t):
        texts[s] = t
    emb[slots] = fill_e
    return FrozenBank(tuple(texts), emb, bank.probe_positions)


def initial_bank(bank_texts: Sequence[str], bank_embeddings: np.ndarray, design=None) -> FrozenBank:
    """S^(0): the base bank with the design's probes at their replacement positions (App. B)."""
    texts = list(bank_texts)
    emb = np.array(bank_embeddings, dtype=np.float32)
    pos = np.zeros(0, dtype=np.int64)
    if design is not None and design.probe_embeddings is not None:
        pos = np.asarray(design.positions, dtype=np.int64)
        for j, t in zip(pos, design.probe_texts):
            texts[j] = t
        emb[pos] = design.probe_embeddings
    return FrozenBank(tuple(texts), emb, pos)


def _encode_record(rec: RoundRecord, key: str) -> bytes:
    meta = {"format": _FORMAT, "key": key, "round": rec.round, "bank_texts": list(rec.bank.texts),
            "participants": rec.participants, "new_texts": list(rec.new_texts)}
    buf = io.BytesIO()
    np.savez(buf, meta=np.frombuffer(json.dumps(meta, ensure_ascii=False).encode("utf-8"), dtype=np.uint8),
             bank_embeddings=rec.bank.embeddings, probe_positions=rec.bank.probe_positions,
             histogram=rec.histogram, retained=rec.retained, new_embeddings=rec.new_embeddings)
    return buf.getvalue()


def _decode_record(data: bytes, key: str, t: int) -> RoundRecord | None:
    try:
        z = np.load(io.BytesIO(data), allow_pickle=False)
        meta = json.loads(z["meta"].tobytes().decode("utf-8"))
        if meta.get("format") != _FORMAT or meta.get("key") != key or meta.get("round") != t:
            return None
        bank = FrozenBank(tuple(meta["bank_texts"]), z["bank_embeddings"], z["probe_positions"])
        return RoundRecord(t, bank, z["histogram"], int(meta["participants"]), z["retained"],
                           tuple(meta["new_texts"]), z["new_embeddings"])
    except (ValueError, KeyError, OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None


def _embed_new(generator, encoder, texts: list[str]) -> np.ndarray:
    lookup = getattr(generator, "embedding_of", None)
    if callable(lookup):
        emb = lookup(texts)
        if emb is not None:
            return np.asarray(emb, dtype=np.float32)
    if encoder is None:
        raise ValueError("encoder= is required to embed generated texts (pass world.encoder)")
    return np.asarray(encoder.encode(texts, desc="variations"), dtype=np.float32)


def pe_round(bank: FrozenBank, private: Population, generator, mechanism: MechanismConfig, config: PEConfig,
             entropy: int, t: int, seen, *, encoder=None, extra_votes: np.ndarray | None = None) -> RoundRecord:
    """One round of Alg. A.1 on a frozen bank (lines 6–25): release, retention, feedback, variation, embedding; a
    pure function of its arguments. ``seen``: every earlier bank text. ``extra_votes``: optional float (p,) added to
    Y^(t), one more participant's clipped votes. Raises ValueError if ``extra_votes`` is not (p,).
    """
    retain = config.retain_count(bank.size, bank.probe_positions.size)
    g = bank.size - bank.probe_positions.size - retain
    r_rng = np.random.default_rng([int(entropy), int(t)])
    y, n_part = release_round(bank, private, mechanism, r_rng)
    if extra_votes is not None:
        extra = np.asarray(extra_votes, dtype=np.float64).ravel()
        if extra.shape != y.shape:
            raise ValueError(f"extra_votes has shape {extra.shape}; the bank has {y.shape[0]} entries")
        y = y + extra
        n_part += 1
    rank = y if config.retention == "histogram" else np.random.default_rng([int(entropy), int(t), 1]).standard_normal(y.size)
    retained, feedback = build_feedback(bank.texts, rank, bank.probe_positions, retain, config.n_negatives, seen=seen)
    if hasattr(generator, "register"):
        generator.register(bank.texts, bank.embeddings)
    new = make_variations(generator, feedback, g, r_rng, icl_examples=config.icl_examples,
                          icl_negatives=config.icl_negatives, genre=config.genre, max_attempts=config.max_attempts)
    return RoundRecord(t, bank, y, n_part, retained, tuple(new), _embed_new(generator, encoder, new))


def run_pe(bank_texts: Sequence[str], bank_embeddings: np.ndarray, private: Population, generator,
           mechanism: MechanismConfig, config: PEConfig, rng: np.random.Generator, *, design=None, encoder=None,
           checkpoint_dir: str | Path | None | bool = None) -> Transcript:
    """Run T rounds of PE (Alg. A.1) and return the ``Transcript``; resumes from checkpoints.

    ``private``: the voting users; ``rng``: draws the entropy; ``design``: optional ``ProbeDesign`` whose probes
    replace bank positions in every round; ``checkpoint_dir``: None = ``cache_dir()/"multiround"``, False = off.
    Raises ValueError on inconsistent inputs; GenerationError from the generator (rerun to resume).
    """
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator; pass np.random.default_rng(seed)")
    if len(bank_texts) != np.asarray(bank_embeddings).shape[0]:
        raise ValueError(f"bank_texts ({len(bank_texts)}) and bank_embeddings ({np.asarray(bank_embeddings).shape[0]}) "
                         "must have one row per text")
    bank = initial_bank(bank_texts, bank_embeddings, design)
    if bank.embeddings.shape[1] != private.embeddings.shape[1]:
        raise ValueError("bank and private records have different embedding dimensions: use one encoder")
    config.retain_count(bank.size, bank.probe_positions.size)  # raises early if no slot is left for variations
    entropy = int(rng.integers(0, 2**63 - 1))
    key = content_hash(_FORMAT, list(bank.texts), bank.embeddings.tobytes(), bank.probe_positions.tolist(),
                       private.digest(), generator_identity(generator), mechanism.as_dict(), config.as_dict(), entropy,
                       getattr(encoder, "model_id", None), source_digest("pe", "text/variation.py"))
    folder = None
    if checkpoint_dir is not False:
        folder = Path(checkpoint_dir if checkpoint_dir not in (None, True) else cache_dir() / "multiround") / key[:32]
    records: list[RoundRecord] = []
    seen: set[str] = set(bank.texts)
    resumed = 0
    for t in progress(range(config.rounds), desc="PE rounds", unit="round"):
        path = folder / f"round-{t:03d}.npz" if folder is not None else None
        rec = None
        if path is not None and len(records) == t:
            data = read_verified(path)
            rec = _decode_record(data, key, t) if data is not None else None
            if rec is not None and rec.bank.texts != bank.texts:
                rec = None
        if rec is not None:
            resumed += 1
        else:
            rec = pe_round(bank, private, generator, mechanism, config, entropy, t, seen, encoder=encoder)
            if path is not None:
                write_verified(path, _encode_record(rec, key))
        records.append(rec)
        seen.update(rec.new_texts)
        bank = next_bank(bank, rec.retained, rec.new_texts, rec.new_embeddings)
    return Transcript(tuple(records), bank, key, entropy, resumed)
