"""Text generators for candidate banks, paraphrase pools and PE variations: texts in, texts out. Every backend
draws one seed per prompt (``draw_seeds``) and its output depends only on (prompt, seed, settings), so per-prompt
caching (``CachedGenerator``) is exact.
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

DEFAULT_WORDNET_DIR = "/usr/share/wordnet"
_SEED_HIGH = 2**31 - 1  # llama.cpp takes uint32 seeds, OpenAI int: stay inside both.


class GenerationError(RuntimeError):
    """A backend failed (timeout, HTTP error, malformed reply, missing model); ``completed`` maps prompt index
    (within the failing call) → output for the prompts that succeeded."""

    def __init__(self, message: str, completed: Mapping[int, str] | None = None):
        super().__init__(message)
        self.completed: dict[int, str] = dict(completed or {})


#: What the kit says when a sampling generator gives one text for one prompt under several seeds.
SEED_IGNORED = "the endpoint returned the same text for different seeds"


class SeedIgnoredWarning(UserWarning):
    """A sampling generator returned one text for one prompt under ``SeedEcho.min_seeds`` or more seeds."""


def samples(generator) -> bool:
    """True if ``generator`` samples (``config()["temperature"]`` > 0): different seeds should give different texts."""
    cfg = getattr(generator, "config", None)
    try:
        t = (cfg() if callable(cfg) else {}).get("temperature")
        return t is not None and float(t) > 0
    except (TypeError, ValueError, AttributeError):
        return False


class SeedEcho:
    """The seed-honouring check: flags a prompt once ``min_seeds`` different seeds gave it one text and none another
    (at most ``max_prompts`` prompts remembered, oldest forgotten first)."""

    min_seeds = 3
    max_prompts = 65_536

    def __init__(self):
        self._seen: dict[str, dict[int, str]] = {}
        self.flagged: dict[str, list[int]] = {}  # prompt -> the seeds that gave its one text

    def observe(self, prompts: Sequence[str], seeds: Sequence[int], texts: Sequence[str]) -> list[str]:
        """Record one call's outputs (n prompts, n seeds, n texts); return the prompts it flagged."""
        new = []
        for p, s, t in zip(prompts, seeds, texts):
            by_seed = self._seen.setdefault(p, {})
            by_seed[int(s)] = t
            if p not in self.flagged and len(by_seed) >= self.min_seeds and len(set(by_seed.values())) == 1:
                self.flagged[p] = sorted(by_seed)
                new.append(p)
            elif p in self.flagged and len(set(by_seed.values())) > 1:
                del self.flagged[p]  # a seed did vary it after all
        while len(self._seen) > self.max_prompts:
            self._seen.pop(next(iter(self._seen)))
        return new

    def seeds(self, prompt: str) -> list[int]:
        """Seeds recorded for ``prompt`` (sorted ints)."""
        return sorted(self._seen.get(prompt, {}))

    def check(self, name: str, prompts: Sequence[str], seeds: Sequence[int], texts: Sequence[str], temperature,
              what: str = "") -> list[str]:
        """``observe`` one call's outputs; warn (``SeedIgnoredWarning``: the generator, prompts, seeds, temperature
        and the fix, then ``what``) about the prompts it flagged, and return them."""
        new = self.observe(prompts, seeds, texts)
        if not new:
            return new
        p = new[0]
        shown = ", ".join(str(s) for s in self.flagged.get(p, self.seeds(p))[:6])
        msg = (f"{name}: {SEED_IGNORED} ({len(new)} prompt(s); e.g. seeds {shown} of prompt {p[:40]!r} all gave "
               f"one text, at temperature={temperature}){what}. The server ignores the request's `seed`, so its "
               "outputs are neither reproducible samples nor varied by more attempts or a higher temperature; serve "
               "the model with a server that honours seed (vLLM, llama.cpp server), or use a local generator "
               "(LocalLMGenerator, WordNetParaphraser)")
        warnings.warn(msg, SeedIgnoredWarning, stacklevel=3)
        return new


class PoolShortfallError(GenerationError):
    """A pool could not be filled with valid, distinct outputs within the allowed attempts.
    ``texts`` / ``sources``: the slots filled (slot order, None for a missing text); ``missing``: slots still empty."""

    def __init__(self, message: str, texts: list[str | None], sources: np.ndarray, missing: int):
        super().__init__(message)
        self.texts = texts
        self.sources = sources
        self.missing = missing


@runtime_checkable
class TextGenerator(Protocol):
    """Texts in → texts out: ``generate(prompts, rng)`` returns one str per prompt; the same rng state gives
    the same outputs. ``name`` is a stable id used in cache keys. Optional extras: ``generate_seeded(prompts, seeds)``,
    ``config() -> dict``, ``batch_size``, ``raw_text_input`` (the prompt is the text to rewrite)."""

    name: str

    def generate(self, prompts: Sequence[str], rng: np.random.Generator) -> list[str]: ...


