"""Notebook 06's set-up in one call (Fig. 2 analogue): world, mechanism, the audited canary's design, PE settings
and the variation generator. Source: §3 "Multi-round PE with ICL", Alg. A.1 (retain k̃ = ⌈retain_fraction · p⌉
plus r probes, generate g = p − r − k̃), App. D (T = 6, q = 0.1, σ = 1.1088). The retrieval pool holds 3 · T · g
public texts not in the initial bank.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

__all__ = ["MultiroundSetup", "multiround_setup", "GENERATORS"]

#: the variation generators notebook 06 can use (``pe_kit.text.variation.VARIATION_KINDS`` by name)
GENERATORS = ("public-retrieval", "wordnet", "smollm2", "openai")


@dataclass(frozen=True)
class MultiroundSetup:
    """What :func:`multiround_setup` builds (r = ``n_probes``, k̃ = ``retained``, g = ``new_per_round``)."""

    world: Any
    mechanism: Any
    design: Any
    pe: Any
    generator: Any
    n_probes: int
    retained: int
    new_per_round: int
    report: str


def multiround_setup(params: Mapping[str, Any]) -> MultiroundSetup:
    """Build notebook 06's :class:`MultiroundSetup` from its ``params``: the world's keys of ``study_config`` plus
    ``variant`` (``nonce`` | ``ordinary``), ``generator`` (:data:`GENERATORS`), ``rounds``, ``retain_fraction``,
    ``max_attempts``, ``public_max_texts`` (None: ⌈3 · T · g⌉), the mechanism's keys, ``seed`` and ``openai_*``.
    Raises ValueError for a variant without a design, an unknown generator, or no slot left for new texts."""
    from pe_kit.pe.multiround import PEConfig
    from pe_kit.settings import MechanismConfig
    from steps.designs import design_for
    from pe_kit.study.setup import study_config, world_for
    from pe_kit.text.variation import public_pool, variation_generator

    generator = params["generator"]
    if generator not in GENERATORS:
        raise ValueError(f"generator={generator!r} is unknown; use one of {', '.join(GENERATORS)}")
    seed, rounds, bank_size = int(params["seed"]), int(params["rounds"]), int(params["bank_size"])
    world = world_for(study_config(dict(params)), progress=False, top_k=int(params["top_k"]))
    mechanism = MechanismConfig.from_params(params)
    design = design_for(world, params["variant"], 0, 0, seed, mechanism)
    if design is None:
        raise ValueError(f"variant={params['variant']!r} is not implemented here; use 'nonce' or 'ordinary'")
    pe = PEConfig(rounds=rounds, retain_fraction=params["retain_fraction"], max_attempts=params["max_attempts"],
                  icl_negatives=0)
    r = 0 if design.positions is None else len(design.positions)
    k = pe.retain_count(bank_size, r)
    g = bank_size - r - k
    if generator == "public-retrieval":  # the bank source's unused texts only: no post of the scored corpus
        cap = params.get("public_max_texts")
        cap = cap if cap is not None else math.ceil(3 * rounds * g)
        pool = public_pool(world, max_texts=cap, rng=np.random.default_rng([seed, 6, 1]))
        gen = variation_generator("public-retrieval", world=world, public_texts=pool)
    elif generator == "openai":
        gen = variation_generator("openai", base_url=params.get("openai_base_url"), model=params.get("openai_model"))
    else:
        gen = variation_generator(generator)
    report = f"{world.splits.report()} | r={r} probes, k̃={k}, g={g} | generator: {gen.name}"
    return MultiroundSetup(world, mechanism, design, pe, gen, r, k, g, report)
