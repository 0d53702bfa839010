"""Candidate banks S: where the p = 8192 shared candidates come from (§3, App. C).

Kinds (``make_bank``):

* ``bankA`` – the bundled label-only SmolLM2 bank for the Blog corpus (``data.default_bank_path``;
  like the paper's bank A), p texts sampled without replacement.
* ``bankB`` – the bundled SmolLM2 bank for the Blog corpus written from a label *and* three records of public
  bloggers (``data.default_bank_b_path``; like the paper's bank B, App. C), built by ``scripts/make_bank_b.py``
  (docs/banks.md); a world on it keeps the example authors out of every private split (``data.bank_b_authors``).
* ``file`` – a user-supplied JSON Lines file with a ``text`` field (``file:<path>`` or a bare path).
* ``public`` – records of *public* users (the split left over after canary/aux/calibration/test, so
  disjoint from every split), label-stratified: each label gets its share of the public records,
  allocated by largest remainder, then records are drawn uniformly within each label.
* ``llm-label`` – a language model sees only a label per prompt (App. C bank A); the label mix is the
  record share of each label among public + aux users (the server's public knowledge).
* ``llm-icl`` – each prompt shows three records of public users (same label when possible) as
  in-context examples (App. C bank B).

Every ``Bank`` records how it was made (``info``: kind, sizes, seeds, generator name and settings,
label counts, rejected outputs). Generators come from ``pe_kit.text.generators`` and are wrapped in a
``CachedGenerator`` (on-disk, content-keyed) unless ``cache=False``.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pe_kit.data.loaders import Corpus, DataError, load_bank_texts
from pe_kit.data.splits import Splits

__all__ = ["BANK_KINDS", "Bank", "allocate", "label_mix", "bank_b", "bank_b_missing_message", "public_bank", "file_bank", "llm_label_bank",
           "llm_icl_bank", "make_bank"]

BANK_KINDS = ("bankA", "bankB", "file", "public", "llm-label", "llm-icl")


@dataclass(frozen=True)
class Bank:
    """A candidate bank before any probe is written into it.

    Attributes:
        texts: tuple of p distinct str, in bank order (index = bank position).
        labels: tuple of p str (the label each entry was drawn/generated for) or None when unknown.
        info: provenance dict (``kind`` and everything needed to remake it).
    """

    texts: tuple[str, ...]
    labels: tuple[str, ...] | None = None
    info: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.texts)


def _check_size(size, field_name: str = "size") -> int:
    if isinstance(size, bool) or int(size) != size or size < 1:
        raise ValueError(f"{field_name}={size!r} must be an integer ≥ 1 (the bank size p)")
    return int(size)


def allocate(counts: dict, size: int) -> dict:
    """Largest-remainder allocation of ``size`` slots in proportion to ``counts``, capped by availability.

    Args:
        counts: dict label → available items (int ≥ 0).
        size: slots to fill (≤ total available).

    Returns:
        dict label → allocated int, summing to ``size``, each ≤ its count. Shares are size·n_l/Σn; the
        floors are taken, the remaining slots go to the largest remainders (ties: sorted label); a label
        capped by its count passes its excess on by re-running on the uncapped labels.

    Raises:
        ValueError: if ``size`` exceeds the total or a count is negative.
    """
    size = int(size)
    if any(int(c) < 0 for c in counts.values()):
        raise ValueError("counts must be ≥ 0")
    total = sum(int(c) for c in counts.values())
    if size > total:
        raise ValueError(f"cannot allocate {size} slots from {total} items; lower the bank size or add candidates")
    out = {lab: 0 for lab in counts}
    left = size
    open_labels = [lab for lab in counts if int(counts[lab]) > 0]
    while left > 0:
        avail = {lab: int(counts[lab]) - out[lab] for lab in open_labels}
        tot = sum(avail.values())
        share = {lab: left * avail[lab] / tot for lab in open_labels}
        add = {lab: min(avail[lab], int(np.floor(share[lab]))) for lab in open_labels}
        rest = left - sum(add.values())
        for lab in sorted(open_labels, key=lambda x: (-(share[x] - np.floor(share[x])), str(x))):
            if rest == 0:
                break
            if add[lab] < avail[lab]:
                add[lab] += 1
                rest -= 1
        for lab in open_labels:
            out[lab] += add[lab]
        left = size - sum(out.values())
        open_labels = [lab for lab in open_labels if out[lab] < int(counts[lab])]
    return out


def label_mix(users, size: int) -> tuple[list[str], dict]:
    """Per-entry labels for a generated bank, in proportion to each label's record share among ``users``.

    Args:
        users: iterable of ``data.User`` (public knowledge: public + aux users).
        size: p.

    Returns:
        (labels list of p str in blocks by label, dict label → allocated count).

    Raises:
        ValueError: if ``users`` hold no records.
    """
    size = _check_size(size)
    share = Counter()
    for u in users:
        share[u.label] += len(u.texts)
    if not share:
        raise ValueError("users hold no records: cannot derive a label mix (pass public/aux users)")
    total = sum(share.values())
    # proportional allocation without caps: floors, then the largest remainders (ties: sorted label)
    exact = {lab: size * n / total for lab, n in sorted(share.items())}
    alloc = {lab: int(np.floor(v)) for lab, v in exact.items()}
    for lab in sorted(exact, key=lambda x: (-(exact[x] - np.floor(exact[x])), str(x)))[: size - sum(alloc.values())]:
        alloc[lab] += 1
    labels = [lab for lab in sorted(alloc, key=lambda x: (-alloc[x], x)) for _ in range(alloc[lab])]
    return labels, {lab: n for lab, n in alloc.items() if n}


def _sample_texts(texts: list[str], size: int, rng: np.random.Generator, kind: str) -> list[str]:
    if len(texts) < size:
        raise ValueError(f"bank {kind!r} has {len(texts)} distinct texts but size={size}; lower bank_size (--set "
                         f"bank_size={len(texts)}) or supply more candidates")
    chosen = np.sort(rng.choice(len(texts), size=size, replace=False))
    return [texts[i] for i in chosen]


def file_bank(path, size: int, rng: np.random.Generator, kind: str = "file") -> Bank:
    """``size`` distinct texts sampled without replacement (kept in file order) from a JSON Lines file.

    Args:
        path: file with a ``text`` field per line (None = the bundled bank A). size: p. rng: the draw.
        kind: recorded in ``info`` (``bankA`` for the bundled file).

    Raises:
        ValueError: if the file has fewer distinct texts than ``size``; DataError on a malformed line.
    """
    size = _check_size(size)
    texts, info = load_bank_texts(path)
    return Bank(tuple(_sample_texts(texts, size, rng, kind)), None,
                {"bank": kind, "kind": kind, **info, "available": len(texts), "bank_size": size})


def bank_b_missing_message() -> str:
    """Why ``bankB`` cannot be built here, and what to do (bank B not shipped yet; how much of it is committed)."""
    from pe_kit.data.loaders import default_bank_b_path

    part = default_bank_b_path(partial=True)
    done = ""
    if part.is_file():
        try:
            done = f" ({len(load_bank_texts(part, dedupe=False)[0]):,} of 8,192 texts are committed in {part.name})"
        except (DataError, OSError, ValueError) as exc:
            done = f" (its partial file {part.name} is unreadable: {exc}; delete it and rebuild)"
    return (f"bank='bankB': the bank-B file {default_bank_b_path().name} is not shipped yet{done}; build it with "
            "scripts/make_bank_b.py (SmolLM2 on CPU, hours; resumable, docs/banks.md), or choose bank='bankA' or "
            "'public'")


def bank_b(size: int, rng: np.random.Generator) -> Bank:
    """``size`` texts of the shipped bank B (label + three public examples, App. C), sampled as bank A's are.

    Raises:
        ValueError: bank B is not shipped (:func:`bank_b_missing_message`) or holds fewer than ``size`` texts.
    """
    from pe_kit.data.loaders import bank_b_authors, default_bank_b_path

    path = default_bank_b_path()
    if not path.is_file():
        raise ValueError(bank_b_missing_message())
    bank = file_bank(path, size, rng, kind="bankB")
    return Bank(bank.texts, None, {**bank.info, "examples_per_prompt": 3, "example_authors": len(bank_b_authors(path))})


def public_bank(corpus: Corpus, splits: Splits, size: int, rng: np.random.Generator) -> Bank:
    """Label-stratified bank of public users' records (disjoint from canary/aux/calibration/test users).

    Distinct texts of ``splits.public`` users are grouped by their user's label; ``allocate`` gives each
    label its proportional share of ``size``; within a label, records are drawn uniformly without
    replacement. Bank order: the drawn records sorted by (user order in ``splits.public``, record order).

    Args:
        corpus: the users (``data.Corpus``); splits: the study's splits. size: p. rng: the draws.

    Returns:
        ``Bank`` with per-entry labels; ``info`` has ``public_users``, ``available``, ``label_counts``.

    Raises:
        ValueError: if public users have fewer distinct records than ``size`` (lower the bank size, shrink
            the other splits, or use a larger corpus).
    """
    size = _check_size(size)
    by_id = corpus.by_id()
    seen: set[str] = set()
    items: list[tuple[str, str]] = []  # (label, text) in public-user order
    for uid in splits.public:
        u = by_id[uid]
        for t in u.texts:
            if t not in seen:
                seen.add(t)
                items.append((u.label, t))
    if len(items) < size:
        raise ValueError(f"public users ({len(splits.public)}) have {len(items)} distinct records but size={size}; "
                         f"lower bank_size (--set bank_size={max(1, len(items))}), shrink the other splits (--set "
                         "n_aux=… / n_calibration = n_test=…), add --fit-data, or use a larger corpus")
    groups: dict[str, list[int]] = {}
    for i, (lab, _) in enumerate(items):
        groups.setdefault(lab, []).append(i)
    alloc = allocate({lab: len(ix) for lab, ix in sorted(groups.items())}, size)
    chosen: list[int] = []
    for lab in sorted(groups):
        if alloc[lab]:
            chosen.extend(rng.choice(groups[lab], size=alloc[lab], replace=False).tolist())
    chosen.sort()
    return Bank(tuple(items[i][1] for i in chosen), tuple(items[i][0] for i in chosen),
                {"bank": "public", "kind": "public", "public_users": len(splits.public), "available": len(items),
                 "bank_size": size, "label_counts": {k: v for k, v in alloc.items() if v}})


def _cached(generator, cache: bool):
    from pe_kit.text.generators.cached import CachedGenerator

    if generator is None:
        raise ValueError("generator is None: pass a pe_kit.text.generators generator (LocalLMGenerator, "
                         "OpenAIChatGenerator, ...)")
    return generator if (not cache or isinstance(generator, CachedGenerator)) else CachedGenerator(generator)


def _gen_info(generator) -> dict:
    cfg = getattr(generator, "config", None)
    return {"generator": getattr(generator, "name", type(generator).__name__),
            "generator_config": cfg() if callable(cfg) else {}}


def llm_label_bank(users, size: int, generator, rng: np.random.Generator, *, genre: str = "personal blog post",
                   attribute: str = "industry", cache: bool = True, max_attempts: int = 8) -> Bank:
    """Label-only generated bank (App. C bank A): each prompt names one label and nothing else.

    Args:
        users: public-knowledge users whose record shares set the label mix (``label_mix``).
        size: p. generator: a chat-style ``generation`` generator (wrapped in ``CachedGenerator``).
        rng: seeds of the generation. genre/attribute: prompt wording (``generation.label_prompt``).
        cache: wrap the generator in a disk cache. max_attempts: re-asks for empty/duplicate outputs.

    Returns:
        ``Bank`` with per-entry labels; ``info`` has the label counts, generator name/settings.

    Raises:
        ValueError: for bad input or a raw-text generator; ``generation.PoolShortfallError`` if outputs
            stay empty/duplicate after ``max_attempts``.
    """
    from pe_kit.text.generators.pools import make_label_bank
    from pe_kit.text.generators.prompts import label_prompt

    size = _check_size(size)
    gen = _cached(generator, cache)
    labels, counts = label_mix(users, size)
    if getattr(gen, "raw_text_input", False):
        raise ValueError(f"generator {gen.name!r} rewrites its input and cannot follow label prompts; use a "
                         "language-model generator")
    prompt_fn = lambda lab, j: label_prompt(lab, genre=genre, attribute=attribute, template=j % 4)  # noqa: E731
    texts = make_label_bank(labels, gen, rng, prompt_fn=prompt_fn, max_attempts=max_attempts)
    return Bank(tuple(texts), tuple(labels), {"bank": "llm-label", "kind": "llm-label", "bank_size": size,
                                              "label_counts": counts, "genre": genre, "attribute": attribute,
                                              **_gen_info(gen)})


def llm_icl_bank(corpus: Corpus, splits: Splits, size: int, generator, rng: np.random.Generator, *,
                 examples: int = 3, genre: str = "blog post", cache: bool = True, max_attempts: int = 8) -> Bank:
    """In-context generated bank (App. C bank B): each prompt shows ``examples`` public records.

    Entry j gets label ℓ_j from the public + aux label mix (``label_mix``) and ``examples`` distinct
    records of public users drawn uniformly from those with label ℓ_j (topped up from all public records
    if the label has too few). No canary, aux, calibration or test record is ever shown.

    Args:
        corpus, splits: users and splits. size: p. generator: chat-style generator. rng: example draws,
        then generation seeds. examples: in-context examples per prompt (3). genre: prompt wording.
        cache: wrap in ``CachedGenerator``. max_attempts: re-asks for empty/duplicate outputs.

    Returns:
        ``Bank``; ``info`` counts outputs that copied one of their examples verbatim (``copied_examples``).

    Raises:
        ValueError: if public users hold fewer than ``examples`` records; generation errors as
        ``llm_label_bank``.
    """
    from pe_kit.text.generators.base import normalize_text
    from pe_kit.text.generators.pools import make_label_bank
    from pe_kit.text.generators.prompts import icl_prompt

    size = _check_size(size)
    if int(examples) != examples or examples < 1:
        raise ValueError(f"examples={examples!r} must be an integer ≥ 1")
    gen = _cached(generator, cache)
    by_id = corpus.by_id()
    public = [by_id[u] for u in splits.public]
    pool = [(u.label, t) for u in public for t in u.texts]
    if len(pool) < examples:
        raise ValueError(f"public users hold {len(pool)} records but each prompt needs examples={examples}; "
                         "shrink the other splits (--set n_aux=… / n_calibration = n_test=…) or use a larger corpus")
    labels, counts = label_mix(public + [by_id[u] for u in splits.aux], size)
    by_label: dict[str, list[int]] = {}
    for i, (lab, _) in enumerate(pool):
        by_label.setdefault(lab, []).append(i)
    shown: list[list[str]] = []
    for lab in labels:
        same = by_label.get(lab, [])
        if len(same) >= examples:
            pick = rng.choice(same, size=examples, replace=False)
        else:
            others = np.setdiff1d(np.arange(len(pool)), same)
            pick = np.concatenate([np.asarray(same, dtype=np.int64),
                                   rng.choice(others, size=examples - len(same), replace=False)])
        shown.append([pool[int(i)][1] for i in pick])
    prompts = [icl_prompt(ex, genre=genre) for ex in shown]
    texts = make_label_bank(labels, gen, rng, prompt_fn=lambda lab, j: prompts[j], max_attempts=max_attempts)
    copied = sum(normalize_text(t) in {normalize_text(e) for e in ex} for t, ex in zip(texts, shown))
    return Bank(tuple(texts), tuple(labels), {"bank": "llm-icl", "kind": "llm-icl", "bank_size": size,
                                              "examples_per_prompt": int(examples), "label_counts": counts,
                                              "public_users": len(public), "copied_examples": int(copied),
                                              "genre": genre, **_gen_info(gen)})


def make_bank(kind: str, size: int, rng: np.random.Generator, *, corpus: Corpus | None = None,
              splits: Splits | None = None, generator=None, cache: bool = True) -> Bank:
    """Build a bank by kind name (the dispatcher used by ``study.build_world``).

    Args:
        kind: ``bankA``, ``bankB``, ``public``, ``llm-label``, ``llm-icl``, ``file:<path>`` or a path to a JSON
            Lines file (treated as ``file``).
        size: p. rng: the only randomness. corpus, splits: needed by ``public`` / ``llm-*``.
        generator: for ``llm-*`` (default: SmolLM2 ``LocalLMGenerator``; slow on CPU, cached).
        cache: wrap generators in ``CachedGenerator``.

    Raises:
        ValueError: unknown kind (the message lists the kinds), missing corpus/splits, too few texts.
    """
    size = _check_size(size, "bank_size")
    if kind in ("public", "llm-label", "llm-icl") and (corpus is None or splits is None):
        raise ValueError(f"bank kind {kind!r} needs corpus and splits")
    if kind == "bankA":
        return file_bank(None, size, rng, kind="bankA")
    if kind == "bankB":
        return bank_b(size, rng)
    if kind == "public":
        return public_bank(corpus, splits, size, rng)
    if kind in ("llm-label", "llm-icl"):
        if generator is None:
            from pe_kit.text.generators.local_lm import LocalLMGenerator

            generator = LocalLMGenerator()
        if kind == "llm-label":
            by_id = corpus.by_id()
            users = [by_id[u] for u in splits.public + splits.aux]
            return llm_label_bank(users, size, generator, rng, cache=cache)
        return llm_icl_bank(corpus, splits, size, generator, rng, cache=cache)
    path = kind[5:] if kind.startswith("file:") else kind
    if not Path(path).is_file():
        raise ValueError(f"bank={kind!r} is neither a known kind {BANK_KINDS} nor an existing file; pass "
                         "'file:<path to JSON Lines with a text field>'")
    return file_bank(path, size, rng, kind=kind if not kind.startswith("file:") else "file")
