"""Notebook 06's set-up in one call: the world, the mechanism, the audited canary's design, the PE loop's settings
and the variation generator of a multi-round study (Fig. 2 analogue).

Source: "Canaries in the Bank" §3 "Multi-round PE with ICL", App. A (Alg. A.1: each round retains the top
k̃ = ⌈retain_fraction · p⌉ candidates plus the r probes and asks the generator for g = p − r − k̃ new texts), App. D
(T = 6, q = 0.1, σ = 1.1088). The retrieval generator's pool is capped at 3 · T · g texts of the bank source that
the initial bank does not hold, so a run uses at most a third of it (a near-exhausted pool answers late rounds with
leftovers whatever the histogram says).
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
    """What :func:`multiround_setup` builds.

    Attributes:
        world: the ``pe_kit.study.world.World`` (disjoint user splits, embeddings, initial bank S⁽⁰⁾).
        mechanism: ``MechanismConfig`` (k, C, σ, q, m). design: the audited canary's ``ProbeDesign``.
        pe: ``PEConfig`` (rounds T, retain fraction, generator attempts). generator: the variation generator.
        n_probes: r (0 for a canary without probes). retained: k̃. new_per_round: g = p − r − k̃.
        report: one line naming the splits' sizes, r, k̃, g and the generator.
    """

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
    """Build notebook 06's world, mechanism, design, PE settings and generator from its parameters.

    Args:
        params: the notebook's parameters (its ``params`` dict): the world's keys of
            ``pe_kit.study.setup.study_config`` plus ``variant`` (``nonce`` | ``ordinary``), ``generator`` (one of
            :data:`GENERATORS`), ``rounds`` (T ≥ 1), ``retain_fraction`` (in (0, 1)), ``max_attempts``,
            ``public_max_texts`` (None: ⌈3 · T · g⌉), ``bank_size`` (p), ``top_k``, ``clip_norm``,
            ``noise_multiplier``, ``sample_rate``, ``record_cap``, ``seed``, and ``openai_base_url`` /
            ``openai_model`` (the endpoint for ``generator="openai"``).

    Returns:
        :class:`MultiroundSetup`.

    Raises:
        ValueError: a variant without a design here, an unknown generator (the message lists the known ones), or
            a retain fraction that leaves no slot for new texts (``PEConfig.retain_count``).
    """
    from pe_kit.pe.multiround import PEConfig
    from pe_kit.study.designs import design_for
    from pe_kit.study.setup import mechanism_from, study_config, world_for
    from pe_kit.text.variation import public_pool, variation_generator

    generator = params["generator"]
    if generator not in GENERATORS:
        raise ValueError(f"generator={generator!r} is unknown; use one of {', '.join(GENERATORS)}")
    seed, rounds, bank_size = int(params["seed"]), int(params["rounds"]), int(params["bank_size"])
    world = world_for(study_config(dict(params)), progress=False, top_k=int(params["top_k"]))
    mechanism = mechanism_from(params)
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
