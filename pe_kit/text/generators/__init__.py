"""Text generators: ``generate(prompts, rng) -> list[str]``, seeded per prompt (App. B, C); backends load when used."""

from pe_kit.lazy import lazy_package

__getattr__, __dir__ = lazy_package(__name__, __file__)
