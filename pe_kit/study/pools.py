"""The paraphrase probe pool Q of a real canary (App. B): the route (shipped SmolLM2 pool, generated LLM rewrites,
WordNet), its seed per canary, and the pool's texts, sources and embeddings.
"""
from __future__ import annotations

import warnings

import numpy as np

__all__ = ["DEFAULT_PARAPHRASER", "paraphrase_pool_seed", "paraphrase_pool"]

#: Paraphrase route when none is given: the shipped SmolLM2 pool (docs/paraphrase_pools.md), else WordNet.
DEFAULT_PARAPHRASER = "auto"
_FALLBACKS_WARNED: set = set()


def paraphrase_pool_seed(seed: int, canary_id: str) -> list[int]:
    """Seed of a canary's paraphrase pool for ``numpy.random.default_rng``: (study seed, 3, first 32 bits of
    SHA-256("paraphrase-pool", canary id)), so every variant auditing the canary gets the same pool."""
    from pe_kit.cache import content_hash

    return [int(seed), 3, int(content_hash("paraphrase-pool", str(canary_id))[:8], 16)]


def paraphrase_pool(world, user, pool_size: int = 512, generator=None) -> tuple[list[str], np.ndarray, np.ndarray, dict]:
    """A real canary's paraphrase pool Q (App. B): ``pool_size`` non-verbatim rewrites spread over its records,
    seeded by :func:`paraphrase_pool_seed`.

    ``generator``: ``"smollm2"`` (shipped pool when its key matches, else generated and cached), ``"auto"`` (shipped
    SmolLM2 pool, else WordNet, warned once per (data, M, study seed) and recorded in ``info["pool_fallback"]``),
    ``"wordnet"``, None (:data:`DEFAULT_PARAPHRASER`) or a generator object. Returns (M texts, int64 (M,) source
    record per entry, float32 (M, d) embeddings, provenance info).

    Raises ValueError for pool_size < 1, an unknown generator or a damaged pools file; generation errors propagate."""
    from pe_kit.text.generators.cached import CachedGenerator
    from pe_kit.text.generators.paraphrase_pools import (LLM_POOL_SPEC, PARAPHRASERS, build_pool, find_pool,
                                                         llm_paraphraser, pool_spec)
    from pe_kit.text.generators.pools import make_paraphrase_pool

    if int(pool_size) != pool_size or pool_size < 1:
        raise ValueError(f"pool_size={pool_size!r} must be an integer ≥ 1")
    generator = DEFAULT_PARAPHRASER if generator is None else generator
    if isinstance(generator, str) and generator not in PARAPHRASERS:
        raise ValueError(f"generator={generator!r} is unknown; use one of {PARAPHRASERS} or a generator object")
    if not isinstance(generator, str) and not callable(getattr(generator, "generate", None)):
        raise ValueError(f"generator={generator!r} is neither a route name {PARAPHRASERS} nor a text generator "
                         "(an object with .generate, e.g. pe_kit.text.generators.cached.CachedGenerator(...))")
    pool_seed = paraphrase_pool_seed(world.config.seed, user.user_id)
    records = list(user.texts)
    entry, fallback, source = None, None, "shipped"
    if generator == "smollm2":
        llm = llm_paraphraser()
        entry = find_pool(records, int(pool_size), pool_seed, pool_spec(llm), model=_installed_model(llm))
        if entry is None:
            cached = CachedGenerator(llm, with_code=False, sort_by_length=True)
            entry, source = build_pool(records, int(pool_size), pool_seed, cached), "generated"
    elif generator == "auto":  # reads shipped text only, so the installed model file does not matter
        entry = find_pool(records, int(pool_size), pool_seed, LLM_POOL_SPEC)
        if entry is None:
            fallback = (f"no shipped SmolLM2 pool matches canary {user.user_id} (records, M={pool_size}, study seed "
                        f"{world.config.seed}); WordNet pool")
            key = (str(getattr(world.config, "data", None) or "bundled sample"), int(pool_size), world.config.seed)
            if key not in _FALLBACKS_WARNED:  # once per process: ``catch_warnings`` resets the warnings registry
                _FALLBACKS_WARNED.add(key)
                warnings.warn(f"{fallback}; for LLM rewrites pass --set paraphraser=smollm2 (Python: "
                              "generator='smollm2'), which generates them (slow; docs/paraphrase_pools.md) (warned "
                              f"once for data {key[0]}, M={key[1]}, seed {key[2]}: each design's "
                              "info['pool_fallback'] names its canary; results.md counts the pools per generator)",
                              stacklevel=2)
            generator = "wordnet"
    if entry is not None:
        texts, sources = list(entry["texts"]), entry["sources"]
        info = {"pool_generator": entry["spec"]["generator"], "pool_generator_config": entry["spec"]["config"],
                "pool_seed": pool_seed, "pool_source": source, "pool_key": entry["key"]}
    else:
        if generator == "wordnet":
            from pe_kit.text.generators.wordnet import WordNetParaphraser

            generator = CachedGenerator(WordNetParaphraser())
        texts, sources = make_paraphrase_pool(records, int(pool_size), generator,
                                              np.random.default_rng(pool_seed), on_shortfall="reassign")
        cfg = getattr(generator, "config", None)
        info = {"pool_generator": getattr(generator, "name", type(generator).__name__),
                "pool_generator_config": cfg() if callable(cfg) else {}, "pool_seed": pool_seed,
                "pool_source": "generated", **({"pool_fallback": fallback} if fallback else {})}
    return texts, np.asarray(sources, np.int64), world.encoder.encode(texts, desc="pool"), info


def _installed_model(generator) -> str | None:
    """``paraphrase_pools.model_digest``: None when the model is not installed (shipped pools still apply)."""
    from pe_kit.text.generators.paraphrase_pools import model_digest

    return model_digest(generator)
