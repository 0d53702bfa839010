"""``composed-mu_eff``: probes composed from the canary's own text and chosen against the encoder.

Beyond the paper's Table 1 (docs/composed.md). The pool Q holds the canary's records, their sentences, word
windows and recombinations (openings of several similar records in one text, near all of them: μ_eff → 1/σ,
Eqs. 1, 20); every probe word is a canary word. A search edits the selected candidates and re-runs Alg. B.1 with
J_μeff (Eq. 6); the round kept has the largest aux μ_eff (Eq. 15). Test users never enter the design.
"""
from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace

import numpy as np
import scipy.sparse as sp

from pe_kit.attack.selection import base_neighbors, pool_covariance
from pe_kit.attack.variants import design_selected
from pe_kit.audit.moments import aux_moments, design_moments, null_moments, restrict
from pe_kit.pe.mechanism import build_neighbor_index, canary_votes, contributions, routes_with_probes, squared_distances
from pe_kit.settings import AuditConfig, MechanismConfig
from pe_kit.text.generators.base import PoolShortfallError

__all__ = ["ComposedConfig", "AuxBackground", "record_words", "canary_vocabulary", "composed_pool", "edit_candidates",
           "solo_pool_covariance", "design_mu_eff", "design_composed", "probe_vote_examples"]

BEYOND_PAPER_NOTE = ("beyond the paper: not a Table 1 variant; probes composed from the canary's own records "
                     "(docs/composed.md)")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")

Span = tuple[int, int, int]  # (record index, first word, end word): words[record][first:end]


