"""Content-keyed paraphrase pools Q (App. B, M = 512): built once with an LLM (``build_pool`` records the seed
behind every entry), shipped for the bundled Blogs sample in ``SHIPPED_POOLS_FILE``, found by ``pool_key``.
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pe_kit.cache import content_hash, file_digest
from pe_kit.text.generators.base import _WS, GenerationError, SeededGenerator, normalize_text
from pe_kit.text.generators.pools import make_paraphrase_pool, record_prompt
from pe_kit.text.generators.prompts import paraphrase_prompt

__all__ = ["PARAPHRASERS", "LLM_PARAPHRASE_SETTINGS", "LLM_POOL_SPEC", "SHIPPED_POOLS_FILE", "llm_paraphraser",
           "pool_spec", "pool_key", "build_pool", "load_pools", "find_pool", "shipped_pools_digest", "model_digest"]

#: Named paraphrase routes (``pe_kit.study.pools.paraphrase_pool``): ``smollm2`` (LLM rewrites: shipped pool, else
#: generated), ``auto`` (shipped SmolLM2 pool, else WordNet) and ``wordnet`` (synonym swaps).
PARAPHRASERS = ("smollm2", "auto", "wordnet")
#: Sampling settings of the LLM paraphraser: 64 new tokens (the quick preset's token cap); T = 0.9, top-p 0.95.
LLM_PARAPHRASE_SETTINGS = {"max_new_tokens": 64, "temperature": 0.9, "top_p": 0.95}
#: Threads the LLM paraphraser runs on (pinned: torch may sum in another order at another thread count).
LLM_THREADS = 1
#: ``pool_spec(llm_paraphraser())`` written out, so the ``auto`` route finds a shipped pool without importing the
#: LLM backend (tests/test_paraphrase_pools.py checks that the two agree).
LLM_POOL_SPEC = {"generator": "smollm2-135m-instruct-q4_1",
                 "config": {**LLM_PARAPHRASE_SETTINGS, "system_prompt": None, "clean": True,
                            "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
                 "prompt": paraphrase_prompt("<record>"), "max_attempts": 8, "on_shortfall": "reassign"}
SHIPPED_POOLS_FILE = Path(__file__).resolve().parents[2] / "data_files" / "blogs-900-paraphrase-pools-smollm2.jsonl.gz"
_POOL_VERSION = "pe_kit.paraphrase-pool/v1"


def shipped_pools_digest() -> str:
    """SHA-256 of ``SHIPPED_POOLS_FILE`` (or ``"absent"``): part of the keys of every step whose designs may take a
    shipped pool, so replacing the pools recomputes them."""
    return file_digest(SHIPPED_POOLS_FILE) if SHIPPED_POOLS_FILE.is_file() else "absent"


def llm_paraphraser(batch_size: int = 16):
    """``LocalLMGenerator`` with ``LLM_PARAPHRASE_SETTINGS`` on ``LLM_THREADS`` (``batch_size`` does not change
    outputs)."""
    from pe_kit.text.generators.local_lm import LocalLMGenerator

    return LocalLMGenerator(**LLM_PARAPHRASE_SETTINGS, batch_size=int(batch_size), num_threads=LLM_THREADS)


def pool_spec(generator, *, max_attempts: int = 8, on_shortfall: str = "reassign") -> dict:
    """What fixes a pool besides (records, M, seed): generator name and ``config()``, the prompt wording and the
    retry rule. The model digest is not in it (shipped pools work without the model); ``find_pool`` checks it."""
    cfg = getattr(generator, "config", None)
    return {"generator": str(getattr(generator, "name", type(generator).__name__)), "config": cfg() if callable(cfg) else {},
            "prompt": record_prompt(generator)("<record>"),
            "max_attempts": int(max_attempts), "on_shortfall": str(on_shortfall)}


def pool_key(records: Sequence[str], pool_size: int, pool_seed, spec: dict) -> str:
    """Content key (64 hex) of a pool: SHA-256 of the records (in order), M, the pool seed and ``pool_spec``."""
    seed = [int(s) for s in np.atleast_1d(pool_seed)]
    return content_hash(_POOL_VERSION, content_hash(list(records)), int(pool_size), seed, spec)


def model_digest(generator) -> str | None:
    """Digest of the generator's model files (its ``identity()``), or None without one or when the model is not
    installed (shipped pools still apply)."""
    ident = getattr(generator, "identity", None)
    try:
        return ident() if callable(ident) else None
    except (GenerationError, OSError):
        return None


class _Recorder(SeededGenerator):
    """Wraps a seeded generator and remembers the (prompt, seed) behind every output."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.batch_size = getattr(inner, "batch_size", 16)
        self.raw_text_input = bool(getattr(inner, "raw_text_input", False))
        self.log: dict[tuple[str, str], int] = {}

    def generate_seeded(self, prompts, seeds):
        outs = self.inner.generate_seeded(prompts, seeds)
        for p, s, o in zip(prompts, seeds, outs):
            if isinstance(o, str):
                self.log.setdefault((p, _WS.sub(" ", o).strip()), int(s))
        return outs


