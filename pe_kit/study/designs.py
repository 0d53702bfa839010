"""A variant's frozen designs for the study's canaries and what they put on the probes, without trials (notebooks
02 and 03): which canary each variant audits, the seeds of designs and trials, μ_eff and vote placement (Eqs. 1, 3,
20, 34–35), paraphrase examples and the votes a canary's records cast (Table 1, App. B).
"""
from __future__ import annotations

import warnings

import numpy as np

from pe_kit.attack.variants import ALL_VARIANTS, VARIANTS, resolve_variants
from pe_kit.audit.moments import aux_moments, mu_eff, null_moments, restrict
from pe_kit.settings import AuditConfig, MechanismConfig, check_param
from pe_kit.study.world import World, canary_contribution, make_design, truncation_fields

__all__ = ["REAL_VARIANTS", "NONCE_VARIANTS", "canary_slots", "try_design", "design_for", "design_summary",
           "design_rows", "paraphrase_examples", "vote_table"]

REAL_VARIANTS = tuple(v for v in VARIANTS if not v.startswith("nonce"))
NONCE_VARIANTS = tuple(v for v in VARIANTS if v.startswith("nonce"))


def canary_slots(variant: str, per_variant: int, n_canary: int) -> list[int]:
    """Canary slots (indices into the study's canary split) used by ``variant``.

    Real-canary variants get disjoint blocks ``[i·per_variant, (i+1)·per_variant)`` (i = the variant's
    index among the five real variants) when the study holds enough canaries (paper: 40 = 8 × 5, each
    attack on "an independently selected set of five canaries"); otherwise the blocks wrap around and
    variants share canaries. Nonce variants draw synthetic canaries; their slots only index the draws.
    ``composed-mu_eff`` (beyond the paper) audits paraphrase-mu_eff's canaries, so the two natural-text
    Alg. B.1 attacks compare on the same five records sets.
    """
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
    """Like :func:`design_for`, but returns ``(design, None)`` or ``(None, reason)`` without warning.

    ``reason`` starts with ``"not implemented"`` (the variant does not exist in this pe_kit) or
    ``"pool shortfall"`` (this canary's records admit too few distinct candidates); other errors propagate.
    ``generator``: paraphrase route for the paraphrase variants (``pe_kit.study.pools.paraphrase_pool``; None: the
    default, ``pe_kit.study.pools.DEFAULT_PARAPHRASER``).
    """
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
    """The frozen design of ``variant`` for its j-th canary (slot ``slot``), seeded by (seed, variant, j).

    Args:
        world, variant: the study and a name from ``VARIANTS``. j: the canary's index within the variant.
        slot: index into the canary split (real variants). seed: root seed.
        mechanism: k, C, σ, q used by the design (μ_eff variants freeze Σ̂_Q with it); default: paper values.
        pool_size: M, candidate pool of paraphrase / nonce variants (default 512, App. B).
        generator: paraphrase route (``"auto"``, ``"smollm2"``, ``"wordnet"``, a generator object; None =
            ``pe_kit.study.pools.DEFAULT_PARAPHRASER``).

    Returns:
        ``ProbeDesign``, or None (with a warning) when the variant is not implemented (``NotImplementedError``
        from ``pe_kit.study.world.make_design``) or the canary's candidate pool falls short
        (``pe_kit.text.generators.base.PoolShortfallError``: e.g. records too short for enough distinct paraphrases),
        so notebooks run with whatever designs exist. Other errors propagate.
    """
    design, reason = try_design(world, variant, j, slot, seed, mechanism, pool_size, generator)
    if design is None:
        warnings.warn(f"variant {variant!r}, canary slot {slot} skipped: {reason}", stacklevel=2)
    return design


def design_summary(world: World, design, mechanism: MechanismConfig, audit: AuditConfig) -> dict:
    """Where the canary's votes go and its μ_eff on a frozen design, without trials (Eqs. 1, 3, 20, 34–35).

    Returns a dict: ``variant, canary_id, n_coords`` (|P|), ``canary_votes_on_P`` (share of the canary's
    vote mass on P), ``canary_norm`` (‖v_P‖₂ ≤ C), ``canary_norm_full`` (‖v‖₂), ``clip_norm``,
    ``mu_eff`` (with Σ̂ from the aux users, N = n_test), ``mu_eff_ceiling`` (1/σ),
    ``background_voters`` (test users with any vote on P), ``background_vote_share`` (mean share of a
    test user's mass on P), and the world's truncation counts (``pe_kit.study.world.truncation_fields``).
    """
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
            "background_vote_share": float(np.mean(onP / np.maximum(totals, 1e-300))), **truncation_fields(world)}


def design_rows(world: World, variants, per_variant: int, mechanism: MechanismConfig, audit: AuditConfig, seed: int,
                pool_size: int | None = None, generator=None) -> tuple[list[dict], list[str], dict]:
    """:func:`design_summary` of ``per_variant`` canaries of each variant (seeded as ``study.audits`` seeds them).

    Returns:
        (rows, skipped, designs): one row per design (``design_summary``'s fields plus ``canary_slot``,
        ``canary_index``, ``n_probes``, ``experiment="probe_design"`` and the study and mechanism settings);
        ``skipped`` says why a canary has no design (an unimplemented variant stops at its first canary); ``designs``
        maps each variant to its first design.
    """
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
    """Source records beside the paraphrase probes made from them (the ``paraphrase`` variant's design).

    Args:
        design: a ``paraphrase`` ``ProbeDesign`` (its ``info["probe_sources"]`` gives each probe's record).
        n: int ≥ 1, how many (record, probe) pairs to show, one per distinct source record first.
        world: the design's study; when given and the design's pool is not already SmolLM2's, a column
            ``smollm2`` adds the same record's rewrite from the canary's shipped SmolLM2 pool
            (``pe_kit.text.generators.paraphrase_pools.find_pool``; nothing is generated; empty when no
            shipped pool matches this canary's key).

    Returns:
        ``pandas.DataFrame`` with columns ``record`` (index in the canary's records), ``source``, ``paraphrase``
        and ``generator`` (the pool generator's name, e.g. ``wordnet`` or a local LLM), plus ``smollm2``
        when ``world`` is given.

    Raises:
        ValueError: if the design is not a paraphrase design with probe sources, or n < 1.
    """
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
    """Each of ``records`` (indices into the canary's records) beside the k entries it votes for on ``design``'s bank
    (Eq. 1's top-k routing; ``pe_kit.attack.composed_probes.probe_vote_examples``): a ``pandas.DataFrame`` with
    ``record``, ``record text`` (on its first vote), ``vote``, ``probe slot``, ``voted text`` and ``distance²``.

    Raises:
        ValueError: for a design without probes or a record index out of range.
    """
    import pandas as pd

    from pe_kit.attack.composed_probes import probe_vote_examples

    ex = probe_vote_examples(design, world.bank, top_k, records=list(records), bank_texts=world.bank_texts)
    return pd.DataFrame([{"record": e["record"], "record text": e["text"] if i == 0 else "", "vote": i + 1,
                          "probe slot": v["probe"], "voted text": v["text"], "distance²": round(v["distance"], 4)}
                         for e in ex for i, v in enumerate(e["votes"])])
