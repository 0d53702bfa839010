"""Text generators: ``generate(prompts, rng) -> list[str]``, seeded per prompt (App. B, C); one module a backend."""
