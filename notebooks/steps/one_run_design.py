"""The multi-canary design of a one-run audit of PE: m canaries, each with its own block of probe coordinates.

Canary i's block holds ``copies`` verbatim copies of each of its records; exact duplicates tie to the lowest
index (``pe.mechanism``), so it votes only on its own block, and with k copies of one record ‖v_P‖ = C and
μ_eff = 1/σ (Eq. 20). Variants: ``nonce`` and ``natural`` (real users' records). Each canary then joins with
probability ½ (Steinke et al. 2023, §2) on top of Poisson q (``steps.one_run``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pe_kit.attack.variants import nonce_strings, replacement_positions

__all__ = ["ONE_RUN_VARIANTS", "OneRunDesign", "max_canaries", "design_one_run"]

ONE_RUN_VARIANTS = ("nonce", "natural")


@dataclass(frozen=True)
class OneRunDesign:
    """A frozen multi-canary design: the canaries and the bank positions of their blocks.

    ``canary_embeddings``: float32 (m·n_rec, d), canary i's records at rows [i·n_rec, (i+1)·n_rec); ``owner``: the
    canary of each row; ``blocks``: int64 (m, n_rec·copies) bank positions, column j a copy of record j // copies.
    """

    variant: str
    canary_ids: tuple
    canary_texts: tuple
    canary_embeddings: np.ndarray
    owner: np.ndarray
    blocks: np.ndarray
    bank_size: int
    copies: int
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.variant not in ONE_RUN_VARIANTS:
            raise ValueError(f"variant={self.variant!r} is unknown; use one of {ONE_RUN_VARIANTS}")
        if self.blocks.ndim != 2 or self.blocks.shape[0] != len(self.canary_ids):
            raise ValueError("blocks must have one row of bank positions per canary")
        for a in (self.canary_embeddings, self.owner, self.blocks):
            a.setflags(write=False)

    @property
    def m(self) -> int:
        """Number of canaries."""
        return int(self.blocks.shape[0])

    @property
    def n_probes(self) -> int:
        """Probe coordinates in the bank (m · n_rec · copies)."""
        return int(self.blocks.size)

    @property
    def probe_share(self) -> float:
        """Share of the bank's p coordinates taken by probes."""
        return self.n_probes / self.bank_size

    def bank(self, base_bank: np.ndarray) -> np.ndarray:
        """The frozen bank: ``base_bank`` (p, d), each block overwritten by its copies; ValueError on a bad shape."""
        base = np.asarray(base_bank, dtype=np.float32)
        if base.shape != (self.bank_size, self.canary_embeddings.shape[1]):
            raise ValueError(f"base_bank has shape {base.shape}; the design needs ({self.bank_size}, "
                             f"{self.canary_embeddings.shape[1]})")
        out = base.copy()
        n_rec = self.blocks.shape[1] // self.copies
        rows = (np.arange(self.m)[:, None] * n_rec + np.arange(self.blocks.shape[1])[None, :] // self.copies)
        out[self.blocks.ravel()] = self.canary_embeddings[rows.ravel()]
        return out


def max_canaries(bank_size: int, probe_share: float, copies: int = 5, records_per_canary: int = 1) -> int:
    """Largest m whose blocks fit in ``probe_share`` of the bank: ⌊share·p / (copies·records_per_canary)⌋.
    Raises ValueError for p < 1, a share outside (0, 1], or copies or records < 1."""
    if int(bank_size) != bank_size or bank_size < 1:
        raise ValueError(f"bank_size={bank_size} must be an integer ≥ 1")
    if not 0 < probe_share <= 1:
        raise ValueError(f"probe_share={probe_share} must lie in (0, 1] (a share of the bank's p coordinates)")
    if copies < 1 or records_per_canary < 1:
        raise ValueError(f"copies={copies} and records_per_canary={records_per_canary} must be ≥ 1")
    budget = int(np.floor(round(probe_share * bank_size, 9)))  # 0.29·100 = 28.999…96 in floats: 29 coordinates
    return budget // (int(copies) * int(records_per_canary))


def design_one_run(encoder, bank_size: int, n_canaries: int, rng: np.random.Generator, *, variant: str = "nonce",
                   copies: int = 5, records_per_canary: int = 1, natural=None) -> OneRunDesign:
    """A frozen ``OneRunDesign`` of ``n_canaries`` canaries with disjoint blocks in one bank.

    ``encoder``: ``encode(texts, desc=...)``; ``rng``: nonce strings, then the positions; ``copies`` per record
    (≥ top_k puts every vote on the block); ``natural``: for ``"natural"``, ≥ m (user_id, texts) pairs (users with
    fewer than ``records_per_canary`` texts skipped). Raises ValueError on an unknown variant, blocks that do not
    fit in the bank, or too few natural users.
    """
    if variant not in ONE_RUN_VARIANTS:
        raise ValueError(f"variant={variant!r} is unknown; use one of {ONE_RUN_VARIANTS}")
    m, n_rec, copies = int(n_canaries), int(records_per_canary), int(copies)
    if m < 1 or n_rec < 1 or copies < 1:
        raise ValueError(f"n_canaries={m}, records_per_canary={n_rec}, copies={copies} must all be ≥ 1")
    n_probes = m * n_rec * copies
    if n_probes > bank_size:
        raise ValueError(f"{m} canaries × {n_rec} records × {copies} copies = {n_probes} probes do not fit "
                         f"in a bank of p={bank_size}; lower n_canaries (max_canaries gives the largest m)")
    if variant == "nonce":
        texts = nonce_strings(m * n_rec, rng)
        ids = tuple(f"nonce-canary-{i}" for i in range(m))
        per = tuple(tuple(texts[i * n_rec:(i + 1) * n_rec]) for i in range(m))
    else:
        users = [(uid, tuple(t[:n_rec])) for uid, t in (natural or []) if len(t) >= n_rec]
        if len(users) < m:
            raise ValueError(f"natural needs {m} users with ≥ {n_rec} records; got {len(users)}: lower n_canaries")
        ids = tuple(u for u, _ in users[:m])
        per = tuple(t for _, t in users[:m])
    emb = np.asarray(encoder.encode([t for ts in per for t in ts], desc=f"one-run {variant}"), dtype=np.float32)
    positions = replacement_positions(bank_size, n_probes, rng).reshape(m, n_rec * copies)
    return OneRunDesign(variant=variant, canary_ids=ids, canary_texts=per, canary_embeddings=emb,
                        owner=np.repeat(np.arange(m, dtype=np.int64), n_rec), blocks=positions,
                        bank_size=int(bank_size), copies=copies,
                        info={"records_per_canary": n_rec, "copies": copies, "probe_share": n_probes / bank_size})