@dataclass(frozen=True)
class ComposedConfig:
    """Settings of the composed pool and its search (``design_composed``).

    ``pool_size``: M (≥ r); ``windows``: word-window lengths; ``hub_sizes``: records per recombination;
    ``hub_words``: words of a recombination of g records, ⌊hub_words/g⌋ (≥ 3) of each; ``refine_rounds`` of
    ``refine_edits`` new candidates; ``covariance``: ``"solo"`` (``solo_pool_covariance``) or ``"pool"``
    (``selection.pool_covariance``). Raises ValueError naming a field out of range.
    """

    pool_size: int = 2048
    windows: tuple = (8, 16, 24)
    hub_sizes: tuple = (2, 3, 4, 6, 8, 12, 16)
    hub_words: int = 40
    refine_rounds: int = 8
    refine_edits: int = 384
    covariance: str = "solo"

    def __post_init__(self) -> None:
        for name, lo in (("pool_size", 1), ("hub_words", 6), ("refine_rounds", 0), ("refine_edits", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise ValueError(f"ComposedConfig.{name}={v!r} must be an integer ≥ {lo}")
        if self.covariance not in ("solo", "pool"):
            raise ValueError(f"ComposedConfig.covariance={self.covariance!r} must be 'solo' or 'pool'")
        for name, lo in (("windows", 3), ("hub_sizes", 2)):
            v = getattr(self, name)
            if not isinstance(v, (tuple, list)) or not v or any(
                    isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < lo for x in v):
                raise ValueError(f"ComposedConfig.{name}={v!r} must be a non-empty tuple of integers ≥ {lo}")
            object.__setattr__(self, name, tuple(int(x) for x in v))

    def as_dict(self) -> dict:
        """Plain dict (tuples as lists) for ``design.info``."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


DEFAULT_CONFIG = ComposedConfig()


@dataclass(frozen=True)
class AuxBackground:
    """The aux users a design may use (App. B): their records' ``NeighborIndex`` on the base bank (depth ≥ k + r),
    float32 (n_records, d) ``records``, ``owner`` user rows, ``n_aux_users`` and the population size N ``n_users``."""

    index: object
    records: np.ndarray
    owner: np.ndarray
    n_aux_users: int
    n_users: int


def record_words(records) -> list[list[str]]:
    """Whitespace tokens of each record; ValueError when ``records`` is empty or a record has no word."""
    words = [str(t).split() for t in records]
    if not words or any(not w for w in words):
        raise ValueError("records must be a non-empty sequence of non-empty texts (the canary's m records)")
    return words


def canary_vocabulary(records) -> frozenset:
    """The set of whitespace tokens of the canary's records: every probe word belongs to it."""
    return frozenset(w for ws in record_words(records) for w in ws)


def _text(words, spans) -> str:
    return " ".join(w for r, a, b in spans for w in words[r][a:b])


def _sentence_spans(words_r: list[str], r: int) -> list[Span]:
    """Word spans of the sentences of one record (split after . ! ? at a word end)."""
    out, start = [], 0
    for i, w in enumerate(words_r):
        if _SENTENCE.search(w + " ") and i + 1 < len(words_r):
            out.append((r, start, i + 1))
            start = i + 1
    out.append((r, start, len(words_r)))
    return out if len(out) > 1 else []


def _hub(words, group, budget: int) -> tuple[Span, ...]:
    """Openings of the records in ``group`` (in order), ⌊budget/|group|⌋ words each (at least 3)."""
    each = max(3, budget // len(group))
    return tuple((int(r), 0, min(each, len(words[r]))) for r in group)


def composed_pool(records, embeddings: np.ndarray, rng: np.random.Generator,
                  config: ComposedConfig | None = None) -> tuple[list[str], list[tuple], list[str]]:
    """The base candidate pool Q of ``composed-mu_eff``: (texts, spans, kinds), the first ``config.pool_size``
    distinct texts of the kinds ``record``, ``centroid`` (openings of the records nearest the mean embedding),
    ``knn`` (a record's and its nearest records' openings), ``sentence``, ``window`` (within the first 48 words),
    ``random`` (seeded groups), in that order. Raises ValueError for empty records or mismatched embeddings.
    """
    config = config or DEFAULT_CONFIG
    words = record_words(records)
    emb = np.asarray(embeddings, dtype=np.float64)
    m = len(words)
    if emb.shape[0] != m:
        raise ValueError(f"{m} records but {emb.shape[0]} embeddings")
    texts: list[str] = []
    spans: list[tuple] = []
    kinds: list[str] = []
    seen: set[str] = set()

    def add(sp, kind):
        sp = tuple(s for s in sp if s[2] > s[1])
        t = _text(words, sp)
        if t and t not in seen and len(texts) < config.pool_size:
            seen.add(t)
            texts.append(t)
            spans.append(sp)
            kinds.append(kind)

    for r in range(m):
        add(((r, 0, len(words[r])),), "record")
    sims = emb @ emb.T
    sizes = [g for g in config.hub_sizes if g <= m]
    centre = np.argsort(-(emb @ emb.mean(axis=0)), kind="stable")
    for g in sizes:
        add(_hub(words, centre[:g], config.hub_words), "centroid")
    order = np.argsort(-sims, axis=1, kind="stable")  # each row starts with the record itself
    for g in sizes:
        for r in range(m):
            add(_hub(words, order[r, :g], config.hub_words), "knn")
    for r in range(m):
        for sp in _sentence_spans(words[r], r):
            add((sp,), "sentence")
    for w in config.windows:
        for r in range(m):
            for a in range(0, max(1, min(len(words[r]), 48) - w + 1), max(1, w // 2)):
                add(((r, a, min(a + w, len(words[r]))),), "window")
    tries = 0
    while len(texts) < config.pool_size and sizes and tries < 20 * config.pool_size:
        g = int(rng.choice(sizes))
        add(_hub(words, rng.choice(m, size=g, replace=False), config.hub_words), "random")
        tries += 1
    if not texts:
        raise ValueError("the canary's records give no candidate; check the records")
    return texts, spans, kinds


def edit_candidates(words, selected_spans, uncovered, n: int, rng: np.random.Generator,
                    hub_words: int = 40) -> list[tuple]:
    """Up to n word-level edits of the selected probes, as span tuples (duplicates possible): each ``extend``s a
    probe with the opening of an ``uncovered`` record (empty: any record), ``trim``s a fragment, ``cross``es two
    probes or ``swap``s a fragment for an uncovered record's opening, cut to ``hub_words`` words. Raises ValueError
    for n < 0."""
    if n < 0:
        raise ValueError(f"n={n} must be ≥ 0")
    sel = [tuple(s) for s in selected_spans if s]
    if not sel or n == 0:
        return []
    pull = np.asarray(list(uncovered) if len(uncovered) else range(len(words)), dtype=np.int64)
    out = []
    for _ in range(n):
        base = list(sel[int(rng.integers(len(sel)))])
        kind = int(rng.integers(4))
        each = max(3, hub_words // max(2, len(base) + 1))
        if kind == 0:
            r = int(rng.choice(pull))
            new = [(a, b, min(c, b + each)) for a, b, c in base] + [(r, 0, min(each, len(words[r])))]
        elif kind == 1 and len(base) > 1:
            new = base[:int(rng.integers(len(base)))] + base[int(rng.integers(len(base))) + 1:]
            new = new or base[:1]
        elif kind == 2 and len(sel) > 1:
            other = list(sel[int(rng.integers(len(sel)))])
            new = base[:max(1, len(base) // 2)] + other[len(other) // 2:]
        else:
            r = int(rng.choice(pull))
            i = int(rng.integers(len(base)))
            a, b, c = base[i]
            new = base[:i] + [(r, 0, min(max(3, c - b), len(words[r])))] + base[i + 1:]
        budget, kept = hub_words, []
        for a, b, c in new:
            if budget <= 0:
                break
            c = min(c, b + budget)
            if c > b:
                kept.append((int(a), int(b), int(c)))
                budget -= c - b
        if kept:
            out.append(tuple(kept))
    return out


def design_mu_eff(canary_embeddings: np.ndarray, bank: np.ndarray, probe_embeddings: np.ndarray, positions,
                  aux: AuxBackground, mechanism: MechanismConfig, audit: AuditConfig | None = None,
                  canary_index=None) -> dict:
    """μ_eff of a frozen design from aux users only, routed as the audit routes (Eq. 15; Σ̂_P of Eqs. 31–35 with
    N = ``aux.n_users``); ``positions`` None: no probes, P = the canary's top-k support. Returns dict ``mu_eff``,
    ``canary_votes_on_P``, ``canary_norm`` (‖v_P‖₂), ``record_probe_votes`` (int (m,) probes among each record's k
    nearest) and ``aux_voters``.
    """
    audit = audit or AuditConfig()
    pos = np.zeros(0, np.int64) if positions is None else np.asarray(positions, dtype=np.int64)
    k, p = mechanism.top_k, bank.shape[0]
    routes, v = canary_votes(canary_embeddings, bank, probe_embeddings, pos, mechanism, canary_index)
    coords = np.sort(pos) if positions is not None else np.flatnonzero(v)
    aux_routes = routes_with_probes(aux.index, aux.records, probe_embeddings, pos, k)
    a = restrict(contributions(aux_routes, aux.owner, aux.n_aux_users, p, mechanism.clip_norm), coords)
    vp = v[coords]
    mu = design_moments(vp, a, aux.n_users, mechanism, audit.shrinkage, audit.ridge)[2]
    return {"mu_eff": mu, "canary_votes_on_P": float(vp.sum() / max(v.sum(), 1e-300)),
            "canary_norm": float(np.linalg.norm(vp)), "record_probe_votes": np.isin(routes, coords).sum(axis=1),
            "aux_voters": int((np.asarray(abs(a).sum(axis=1)).ravel() > 0).sum())}


def solo_pool_covariance(aux: AuxBackground, pool: np.ndarray, positions, mechanism: MechanismConfig,
                         audit: AuditConfig | None = None) -> np.ndarray:
    """A conservative frozen Σ̂_Q (M, M) (Eqs. 31–35, N = ``aux.n_users``): candidate j gets the 1/(|D_u| k) vote of
    each aux record it alone would enter, nearer than the record's k-th S_base entry (no cap at k, no clip), where
    ``selection.pool_covariance`` lets near-duplicate candidates split the votes.
    """
    audit = audit or AuditConfig()
    k = mechanism.top_k
    pool = np.asarray(pool, dtype=np.float32)
    _, b_d = base_neighbors(aux.index, positions, k)
    kth = b_d[:, -1]
    owner = np.asarray(aux.owner, dtype=np.int64)
    per_user = np.bincount(owner, minlength=aux.n_aux_users).astype(np.float64)
    rows, cols = [], []
    for s in range(0, aux.records.shape[0], 4096):
        e = min(aux.records.shape[0], s + 4096)
        r, c = np.nonzero(squared_distances(aux.records[s:e], pool) < kth[s:e, None])
        rows.append(owner[s + r])
        cols.append(c)
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    h = sp.csr_matrix((1.0 / (per_user[rows] * k), (rows, cols)), shape=(aux.n_aux_users, pool.shape[0]))
    h.sum_duplicates()
    _, sigma = null_moments(aux_moments(h, audit.shrinkage), aux.n_users, mechanism, audit.ridge)
    return sigma


def _encode(encoder, texts, stats: dict) -> np.ndarray:
    emb = encoder.encode(texts, desc="composed pool")
    last = getattr(encoder, "last_stats", {}) or {}
    stats["encoded"] += int(last.get("encoded", len(texts)))
    stats["cached"] += int(last.get("cached", 0))
    return np.asarray(emb, dtype=np.float32)


def design_composed(encoder, canary_id: str, canary_texts, canary_embeddings: np.ndarray, bank: np.ndarray,
                    positions, mechanism: MechanismConfig, aux: AuxBackground, rng: np.random.Generator,
                    audit: AuditConfig | None = None, config: ComposedConfig | None = None):
    """The frozen ``composed-mu_eff`` design (``ProbeDesign``) of one real canary: ``composed_pool`` → Σ̂_Q
    (``config.covariance``) → Alg. B.1 with J_μeff; then ``config.refine_rounds`` times the selected probes' edits
    join the pool and both run again. The round with the largest aux μ_eff is kept, ties to the earlier. Raises
    ValueError if ``config.pool_size`` < r; PoolShortfallError for fewer than r distinct candidates.
    """
    t0 = time.perf_counter()
    config = config or DEFAULT_CONFIG
    audit = audit or AuditConfig()
    pos = np.asarray(positions, dtype=np.int64)
    texts_in = list(canary_texts)
    words = record_words(texts_in)
    emb = np.asarray(canary_embeddings, dtype=np.float32)
    texts, spans, kinds = composed_pool(texts_in, emb, rng, config)
    if config.pool_size < pos.size:
        raise ValueError(f"ComposedConfig.pool_size={config.pool_size} < r={pos.size} probes: raise pool_size to at "
                         "least r (default 2048) or lower r (max_probes)")
    if len(texts) < pos.size:
        raise PoolShortfallError(f"canary {canary_id}: its {len(texts_in)} records give only {len(texts)} distinct "
                                 f"composed candidates < r={pos.size} probes (records too short or repetitive; "
                                 "pool_size is not the limit); lower r (max_probes) or audit another canary",
                                 list(texts), np.arange(len(texts)), pos.size - len(texts))
    stats = {"encoded": 0, "cached": 0}
    pool_emb = _encode(encoder, texts, stats)
    index = build_neighbor_index(emb, bank, mechanism.top_k + pos.size)
    rounds, best = [], None
    seen = set(texts)
    for rnd in range(config.refine_rounds + 1):
        if rnd:
            cur = best[2]
            summ = design_mu_eff(emb, bank, cur.probe_embeddings, pos, aux, mechanism, audit, index)
            uncovered = np.flatnonzero(summ["record_probe_votes"] < mechanism.top_k)
            n_old = len(texts)
            for sp in edit_candidates(words, [spans[i] for i in cur.pool_indices], uncovered, config.refine_edits, rng,
                                      config.hub_words):
                t = _text(words, sp)
                if t and t not in seen:  # new texts only
                    seen.add(t)
                    texts.append(t)
                    spans.append(sp)
                    kinds.append("edit")
            if len(texts) == n_old:
                break
            pool_emb = np.concatenate([pool_emb, _encode(encoder, texts[n_old:], stats)])
        t1 = time.perf_counter()
        if config.covariance == "solo":
            sigma = solo_pool_covariance(aux, pool_emb, pos, mechanism, audit)
        else:
            sigma = pool_covariance(aux.index, aux.records, aux.owner, aux.n_aux_users, pool_emb, pos, mechanism,
                                    n_users=aux.n_users, shrinkage=audit.shrinkage, ridge=audit.ridge)
        design = design_selected("composed-mu_eff", canary_id, texts_in, emb, texts, pool_emb, bank, pos,
                                 mechanism.top_k, sigma, index=index)
        summ = design_mu_eff(emb, bank, design.probe_embeddings, pos, aux, mechanism, audit, index)
        rounds.append({"round": rnd, "pool_size": len(texts), "objective": float(design.info["selection_scores"][-1]),
                       "aux_mu_eff": summ["mu_eff"], "canary_votes_on_P": summ["canary_votes_on_P"],
                       "records_fully_on_P": int((summ["record_probe_votes"] == mechanism.top_k).sum()),
                       "seconds": time.perf_counter() - t1})
        if best is None or summ["mu_eff"] > best[0]:
            best = (summ["mu_eff"], rnd, design)
    _, kept_round, design = best
    chosen = [int(i) for i in design.pool_indices]
    info = {**{k: v for k, v in design.info.items() if not k.startswith("selection_scores")},
            "beyond_paper": BEYOND_PAPER_NOTE, "pool_generator": "composed (canary's own records)",
            "pool_source": "composed", "pool_size": len(texts), "kept_round": kept_round, "rounds": rounds,
            "pool_kinds": dict(Counter(kinds[i] for i in chosen)), "probe_spans": [list(map(list, spans[i])) for i in chosen],
            "encodes": stats["encoded"], "cached_texts": stats["cached"],
            "design_seconds": time.perf_counter() - t0, "composed_config": config.as_dict()}
    return replace(design, info=info)


def probe_vote_examples(design, bank: np.ndarray, top_k: int = 5, records=None, bank_texts=None) -> list[dict]:
    """For some canary ``records`` (default the first 3), the k entries each votes for on the design's bank: dicts
    ``record``, ``text``, ``votes`` (k dicts ``probe`` slot or None, ``text``, squared ``distance``). Raises
    ValueError for a design without probes or a record index out of range.
    """
    if design.probe_embeddings is None:
        raise ValueError(f"design {design.variant!r} has no probes to show")
    m = len(design.canary_texts)
    records = list(range(min(3, m))) if records is None else [int(r) for r in records]
    if any(not 0 <= r < m for r in records):
        raise ValueError(f"records must lie in [0, {m}); got {records}")
    emb = design.canary_embeddings[records]
    index = build_neighbor_index(emb, bank, top_k + len(design.positions))
    routes = routes_with_probes(index, emb, design.probe_embeddings, design.positions, top_k)
    slot_of = {int(p): t for t, p in enumerate(design.positions)}
    out = []
    for row, r in enumerate(records):
        votes = []
        for j in routes[row]:
            t = slot_of.get(int(j))
            vec = design.probe_embeddings[t] if t is not None else bank[int(j)]
            d = float(squared_distances(emb[row:row + 1], vec[None, :])[0, 0])
            shown = (design.probe_texts[t] if t is not None
                     else f"bank #{int(j)}" + (f": {bank_texts[int(j)]}" if bank_texts is not None else ""))
            votes.append({"probe": t, "text": shown, "distance": d})
        out.append({"record": r, "text": design.canary_texts[r], "votes": votes})
    return out
