"""Audit each variant's canaries on one world (Table 2 / Table 4, notebook 04; §2.1 Steps 1–5), each step cached
in ``.steps`` (``StepCache``) by the hash of everything fixing its numbers, code included, so reruns resume.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

from pe_kit.attack.variants import resolve_variants
from pe_kit.code_hash import code_hash
from pe_kit.report.results import StepCache
from pe_kit.settings import AuditConfig, MechanismConfig
from pe_kit.study.setup import world_key
from pe_kit.study.world import World, audit_design

from steps.designs import _rng, canary_slots, try_design

__all__ = ["audit_variants"]


def audit_variants(world: World, variants: Sequence[str], per_variant: int, mechanism: MechanismConfig,
                   audit: AuditConfig, seed: int, cache: StepCache | None = None, salt: int = 0, progress: bool = True,
                   extra: Mapping[str, Any] | None = None, design_mechanism: MechanismConfig | None = None,
                   pool_size: int | None = None, generator: str | None = None) -> tuple[list[dict], list[str]]:
    """Audit ``per_variant`` canaries (slots from ``canary_slots``) of each variant on one world (Table 2 / 4).

    ``seed`` seeds designs (seed, variant, j) and trials (seed, variant, j, salt); ``cache``: step cache (None = no
    resume); ``salt`` separates sweep points sharing a world; ``extra``: fields added to every row;
    ``design_mechanism``: settings the designs are built with (default ``mechanism``); ``generator``: the paraphrase
    route (None = ``DEFAULT_PARAPHRASER``), part of the cache key.

    Returns (rows, skipped): ``audit_design`` rows plus ``canary_slot``, ``canary_index``, ``seed``, ``salt``;
    ``skipped`` names unimplemented variants and pool shortfalls (``"paraphrase#2: pool shortfall: …"``)."""
    design_mechanism = design_mechanism or mechanism
    jobs = [(v, j, s) for v in resolve_variants(variants) for j, s in enumerate(
        canary_slots(v, per_variant, world.config.n_canary))]
    rows, skipped = [], []
    bar = None
    if progress:
        from pe_kit.progress import progress
        bar = progress(total=len(jobs), desc=f"audit {world.config.arm}/{world.config.bank}", unit="canary")
    try:
        code = code_hash(Path(__file__).parent)  # the code key, once for every job
        for variant, j, slot in jobs:
            if variant in skipped:
                if bar is not None:
                    bar.update(1)
                continue

            def compute(variant=variant, j=j, slot=slot):
                design, reason = try_design(world, variant, j, slot, seed, design_mechanism, pool_size, generator)
                if design is None:
                    return {"skipped": reason}
                row = audit_design(world, design, mechanism, audit, _rng(seed, variant, j, 23, salt))
                return {**row, "canary_slot": slot, "canary_index": j, "seed": seed, "salt": salt}

            key = ("audit", world.config.as_dict(), world_key(world), variant, j, slot, mechanism.as_dict(),
                   audit.as_dict(), seed, salt, design_mechanism.as_dict(), pool_size, code,
                   *_route_key(variant, generator))
            row = cache.get_or_compute(key, compute) if cache is not None else compute()
            if "skipped" in row:
                reason = row["skipped"]
                if reason.startswith("not implemented"):
                    skipped.append(variant)
                else:
                    skipped.append(f"{variant}#{j}: {reason}")
                warnings.warn(f"variant {variant!r}, canary {j} (slot {slot}) skipped: {reason}", stacklevel=2)
            else:
                rows.append({**row, **(extra or {})})
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return rows, skipped


def _route_key(variant: str, generator) -> tuple:
    """Step-key part of a variant's paraphrase route: () without a paraphrase pool, else (route, shipped pools digest);
    None keys as ``DEFAULT_PARAPHRASER``, ``"smollm2"`` adds the model digest, an object its
    ``generator_identity``; ``composed-mu_eff`` adds its ``ComposedConfig``."""
    if variant == "composed-mu_eff":
        from pe_kit.attack import composed_probes

        return ("composed", composed_probes.DEFAULT_CONFIG.as_dict())
    if not variant.startswith("paraphrase"):
        return ()
    from pe_kit.cache import content_hash
    from pe_kit.study.pools import DEFAULT_PARAPHRASER, _installed_model

    route = DEFAULT_PARAPHRASER if generator is None else generator
    if route == "smollm2":
        from pe_kit.text.generators.paraphrase_pools import llm_paraphraser

        route = ("smollm2", _installed_model(llm_paraphraser()))
    elif not isinstance(route, str):
        from pe_kit.text.generators.base import generator_identity

        route = content_hash(generator_identity(route))
    return (route, _pools_key(variant))


def _pools_key(variant: str) -> str:
    """The shipped paraphrase pools' digest for paraphrase variants (their designs may take a shipped pool), else ""."""
    if not variant.startswith("paraphrase"):
        return ""
    from pe_kit.text.generators.paraphrase_pools import shipped_pools_digest

    return shipped_pools_digest()
