"""Attack variants: canaries and the probes they place in the shared bank (Table 1, App. B).

Implemented here: ``ordinary`` (real canary, bank unchanged, P = the canary's natural top-k
coordinates) and ``nonce`` (synthetic canary of high-entropy strings; 64 probes drawn uniformly
from an independent 512-string nonce pool and placed at seeded replacement positions).
"""
from __future__ import annotations

import string
from dataclasses import dataclass, field

import numpy as np

__all__ = ["VARIANTS", "ProbeDesign", "replacement_positions", "nonce_strings", "design_ordinary", "design_nonce"]

VARIANTS = ("ordinary", "exact", "paraphrase", "paraphrase-norm", "paraphrase-mu_eff", "nonce", "nonce-norm",
            "nonce-mu_eff")

_NONCE_ALPHABET = np.array(list(string.ascii_letters + string.digits))


@dataclass(frozen=True)
class ProbeDesign:
    """A frozen attack: the canary, and the probes replacing bank positions (App. B).

    Attributes:
        variant: one of ``VARIANTS``.
        canary_id: user id (real canary) or ``nonce-<seed>`` (synthetic).
        canary_texts: tuple of the canary's m records.
        canary_embeddings: float32 (m, d).
        probe_texts: tuple of r probe texts (empty for ``ordinary``).
        probe_embeddings: float32 (r, d) or None.
        positions: int64 (r,) bank positions; probe t sits at ``positions[t]`` (None for ``ordinary``).
        pool_indices: int64 (r,) indices of the chosen probes in their pool (selection order).
        info: free-form provenance (pool size, seeds, scores).
    """

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
        if self.variant not in VARIANTS:
            raise ValueError(f"variant={self.variant!r} is unknown; use one of {VARIANTS}")
        if self.probe_embeddings is not None:
            if self.positions is None or len(self.positions) != len(self.probe_embeddings):
                raise ValueError("positions must give one bank position per probe")
            self.probe_embeddings.setflags(write=False)
            self.positions.setflags(write=False)


def replacement_positions(bank_size: int, r: int, rng: np.random.Generator) -> np.ndarray:
    """r distinct ordered bank positions, drawn uniformly (App. B: reserved before selection).

    Returns int64 (r,). Raises ValueError if r > bank_size or r < 0.
    """
    if not 0 <= r <= bank_size:
        raise ValueError(f"cannot reserve r={r} positions in a bank of {bank_size}; lower r")
    return rng.choice(bank_size, size=r, replace=False).astype(np.int64)


def nonce_strings(n: int, rng: np.random.Generator, words: int = 4, word_length: int = 6) -> list[str]:
    """n high-entropy strings of ``words`` random alphanumeric words (Table 1 "nonce").

    Each string carries words·word_length·log2(62) ≈ 143 bits by default; independent of any text.
    Returns a list of distinct str. Raises ValueError for n < 0.
    """
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
    """Synthetic nonce canary and r probes drawn uniformly without replacement from an independent pool.

    Args:
        encoder: object with ``encode(texts) -> float32 (n, d)`` (``pe_kit.embedding.Encoder``).
        bank_size: p, to reserve r replacement positions.
        rng: seeds the canary strings, the pool, the positions and the draw (in that order).
        records: m canary records (64); pool_size: M (512); r: probes (64).

    Raises:
        ValueError: if r > pool_size or r > bank_size.
    """
    if r > pool_size:
        raise ValueError(f"r={r} probes cannot be drawn from a pool of {pool_size}; raise pool_size")
    canary = nonce_strings(records, rng)
    pool = nonce_strings(pool_size + records, rng)
    pool = [s for s in pool if s not in set(canary)][:pool_size]
    positions = replacement_positions(bank_size, r, rng)
    chosen = rng.choice(pool_size, size=r, replace=False).astype(np.int64)
    emb = encoder.encode(canary + [pool[i] for i in chosen], desc="nonce")
    return ProbeDesign("nonce", f"nonce-{int(rng.integers(1 << 31))}", tuple(canary), emb[:records],
                       tuple(pool[i] for i in chosen), emb[records:], positions, chosen,
                       {"pool_size": pool_size, "r": r})