def draw_seeds(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` per-prompt seeds from ``rng``: int64 (n,) in [0, 2**31 − 1); ValueError for a non-Generator or n < 0."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}; "
                         "pass np.random.default_rng(seed)")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return rng.integers(0, _SEED_HIGH, size=int(n), dtype=np.int64)


def _check_prompts(prompts: Any, field: str = "prompts") -> list[str]:
    if isinstance(prompts, (str, bytes)):
        raise ValueError(f"{field} must be a sequence of strings, got a single {type(prompts).__name__}; wrap it in "
                         "a list")
    try:
        items = list(prompts)
    except TypeError:
        raise ValueError(f"{field} must be a sequence of strings, got {type(prompts).__name__}") from None
    for i, p in enumerate(items):
        if not isinstance(p, str):
            raise ValueError(f"{field}[{i}] must be a str, got {type(p).__name__}; convert it with str() or drop it")
    return items


def _check_int(value: Any, field: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < low:
        raise ValueError(f"{field} must be an int >= {low}, got {value!r}")
    return int(value)


def _check_seeds(seeds: Any, n: int) -> list[int]:
    arr = np.asarray(seeds)
    if arr.shape != (n,) or (n and not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"seeds must be an integer array of shape ({n},) (one per prompt), got shape {arr.shape} "
                         f"dtype {arr.dtype}")
    if n and (arr.min() < 0 or arr.max() >= 2**32):
        raise ValueError("seeds must lie in [0, 2**32); draw them with draw_seeds(rng, n)")
    return [int(s) for s in arr]


def generator_identity(generator) -> dict:
    """What fixes a generator's outputs besides (prompt, seed), for cache and checkpoint keys: ``name``, ``config``,
    ``model`` (its ``identity()`` or None) and ``code`` (SHA-256 of its class's source file)."""
    import hashlib
    import inspect

    cfg = getattr(generator, "config", None)
    ident = getattr(generator, "identity", None)  # a CachedGenerator's is its wrapped generator's
    try:
        src = inspect.getsourcefile(type(generator))
        code = hashlib.sha256(Path(src).read_bytes()).hexdigest()[:16] if src else None
    except (OSError, TypeError):
        code = None
    return {"name": str(getattr(generator, "name", type(generator).__name__)), "config": cfg() if callable(cfg) else {},
            "model": ident() if callable(ident) else None, "code": code}


class SeededGenerator:
    """Base class of generators whose output depends only on (prompt, seed, settings): subclasses implement
    ``generate_seeded(prompts, seeds)`` and ``config()``; ``generate`` draws the seeds."""

    name: str = "seeded"
    batch_size: int = 16
    raw_text_input: bool = False

    def config(self) -> dict:
        """Settings that change outputs (JSON-able dict); part of every cache key."""
        return {}

    def generate(self, prompts: Sequence[str], rng: np.random.Generator) -> list[str]:
        """One output per prompt; ValueError on bad input, ``GenerationError`` if the backend fails."""
        items = _check_prompts(prompts)
        seeds = draw_seeds(rng, len(items))
        return self.generate_seeded(items, seeds)

    def generate_seeded(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[str]:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, config={self.config()!r})"


_WS = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """Whitespace-collapsed, case-folded form of ``text`` used for verbatim / duplicate checks."""
    return _WS.sub(" ", text).strip().casefold()


_PREAMBLE = re.compile(
    r"^\s*(?:(?:sure|okay|ok|certainly)[,!.]?\s*)?"
    r"(?:here(?:'s| is| are)[^:\n]{0,80}"
    r"|(?:the\s+)?(?:paraphrased?|rewritten|rephrased)(?:\s+(?:text|version|sentence|post))?[^:\n]{0,60}"
    r"|(?:new\s+)?(?:blog\s+)?post|text|answer|output)\s*:\s*",
    re.IGNORECASE,
)
_QUOTES = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019", "`": "`"}


def clean_reply(text: str) -> str:
    """Strip chat-model wrapping from a reply: preambles (``"Here is a paraphrase:"``), surrounding quotes, extra
    whitespace. Never raises."""
    out = text.strip()
    for _ in range(2):
        m = _PREAMBLE.match(out)
        if m and m.end() < len(out):
            out = out[m.end():].strip()
    if len(out) >= 2 and out[0] in _QUOTES and out.endswith(_QUOTES[out[0]]) and out.count(out[0]) <= 2:
        out = out[1:-1].strip()
    return _WS.sub(" ", out).strip()


def _chat_messages(system_prompt: str | None, prompt: str) -> list[dict]:
    """One chat request's messages: the optional system prompt, then ``prompt`` as the user message."""
    return ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
        {"role": "user", "content": prompt}]


def _check_text(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field} must be a non-empty string, got {value!r}")
    return value
