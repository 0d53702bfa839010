"""Attack variants: canaries and the probes they place in the shared bank (Table 1, App. B).

==================  ==============  ===================================================================
variant             canary          probes (r = 64 at seeded replacement positions ρ_1..ρ_r)
==================  ==============  ===================================================================
ordinary            real user       none; P = the canary's natural top-k coordinates
exact               real user       one verbatim copy of each of its m records (r = m), zero distance
paraphrase          real user       r of an M = 512 paraphrase pool, spread across records, no score
paraphrase-norm     real user       Alg. B.1 on the paraphrase pool, J_norm = ‖w_P‖²
paraphrase-mu_eff   real user       Alg. B.1 on the paraphrase pool, J_μeff = w_Pᵀ Σ̂_P⁻¹ w_P
nonce               synthetic       r drawn uniformly from an independent 512-nonce pool
nonce-norm          synthetic       Alg. B.1 on the nonce pool, J_norm
nonce-mu_eff        synthetic       Alg. B.1 on the nonce pool, J_μeff
==================  ==============  ===================================================================

Beyond the paper: ``composed-mu_eff`` (``attack.composed_probes``), selected by name only, never by ``"all"``.
Probe t is written to bank position ρ_t; a ``ProbeDesign`` is frozen before any trial.
"""
from __future__ import annotations

import string
from dataclasses import dataclass, field

import numpy as np

from pe_kit.settings.sections import VARIANT_NAMES

__all__ = ["VARIANTS", "BEYOND_PAPER_VARIANTS", "ALL_VARIANTS", "REAL_VARIANTS", "NONCE_VARIANTS",
           "PARAPHRASE_VARIANTS", "resolve_variants", "unknown_variant", "ProbeDesign", "variant_objective",
           "replacement_positions", "nonce_strings", "nonce_canary_and_pool", "spread_select", "design_ordinary",
           "design_exact", "design_paraphrase", "design_selected", "design_nonce"]

ALL_VARIANTS = VARIANT_NAMES  # every name a setting accepts
VARIANTS = ALL_VARIANTS[:8]  # Table 1
REAL_VARIANTS = VARIANTS[:5]
NONCE_VARIANTS = VARIANTS[5:]
PARAPHRASE_VARIANTS = VARIANTS[2:5]
BEYOND_PAPER_VARIANTS = ALL_VARIANTS[8:]
_NONCE_ALPHABET = np.array(list(string.ascii_letters + string.digits))


def resolve_variants(variants) -> list[str]:
    """Variant names from a setting: ``"all"`` → Table 1's eight; else a comma-separated string or a sequence of
    them (order kept, duplicates dropped). Raises ValueError naming an unknown variant, or for an empty setting."""
    items = [variants] if isinstance(variants, str) else list(variants)
    names = [v.strip() for item in items for v in str(item).split(",") if v.strip()]
    if names == ["all"]:
        return list(VARIANTS)
    for v in names:
        if v not in ALL_VARIANTS:
            raise ValueError(f"variants contains {v!r}; use names from {ALL_VARIANTS} or 'all'")
    if not names:
        raise ValueError("variants is empty; pass at least one of " + ", ".join(VARIANTS))
    return list(dict.fromkeys(names))


