"""WordNet 3.0 synonym-swap paraphraser (offline; Debian ``wordnet-base``, WNDB files parsed directly): a fast,
crude stand-in for the paper's LLM paraphrases (App. B) for CI, the tiny preset and the ``auto`` route."""
from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from pe_kit.text.generators.base import (DEFAULT_WORDNET_DIR, GenerationError, SeededGenerator, _check_int,
                                         _check_prompts, _check_seeds)

_POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
_WNDB_FILES = [f"{kind}.{f}" for f in _POS_FILES.values() for kind in ("index", "data")]
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
        # index[pos][lemma]: synset offsets, most frequent sense first; dominant[lemma]: its most tagged pos
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
        """Lower-case synonyms of ``lemma`` from its first ``senses`` senses (else the first of its first four with
        some), in ``pos_filter`` (default: its most frequently tagged part of speech)."""
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
    missing = [f for f in _WNDB_FILES if not (root / f).is_file()]
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
    """Offline paraphraser (the prompt is the source text): each eligible word (alphabetic, ≥ 3 letters, no stop
    word or -ing form, a lemma or regular plural) is swapped with probability ``rate`` (at least one) for a synonym
    of its first ``senses`` senses in its most tagged part of speech, keeping case and plural; deterministic per
    (text, seed). ``wordnet_dir`` default: env ``PE_KIT_WORDNET`` or ``/usr/share/wordnet``. Raises ValueError for
    bad settings; ``GenerationError`` without the files."""

    raw_text_input = True

    def __init__(self, rate: float = 0.3, senses: int = 2, wordnet_dir: str | os.PathLike | None = None, batch_size: int = 256):
        if not isinstance(rate, (int, float)) or not 0.0 < float(rate) <= 1.0:
            raise ValueError(f"rate must be a float in (0, 1], got {rate!r}")
        self.rate = float(rate)
        self.senses = _check_int(senses, "senses", 1)
        self.batch_size = _check_int(batch_size, "batch_size", 1)
        self.wordnet_dir = Path(wordnet_dir or os.environ.get("PE_KIT_WORDNET", DEFAULT_WORDNET_DIR))
        self.name = "wordnet-v1"
        self._wn: _WordNet | None = None

    def config(self) -> dict:
        return {"rate": self.rate, "senses": self.senses}

    def identity(self) -> str:
        """Digest of the WNDB ``index.*`` / ``data.*`` files (``"missing"`` if absent), for cache keys."""
        from pe_kit.cache import content_hash, file_digest

        if not all((self.wordnet_dir / f).is_file() for f in _WNDB_FILES):
            return "missing"
        return "sha256:" + content_hash([(f, file_digest(self.wordnet_dir / f)) for f in _WNDB_FILES])

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
        """Rewrite one ``text`` with ``seed`` (see the class docstring)."""
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
        """Paraphrase each prompt (the source text) with its seed."""
        items = _check_prompts(prompts)
        seed_list = _check_seeds(seeds, len(items))
        return [self.paraphrase(t, s) for t, s in zip(items, seed_list)]
