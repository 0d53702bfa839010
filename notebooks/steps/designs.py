"""Frozen designs of the study's canaries and what they put on the probes, without trials (notebooks 02, 03): slots,
seeds, μ_eff and vote placement (Eqs. 1, 3, 20, 34–35), paraphrase examples and votes (Table 1, App. B).
"""
from __future__ import annotations

import warnings

import numpy as np

from pe_kit.attack.variants import ALL_VARIANTS, VARIANTS, resolve_variants
from pe_kit.audit.moments import aux_moments, mu_eff, null_moments, restrict
from pe_kit.settings import AuditConfig, MechanismConfig, check_param
from pe_kit.study.world import World, canary_contribution, make_design

__all__ = ["REAL_VARIANTS", "NONCE_VARIANTS", "canary_slots", "try_design", "design_for", "design_summary",
           "design_rows", "paraphrase_examples", "vote_table"]

REAL_VARIANTS = tuple(v for v in VARIANTS if not v.startswith("nonce"))
NONCE_VARIANTS = tuple(v for v in VARIANTS if v.startswith("nonce"))


def canary_slots(variant: str, per_variant: int, n_canary: int) -> list[int]:
    """Canary-split slots used by ``variant``: real-canary variants get disjoint blocks ``[i·per_variant,
    (i+1)·per_variant)`` when there are enough canaries (paper: 40 = 8 × 5), else wrapping; nonce slots only index
    draws; ``composed-mu_eff`` shares paraphrase-mu_eff's canaries."""
    per_variant = check_param("per_variant", per_variant)
    if variant in NONCE_VARIANTS:
        return list(range(per_variant))
    n_canary = check_param("n_canary", n_canary)
    i = REAL_VARIANTS.index("paraphrase-mu_eff" if variant == "composed-mu_eff" else variant)
    return [(i * per_variant + j) % n_canary for j in range(per_variant)]


def _rng(seed: int, variant: str, j: int, purpose: int, salt: int = 0) -> np.random.Generator:
    return np.random.default_rng([int(seed), ALL_VARIANTS.index(variant), int(j), int(purpose), int(salt)])


def try_design(world: World, variant: str, j: int, slot: int, seed: int, mechanism: MechanismConfig | None = None,
               pool_size: int | None = None, generator=None):
    """:func:`design_for` as ``(design, None)`` or ``(None, reason)`` (``"not implemented"``, ``"pool shortfall"``)."""
    from pe_kit.text.generators.base import PoolShortfallError

    kw = {}
    if mechanism is not None:
        kw["mechanism"] = mechanism
    if pool_size is not None:
        kw["pool_size"] = pool_size
    if generator is not None:
        kw["generator"] = generator
    try:
        return make_design(world, variant, slot, _rng(seed, variant, j, 11), **kw), None
    except NotImplementedError as exc:
        return None, f"not implemented: {exc}"
    except PoolShortfallError as exc:  # the canary's records admit too few distinct candidates
        return None, f"pool shortfall: {exc}"


def design_for(world: World, variant: str, j: int, slot: int, seed: int, mechanism: MechanismConfig | None = None,
               pool_size: int | None = None, generator=None):
    """The frozen design of ``variant`` for its j-th canary (canary-split ``slot``), seeded by (seed, variant, j), with
    ``mechanism`` (default: paper values), ``pool_size`` M (512, App. B) and paraphrase ``generator``. Returns a
    ``ProbeDesign``, or None with a warning for an unimplemented variant or a pool shortfall
    (``PoolShortfallError``); other errors propagate."""
    design, reason = try_design(world, variant, j, slot, seed, mechanism, pool_size, generator)
    if design is None:
        warnings.warn(f"variant {variant!r}, canary slot {slot} skipped: {reason}", stacklevel=2)
    return design


def design_summary(world: World, design, mechanism: MechanismConfig, audit: AuditConfig) -> dict:
    """Where the canary's votes go and its μ_eff on a frozen design, without trials (Eqs. 1, 3, 20, 34–35): a dict of
    ``variant, canary_id, n_coords`` (|P|), ``canary_votes_on_P``, ``canary_norm`` (‖v_P‖₂ ≤ C),
    ``canary_norm_full``, ``clip_norm``, ``mu_eff``, ``mu_eff_ceiling`` (1/σ), ``background_voters``,
    ``background_vote_share`` and the truncation counts."""
    v_full = canary_contribution(world, design, mechanism)
    coords = np.asarray(design.positions if design.positions is not None else np.flatnonzero(v_full), np.int64)
    coords = np.sort(coords)
    v = v_full[coords]
    aux = world.contributions("aux", mechanism, design)
    test = world.contributions("test", mechanism, design)
    m0, sigma = null_moments(aux_moments(restrict(aux, coords), audit.shrinkage), test.shape[0], mechanism,
                             audit.ridge)
    tP = restrict(test, coords)
    totals = np.asarray(test.sum(axis=1)).ravel()
    onP = np.asarray(tP.sum(axis=1)).ravel()
    sigma_ = mechanism.noise_multiplier
    return {"variant": design.variant, "canary_id": design.canary_id, "n_coords": int(coords.size),
            "canary_votes_on_P": float(v.sum() / max(v_full.sum(), 1e-300)), "canary_norm": float(np.linalg.norm(v)),
            "canary_norm_full": float(np.linalg.norm(v_full)), "clip_norm": mechanism.clip_norm,
            "mu_eff": mu_eff(v, sigma) if coords.size else 0.0,
            "mu_eff_ceiling": (1 / sigma_) if sigma_ > 0 else float("inf"),
            "background_voters": int((onP > 0).sum()),
            "background_vote_share": float(np.mean(onP / np.maximum(totals, 1e-300))), **world.truncation}