def unknown_variant(variant, known) -> ValueError:
    """The ValueError for a variant name not in ``known``: the value, the closest known name and every known name."""
    import difflib

    known = tuple(known)
    key = str(variant).strip().lower().replace("_", "-")
    exact = [k for k in known if k.lower().replace("_", "-") == key]
    close = exact or difflib.get_close_matches(str(variant), known, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ValueError(f"variant={variant!r} is unknown{hint}; use one of {known}")


@dataclass(frozen=True)
class ProbeDesign:
    """A frozen attack (App. B): the canary (float32 (m, d) ``canary_embeddings``) and the r probes (None for
    ``ordinary``), probe t at bank position ``positions[t]``; ``pool_indices`` in selection order."""

    variant: str
    canary_id: str
    canary_texts: tuple[str, ...]
    canary_embeddings: np.ndarray
    probe_texts: tuple[str, ...] = ()
    probe_embeddings: np.ndarray | None = None
    positions: np.ndarray | None = None
    pool_indices: np.ndarray | None = None
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.variant not in ALL_VARIANTS:
            raise ValueError(f"variant={self.variant!r} is unknown; use one of {ALL_VARIANTS}")
        if self.probe_embeddings is not None:
            if self.positions is None or len(self.positions) != len(self.probe_embeddings):
                raise ValueError("positions must give one bank position per probe")
            self.probe_embeddings.setflags(write=False)
            self.positions.setflags(write=False)


def replacement_positions(bank_size: int, r: int, rng: np.random.Generator) -> np.ndarray:
    """r distinct ordered bank positions, drawn uniformly (App. B); raises ValueError unless 0 ≤ r ≤ bank_size."""
    if not 0 <= r <= bank_size:
        raise ValueError(f"cannot reserve r={r} positions in a bank of {bank_size}; lower r")
    return rng.choice(bank_size, size=r, replace=False).astype(np.int64)


def nonce_strings(n: int, rng: np.random.Generator, words: int = 4, word_length: int = 6) -> list[str]:
    """n distinct strings of ``words`` random alphanumeric words (Table 1 "nonce"). Raises ValueError for n < 0."""
    if n < 0:
        raise ValueError(f"n={n} must be ≥ 0")
    out: list[str] = []
    seen = set()
    while len(out) < n:
        chars = rng.choice(_NONCE_ALPHABET, size=(n - len(out), words, word_length))
        for row in chars:
            s = " ".join("".join(w) for w in row)
            if s not in seen:
                seen.add(s)
                out.append(s)
    return out


def design_ordinary(canary_id: str, canary_texts, canary_embeddings: np.ndarray) -> ProbeDesign:
    """The passive baseline: a real canary, the bank unchanged (App. B "Ordinary")."""
    return ProbeDesign("ordinary", canary_id, tuple(canary_texts), np.asarray(canary_embeddings, np.float32))


def design_nonce(encoder, bank_size: int, rng: np.random.Generator, records: int = 64, pool_size: int = 512,
                 r: int = 64) -> ProbeDesign:
    """Synthetic nonce canary and r probes drawn uniformly without replacement from an independent pool; ``rng``
    draws the canary, the pool, the positions and the probes, in that order. Raises ValueError if r > pool_size or
    r > bank_size."""
    if r > pool_size:
        raise ValueError(f"r={r} probes cannot be drawn from a pool of {pool_size}; raise pool_size")
    canary, pool = nonce_canary_and_pool(records, pool_size, rng)
    positions = replacement_positions(bank_size, r, rng)
    chosen = rng.choice(pool_size, size=r, replace=False).astype(np.int64)
    emb = encoder.encode(canary + [pool[i] for i in chosen], desc="nonce")
    return ProbeDesign("nonce", f"nonce-{int(rng.integers(1 << 31))}", tuple(canary), emb[:records],
                       tuple(pool[i] for i in chosen), emb[records:], positions, chosen,
                       {"pool_size": pool_size, "r": r})


def variant_objective(variant: str) -> str | None:
    """Alg. B.1 objective of a variant: ``"norm"``, ``"mu_eff"`` or None (unoptimized). Raises ValueError."""
    if variant not in ALL_VARIANTS:
        raise ValueError(f"variant={variant!r} is unknown; use one of {ALL_VARIANTS}")
    if variant.endswith("-norm"):
        return "norm"
    if variant.endswith("-mu_eff"):
        return "mu_eff"
    return None


def nonce_canary_and_pool(records: int, pool_size: int, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """A synthetic nonce canary (``records`` strings), then an independent pool of ``pool_size`` nonces without
    the canary's strings (App. B). Raises ValueError for records < 1 or pool_size < 1."""
    if records < 1 or pool_size < 1:
        raise ValueError(f"records={records} and pool_size={pool_size} must be ≥ 1")
    canary = nonce_strings(records, rng)
    taken = set(canary)
    pool = [s for s in nonce_strings(pool_size + records, rng) if s not in taken][:pool_size]
    return canary, pool


def spread_select(sources: np.ndarray, r: int, rng: np.random.Generator) -> np.ndarray:
    """r distinct pool indices spread across the canary's records, without any score (App. B "Paraphrase"): records
    round-robin in a seeded order, a random unused entry each (``sources``: int (M,) source record per entry).
    Raises ValueError unless 0 ≤ r ≤ M."""
    src = np.asarray(sources, dtype=np.int64).ravel()
    if not 0 <= r <= src.size:
        raise ValueError(f"r={r} probes cannot be chosen from a pool of {src.size}; lower r or enlarge the pool")
    records = np.unique(src)
    queues = {int(g): list(rng.permutation(np.flatnonzero(src == g))) for g in records}
    visit = [int(g) for g in rng.permutation(records)]
    out: list[int] = []
    while len(out) < r:
        for g in visit:
            if queues[g] and len(out) < r:
                out.append(int(queues[g].pop()))
    return np.asarray(out, dtype=np.int64)


def _emb(x, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D float array (n, d); got shape {x.shape}")
    return x


def design_exact(canary_id: str, canary_texts, canary_embeddings: np.ndarray, positions: np.ndarray) -> ProbeDesign:
    """One verbatim copy of each canary record at the first m reserved positions (App. B "Exact"). Raises
    ValueError for fewer than m positions or mismatched shapes."""
    emb = _emb(canary_embeddings, "canary_embeddings")
    texts = tuple(canary_texts)
    pos = np.asarray(positions, dtype=np.int64)
    if len(texts) != emb.shape[0]:
        raise ValueError(f"{len(texts)} canary texts but {emb.shape[0]} embeddings")
    if pos.size < len(texts):
        raise ValueError(f"exact needs one position per record: {len(texts)} records, {pos.size} positions; "
                         "raise r (StudyConfig.max_probes)")
    return ProbeDesign("exact", canary_id, texts, emb, texts, emb.copy(), pos[:len(texts)].copy(),
                       np.arange(len(texts), dtype=np.int64), {"r": len(texts), "pool_size": len(texts)})


def design_paraphrase(canary_id: str, canary_texts, canary_embeddings: np.ndarray, pool_texts, pool_embeddings,
                      pool_sources, positions: np.ndarray, rng: np.random.Generator, info: dict | None = None) -> ProbeDesign:
    """Unoptimized paraphrase attack: r = len(positions) pool entries spread across records (App. B,
    :func:`spread_select`); ``info`` joins ``ProbeDesign.info``. Raises ValueError on inconsistent pool shapes or
    r > M."""
    pool_emb = _emb(pool_embeddings, "pool_embeddings")
    pool_texts = list(pool_texts)
    if len(pool_texts) != pool_emb.shape[0] or np.shape(pool_sources) != (len(pool_texts),):
        raise ValueError("pool_texts, pool_embeddings and pool_sources must have one row per pool entry")
    pos = np.asarray(positions, dtype=np.int64)
    chosen = spread_select(pool_sources, pos.size, rng)
    src = np.asarray(pool_sources)[chosen]
    return ProbeDesign("paraphrase", canary_id, tuple(canary_texts), _emb(canary_embeddings, "canary_embeddings"),
                       tuple(pool_texts[i] for i in chosen), pool_emb[chosen].copy(), pos.copy(), chosen,
                       {"pool_size": len(pool_texts), "r": int(pos.size),
                        "records_covered": int(np.unique(src).size), "probe_sources": src.tolist(), **(info or {})})


def design_selected(variant: str, canary_id: str, canary_texts, canary_embeddings: np.ndarray, pool_texts,
                    pool_embeddings: np.ndarray, bank: np.ndarray, positions: np.ndarray, top_k: int,
                    sigma: np.ndarray | None = None, index=None, info: dict | None = None) -> ProbeDesign:
    """Run Alg. B.1 for a ``*-norm`` / ``*-mu_eff`` variant and freeze the design (App. B).

    ``bank``: float32 (p, d) before replacement; ``sigma``: the frozen (M, M) Σ̂_Q for μ_eff; ``index``: optional
    ``NeighborIndex`` of the canary on ``bank`` (depth ≥ k + r). Raises ValueError for an unoptimized variant, a
    missing Σ̂, or shape errors."""
    from pe_kit.attack.selection import base_neighbors, greedy_select
    from pe_kit.pe.mechanism import build_neighbor_index, squared_distances

    objective = variant_objective(variant)
    if objective is None:
        raise ValueError(f"variant={variant!r} is not optimized; design_selected takes a *-norm or *-mu_eff variant")
    emb = _emb(canary_embeddings, "canary_embeddings")
    pool_emb = _emb(pool_embeddings, "pool_embeddings")
    pool_texts = list(pool_texts)
    if len(pool_texts) != pool_emb.shape[0]:
        raise ValueError(f"{len(pool_texts)} pool texts but {pool_emb.shape[0]} pool embeddings")
    pos = np.asarray(positions, dtype=np.int64)
    if index is None:
        index = build_neighbor_index(emb, bank, top_k + pos.size)
    b_idx, b_d = base_neighbors(index, pos, top_k)
    sel = greedy_select(squared_distances(emb, pool_emb), b_d, b_idx, pos, objective, sigma)
    return ProbeDesign(variant, canary_id, tuple(canary_texts), emb, tuple(pool_texts[i] for i in sel.order),
                       pool_emb[sel.order].copy(), pos.copy(), sel.order,
                       {"pool_size": len(pool_texts), "r": int(pos.size), "objective": objective,
                        "selection_scores": sel.scores.tolist(), "selection_ties": sel.ties.tolist(),
                        "selection_counts": sel.counts.tolist(), "selection_seconds": sel.seconds,
                        "selection_method": "incremental",
                        "canary_probe_vote_fraction": float(sel.counts.sum() / (emb.shape[0] * top_k)),
                        **(info or {})})
