"""The canaries whose paraphrase pools a preset builds (``scripts/make_paraphrase_pools.py``), found without
embedding anything: the same seeded draw as ``pe_kit.study.world.build_world`` under a preset's sizes.

These read presets (``pe_kit.run.presets.get_preset``), so they live in ``run``; the pools themselves are
``pe_kit.study.pools.paraphrase_pool``'s.
"""
from __future__ import annotations

from pe_kit.attack.variants import PARAPHRASE_VARIANTS, REAL_VARIANTS, resolve_variants
from pe_kit.data.splits import make_arm, split_users

__all__ = ["variant_slots", "paraphrase_canaries", "sweep_paraphrase_canaries"]


def variant_slots(n_canary: int, per_variant: int = 5) -> dict[str, tuple[int, ...]]:
    """The canary-split slots each real-canary variant audits, as the notebooks' ``designs.canary_slots``: variant i
    of ``REAL_VARIANTS`` takes [i·per_variant, (i+1)·per_variant), disjoint when n_canary ≥ 5·per_variant, else
    wrapped modulo n_canary (§2: "an independently selected set of five canaries")."""
    return {v: tuple((i * per_variant + j) % n_canary for j in range(per_variant)) for i, v in enumerate(REAL_VARIANTS)}


def paraphrase_canaries(preset: str = "quick", arms=("long", "short"),
                        variants=PARAPHRASE_VARIANTS, seed: int = 0, *,
                        data: str | None = None, fmt: str | None = None, overrides=None,
                        per_variant: int | None = None) -> list[tuple]:
    """The canaries whose paraphrase pools a preset builds, without embedding anything.

    The same draw as :func:`build_world` (``cached_corpus``, ``make_arm`` then the seeded ``split_users`` with the
    preset's sizes) and the same slots as the audit (:func:`variant_slots`); a canary audited by
    several variants (wrapped slots) is listed once per arm.

    Args: preset: name in ``pe_kit.run.presets.PRESETS``. arms: data arms. variants: real-canary variants.
        seed: study seed. data, fmt, overrides: as ``pe-kit reproduce --data / --format / --set`` (None = the
        preset's own; the paper run's parts pass e.g. ``{"n_test": 600, "n_calibration": 600}``), so the canaries
        are those of that run (``scripts/paper_run.sh``). per_variant: canaries per variant (None = the preset's,
        as notebooks 02 and 04 audit; 1 = the Fig. 1 sweeps' canary, :func:`sweep_paraphrase_canaries`).
    Returns: list of ``(arm, canary_id, records tuple of str, variants list of str)`` in audit order.
    Raises: ValueError for an unknown preset or override, an unknown variant or one that is not a paraphrase variant
        (only those have pools), the paper preset without ``data``, or what ``split_users`` raises; DataError for unreadable
        data.
    """
    from pe_kit.data.corpus_cache import cached_corpus
    from pe_kit.run.presets import get_preset

    arms = tuple(a.strip() for a in arms.split(",") if a.strip()) if isinstance(arms, str) else tuple(arms)
    variants = resolve_variants(variants)
    wrong = [v for v in variants if v not in PARAPHRASE_VARIANTS]
    if wrong:
        raise ValueError(f"variants={wrong} have no paraphrase pool; pass names from {PARAPHRASE_VARIANTS}")
    P = get_preset(preset, overrides, data, fmt)
    corpus = cached_corpus(P.data, P.fmt, record_cap=P.record_cap, on_error=P.on_error)
    slots = variant_slots(P.n_canary, P.per_variant if per_variant is None else per_variant)
    out = []
    for arm in arms:
        world = make_arm(corpus, arm, P.record_cap)
        by_id, seen = world.by_id(), {}
        for reserved in _reserved_sets(P):
            splits = split_users(world, P.n_canary, P.n_aux, P.n_calibration, P.n_test, seed=seed,
                                 canary_records=P.record_cap, reserved=reserved)
            for v in variants:
                for slot in slots[v]:
                    if v not in seen.setdefault(splits.canary[slot], []):
                        seen[splits.canary[slot]].append(v)
        out += [(arm, cid, tuple(by_id[cid].texts), vs) for cid, vs in seen.items()]
    return out


def _reserved_sets(P) -> list[frozenset]:
    """One reserved-user set per distinct world the preset's banks make (``study.world.bank_reserved_users``: none
    but for a shipped bank B, whose example authors are kept out of the private splits, so a bank-B world may draw
    other canaries); the pools then cover every draw. The empty set first, in the banks' sorted order after it."""
    from pe_kit.study.world import bank_reserved_users

    sets = {bank_reserved_users(b) for b in set(P.banks) | {P.bank}}
    return sorted(sets, key=lambda s: (len(s) > 0, sorted(s)))


def sweep_paraphrase_canaries(preset: str = "quick", seed: int = 0, *, data: str | None = None,
                              fmt: str | None = None, overrides=None) -> list[tuple]:
    """The paraphrase canaries of notebook 05's Fig. 1 sweeps: one per paraphrase variant in ``sweep_variants``,
    on ``sweep_arm`` (``steps.ablations.sweep`` audits one canary per variant, slot i of the variant order, as the
    paper's Fig. 1 does; so paraphrase-mu_eff's sweep canary is not one of its five Table 2 canaries).

    Args: as :func:`paraphrase_canaries` (the preset's ``sweep_arm`` and ``sweep_variants`` after ``overrides``).
    Returns: list of ``(arm, canary_id, records tuple of str, variants list of str)``; empty when no paraphrase
        variant is swept.
    Raises: ValueError naming an unknown variant in ``sweep_variants``; else as :func:`paraphrase_canaries`.
    """
    from pe_kit.run.presets import get_preset

    P = get_preset(preset, overrides, data, fmt)
    try:  # the same reading as notebook 05's sweep (steps.audits.audit_variants → resolve_variants)
        names = resolve_variants(P.sweep_variants)
    except ValueError as exc:
        raise ValueError(f"sweep_variants: {exc}") from None
    swept = tuple(v for v in names if v in PARAPHRASE_VARIANTS)
    if not swept:
        return []
    return paraphrase_canaries(preset, (P.sweep_arm,), swept, seed, data=data, fmt=fmt, overrides=overrides,
                               per_variant=1)
