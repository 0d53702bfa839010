"""Text generators: ``generate(prompts, rng) -> list[str]``, seeded per prompt (App. B, C); one module per backend,
imported only where that backend is used."""