def design_rows(world: World, variants, per_variant: int, mechanism: MechanismConfig, audit: AuditConfig, seed: int,
                pool_size: int | None = None, generator=None) -> tuple[list[dict], list[str], dict]:
    """:func:`design_summary` rows (``experiment="probe_design"``) of ``per_variant`` canaries per variant, seeded as
    ``steps.audits``; returns (rows, skipped reasons, designs: variant → its first design)."""
    rows, skipped, designs = [], [], {}
    for variant in resolve_variants(variants):
        for j, slot in enumerate(canary_slots(variant, per_variant, world.config.n_canary)):
            design, reason = try_design(world, variant, j, slot, seed, mechanism, pool_size, generator=generator)
            if design is None:
                skipped.append(f"{variant} (canary slot {slot}): {reason[:160]}")
                if reason.startswith("not implemented"):
                    break
                continue
            designs.setdefault(variant, design)
            rows.append({**design_summary(world, design, mechanism, audit), "canary_slot": slot, "canary_index": j,
                         "n_probes": 0 if design.positions is None else len(design.positions),
                         "experiment": "probe_design", **{f"study_{k}": v for k, v in world.config.as_dict().items()},
                         **{f"mech_{k}": v for k, v in mechanism.as_dict().items()}})
    return rows, skipped, designs


def paraphrase_examples(design, n: int = 5, world: World | None = None):
    """``n`` (≥ 1) source records beside their paraphrase probes (a ``paraphrase`` design's ``info["probe_sources"]``):
    a DataFrame of ``record``, ``source``, ``paraphrase``, ``generator`` and, with ``world``, ``smollm2`` (the shipped
    SmolLM2 pool's rewrite; empty when none matches). Raises ValueError for another design or n < 1."""
    import pandas as pd

    if n < 1:
        raise ValueError(f"n={n} must be ≥ 1")
    sources = design.info.get("probe_sources") if design.variant == "paraphrase" else None
    if sources is None:
        raise ValueError(f"paraphrase_examples needs a 'paraphrase' design with probe sources; got {design.variant!r}")
    first = {}
    for t, s in enumerate(sources):
        first.setdefault(int(s), t)
    order = list(first.values()) + [t for t in range(len(sources)) if t not in first.values()]
    gen = design.info.get("pool_generator", "unknown")
    df = pd.DataFrame([{"record": int(sources[t]), "source": design.canary_texts[int(sources[t])],
                        "paraphrase": design.probe_texts[t], "generator": gen} for t in order[:n]])
    if world is not None and design.info.get("pool_source") != "shipped":
        llm = _shipped_llm_pool(world, design)
        first_llm: dict = {}
        if llm is not None:
            for text, s in zip(llm["texts"], llm["sources"]):
                first_llm.setdefault(int(s), text)
        df["smollm2"] = [first_llm.get(int(r), "") for r in df["record"]]
    return df


def _shipped_llm_pool(world: World, design) -> dict | None:
    """The shipped SmolLM2 pool of ``design``'s canary in ``world`` (same records, M and pool seed), or None."""
    from pe_kit.study.pools import paraphrase_pool_seed
    from pe_kit.text.generators.paraphrase_pools import find_pool, llm_paraphraser, pool_spec

    size = int(design.info.get("pool_size", 0))
    if size < 1:
        return None
    seed = paraphrase_pool_seed(world.config.seed, design.canary_id)
    return find_pool(list(design.canary_texts), size, seed, pool_spec(llm_paraphraser()))


def vote_table(design, world: World, top_k: int, records=(0, 1, 2)):
    """Each of ``records`` beside the k entries it votes for on ``design``'s bank (Eq. 1), as a DataFrame of ``record``,
    ``record text``, ``vote``, ``probe slot``, ``voted text``, ``distance²``.
    Raises ValueError for a design without probes or a record index out of range."""
    import pandas as pd

    from pe_kit.attack.composed_probes import probe_vote_examples

    ex = probe_vote_examples(design, world.bank, top_k, records=list(records), bank_texts=world.bank_texts)
    return pd.DataFrame([{"record": e["record"], "record text": e["text"] if i == 0 else "", "vote": i + 1,
                          "probe slot": v["probe"], "voted text": v["text"], "distance²": round(v["distance"], 4)}
                         for e in ex for i, v in enumerate(e["votes"])])