def build_pool(records: Sequence[str], pool_size: int, pool_seed, generator, *, max_attempts: int = 8,
               on_shortfall: str = "reassign") -> dict:
    """A paraphrase pool (``make_paraphrase_pool``; ``generator`` needs ``generate_seeded``) as a self-describing
    dict: ``key``, ``spec``, ``pool_seed``, ``pool_size``, ``records_digest``, ``model`` (digest or None), ``texts``,
    ``sources`` (record indices) and ``seeds`` (entry j is ``generate_seeded([prompt(records[sources[j]])],
    [seeds[j]])``, whitespace collapsed)."""
    if not callable(getattr(generator, "generate_seeded", None)):
        raise ValueError(f"generator {getattr(generator, 'name', generator)!r} has no generate_seeded; build_pool "
                         "records one seed per entry and needs a seeded generator")
    seed = [int(s) for s in np.atleast_1d(pool_seed)]
    rec = _Recorder(generator)
    texts, sources = make_paraphrase_pool(list(records), int(pool_size), rec, np.random.default_rng(seed),
                                          max_attempts=max_attempts, on_shortfall=on_shortfall)
    prompt = record_prompt(rec)
    seeds = [rec.log[(prompt(records[int(s)]), t)] for t, s in zip(texts, sources)]
    spec = pool_spec(getattr(generator, "inner", generator), max_attempts=max_attempts, on_shortfall=on_shortfall)
    return {"key": pool_key(records, pool_size, seed, spec), "spec": spec, "pool_seed": seed,
            "pool_size": int(pool_size), "records_digest": content_hash(list(records)),
            "model": model_digest(getattr(generator, "inner", generator)), "texts": list(texts),
            "sources": [int(s) for s in sources], "seeds": seeds}


def _check_entry(entry: Any, where: str) -> dict:
    try:
        spec, seed, size = entry["spec"], entry["pool_seed"], int(entry["pool_size"])
        texts, sources, seeds = entry["texts"], entry["sources"], entry["seeds"]
        key = content_hash(_POOL_VERSION, entry["records_digest"], size, [int(s) for s in seed], spec)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: malformed pool entry ({exc!r}); rebuild it with scripts/make_paraphrase_pools.py") from exc
    if key != entry.get("key"):
        raise ValueError(f"{where}: stored key does not match the entry's records/seed/settings; the file was edited "
                         "or written by another version; rebuild it with scripts/make_paraphrase_pools.py")
    if not (len(texts) == len(sources) == len(seeds) == size) or not all(isinstance(t, str) and t for t in texts):
        raise ValueError(f"{where}: pool entry {key[:12]} must hold {size} non-empty texts, sources and seeds")
    if len({normalize_text(t) for t in texts}) != size:
        raise ValueError(f"{where}: pool entry {key[:12]} holds duplicate texts")
    if not all(type(s) is int and s >= 0 for s in sources) or not all(type(s) is int for s in seeds):
        raise ValueError(f"{where}: pool entry {key[:12]} must hold non-negative integer sources and integer seeds; "
                         "rebuild it with scripts/make_paraphrase_pools.py")
    if entry["pool_size"] != size:
        raise ValueError(f"{where}: pool entry {key[:12]} has a non-integer pool_size {entry['pool_size']!r}")
    return entry


_LOADED: dict[tuple[str, float, int], dict] = {}


def load_pools(path: str | os.PathLike | None = None) -> dict:
    """A pools file (gzip'd JSON Lines; default ``SHIPPED_POOLS_FILE``) as ``{key: entry}`` (``{}`` if absent), each
    key recomputed and entry checked; cached per (path, mtime, size). ValueError names the file and line."""
    path = Path(path) if path is not None else SHIPPED_POOLS_FILE
    if not path.is_file():
        return {}
    st = path.stat()
    tag = (str(path), st.st_mtime, st.st_size)
    if tag not in _LOADED:
        out, n = {}, 0
        opener = gzip.open if path.suffix == ".gz" else open
        fix = ("reinstall pe_kit (or `git checkout` the file) for the shipped pools, or rebuild it with "
               "scripts/make_paraphrase_pools.py")
        try:
            with opener(path, "rt", encoding="utf-8") as fh:
                for n, line in enumerate(fh, 1):
                    if line.strip():
                        entry = _check_entry(json.loads(line), f"{path.name} line {n}")
                        out[entry["key"]] = entry
        except json.JSONDecodeError as exc:
            raise ValueError(f"pools file {path} line {n} is not valid JSON ({exc.msg}, column {exc.colno}): the "
                             f"file is damaged; {fix}") from exc
        except (EOFError, OSError, UnicodeDecodeError) as exc:  # truncated gzip, not gzip, not UTF-8
            raise ValueError(f"pools file {path} cannot be read after line {n} ({exc}): the file is damaged or not "
                             f"{'gzip' if path.suffix == '.gz' else 'plain'} JSON Lines; {fix}") from exc
        _LOADED.clear()
        _LOADED[tag] = out
    return _LOADED[tag]


def find_pool(records: Sequence[str], pool_size: int, pool_seed, spec: dict, *, model: str | None = None,
              path: str | os.PathLike | None = None) -> dict | None:
    """The stored pool whose ``pool_key`` matches (records, M, seed, spec) and ``model`` digest, or None. Raises
    ValueError from ``load_pools``, or for a matching pool with bad sources or a verbatim record."""
    entry = load_pools(path).get(pool_key(records, pool_size, pool_seed, spec))
    if entry is None or entry.get("records_digest") != content_hash(list(records)):
        return None
    if model is not None and entry.get("model") not in (None, model):
        return None
    if max(entry["sources"], default=0) >= len(records):
        raise ValueError(f"stored pool {entry['key'][:12]}: a source index ≥ {len(records)} records; the pools file "
                         "was edited; rebuild it with scripts/make_paraphrase_pools.py")
    originals = {normalize_text(r) for r in records}
    if any(normalize_text(t) in originals for t in entry["texts"]):
        raise ValueError(f"stored pool {entry['key'][:12]} holds a verbatim record (the pool must hold rewrites); the "
                         "pools file was edited; rebuild it with scripts/make_paraphrase_pools.py")
    return entry
