"""``CachedGenerator``: every output stored on disk, keyed by (``generator_identity``, prompt, seed), written as
soon as each batch returns."""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from pe_kit.cache import cache_dir, content_hash, drop_verified, read_verified, write_verified
from pe_kit.text.generators.base import (GenerationError, SeedEcho, SeededGenerator, SeedIgnoredWarning,
                                         TextGenerator, _check_prompts, _check_seeds, generator_identity, samples)


class CachedGenerator(SeededGenerator):
    """Wraps any ``TextGenerator`` and caches each output on disk (checksum-verified, ``pe_kit.cache``).

    Only missing prompts reach the wrapped generator, in chunks of its ``batch_size``; a ``GenerationError`` stores
    its ``completed`` outputs first, so a rerun resumes. Outputs that ignore the seed (``SeedEcho.check``) are not
    stored. ``root``: default ``cache_dir()/"generation"``; ``with_code``: key on the generator's source digest too;
    ``sort_by_length``: shortest missing prompts first. ``hits`` / ``misses`` count prompts served / made.
    """

    def __init__(self, generator: TextGenerator, root: str | os.PathLike | None = None, *, with_code: bool = True,
                 sort_by_length: bool = False):
        if not callable(getattr(generator, "generate", None)) or not isinstance(getattr(generator, "name", None), str):
            raise ValueError("generator must have a str `name` and a generate(prompts, rng) method (see TextGenerator)")
        self.inner = generator
        self.name = generator.name
        self.batch_size = int(getattr(generator, "batch_size", 16))
        self.raw_text_input = bool(getattr(generator, "raw_text_input", False))
        self.root = Path(root) if root is not None else cache_dir() / "generation"
        self.with_code = bool(with_code)
        self.sort_by_length = bool(sort_by_length)
        self.hits = 0
        self.misses = 0
        self._identity: dict | None = None
        self._echo = SeedEcho()
        self._samples = samples(generator)

    def config(self) -> dict:
        cfg = getattr(self.inner, "config", None)
        return cfg() if callable(cfg) else {}

    def identity(self) -> dict:
        """The wrapped generator's ``generator_identity``, computed once (without ``code`` unless ``with_code``)."""
        if self._identity is None:
            self._identity = generator_identity(self.inner)
            if not self.with_code:
                self._identity = {k: v for k, v in self._identity.items() if k != "code"}
        return self._identity

    def key(self, prompt: str, seed: int) -> str:
        """Cache key (64 hex) of one (prompt, seed) under this generator's identity."""
        return content_hash("pe_kit.text.generators/v2", self.identity(), prompt, int(seed))

    def path(self, key: str) -> Path:
        """File that holds the entry with ``key``."""
        return self.root / key[:2] / f"{key}.json"

    def _read(self, prompt: str, seed: int) -> str | None:
        data = read_verified(self.path(self.key(prompt, seed)))
        if data is None:
            return None
        try:
            entry = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        if not isinstance(entry, dict) or entry.get("prompt") != prompt or entry.get("seed") != int(seed):
            return None
        text = entry.get("text")
        return text if isinstance(text, str) else None

    def _write(self, prompt: str, seed: int, text: str) -> None:
        entry = {"generator": self.name, "config": self.config(), "prompt": prompt, "seed": int(seed), "text": text}
        write_verified(self.path(self.key(prompt, seed)), json.dumps(entry, ensure_ascii=False).encode("utf-8"))

    def _seed_ignored(self, prompts: list[str], seeds: list[int], texts: list[str]) -> set[str]:
        """Prompts of a sampling generator whose seeds all gave one text (withdrawn from the cache, warned once)."""
        if not self._samples:
            return set()
        for p in self._echo.check(self.name, prompts, seeds, texts, self.config().get("temperature"),
                                  f"; these outputs are not cached as seed-specific under {self.root}"):
            for s in self._echo.seeds(p):  # every entry of p: they are not seed-specific
                drop_verified(self.path(self.key(p, s)))
        return set(self._echo.flagged)

    def _inner_seeded(self, prompts: list[str], seeds: list[int]) -> list[str]:
        fn = getattr(self.inner, "generate_seeded", None)
        if callable(fn):
            with warnings.catch_warnings():  # the inner's own SeedIgnoredWarning: this object says it, with the cache
                warnings.simplefilter("ignore", SeedIgnoredWarning)
                return list(fn(prompts, np.asarray(seeds, dtype=np.int64)))
        out: list[str] = []
        for p, s in zip(prompts, seeds):
            try:
                out.extend(self.inner.generate([p], np.random.default_rng(s)))
            except GenerationError as exc:
                raise GenerationError(str(exc), completed=dict(enumerate(out))) from exc
        return out

    def generate_seeded(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[str]:
        """As ``generate`` with explicit seeds (n ints in [0, 2**32)); the cache is read again before each batch (for
        outputs another process wrote meanwhile)."""
        items = _check_prompts(prompts)
        seed_list = _check_seeds(seeds, len(items))
        results: list[str | None] = [self._read(p, s) for p, s in zip(items, seed_list)]
        missing = [i for i, r in enumerate(results) if r is None]
        hit = [i for i, r in enumerate(results) if r is not None]
        if hit:  # entries an earlier run stored under several seeds of one prompt, all one text
            self._seed_ignored([items[i] for i in hit], [seed_list[i] for i in hit], [results[i] for i in hit])
        if self.sort_by_length:
            missing.sort(key=lambda i: len(items[i]))
        self.hits += len(items) - len(missing)
        for start in range(0, len(missing), self.batch_size):
            chunk = missing[start : start + self.batch_size]
            if start:  # written by another process since the first read?
                for i in chunk:
                    results[i] = self._read(items[i], seed_list[i])
                self.hits += sum(results[i] is not None for i in chunk)
                chunk = [i for i in chunk if results[i] is None]
                if not chunk:
                    continue
            try:
                outs = self._inner_seeded([items[i] for i in chunk], [seed_list[i] for i in chunk])
            except GenerationError as exc:
                for j, text in exc.completed.items():
                    if 0 <= j < len(chunk) and isinstance(text, str):
                        self._write(items[chunk[j]], seed_list[chunk[j]], text)
                        self.misses += 1
                saved = sum(r is not None for r in results) + len(exc.completed)
                raise GenerationError(
                    f"{exc} [cache: {saved} of {len(items)} outputs are stored under {self.root}; rerun with the "
                    "same seed to resume]",
                    completed={i: t for i, t in enumerate(results) if t is not None}
                    | {chunk[j]: t for j, t in exc.completed.items() if 0 <= j < len(chunk)},
                ) from exc
            if len(outs) != len(chunk):
                raise GenerationError(f"{self.name} returned {len(outs)} outputs for {len(chunk)} prompts")
            for i, text in zip(chunk, outs):
                if not isinstance(text, str):
                    raise GenerationError(f"{self.name} returned a {type(text).__name__}, not str, for prompt {i}")
            ignored = self._seed_ignored([items[i] for i in chunk], [seed_list[i] for i in chunk], list(outs))
            for i, text in zip(chunk, outs):
                if items[i] not in ignored:
                    self._write(items[i], seed_list[i], text)
                results[i] = text
                self.misses += 1
        return results  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"CachedGenerator({self.inner!r}, root={str(self.root)!r})"
