"""Candidate banks S: where the p = 8192 shared candidates come from (§3, App. C): ``bankA`` (bundled label-only
SmolLM2 bank), ``bankB`` (bundled, written from a label and three public bloggers' records), ``file`` (JSON Lines
with a ``text`` field), ``public`` (public users' records), ``llm-label`` and ``llm-icl`` (generated).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pe_kit.data.loaders import Corpus, DataError, load_bank_texts
from pe_kit.data.splits import Splits

__all__ = ["BANK_KINDS", "Bank", "allocate", "label_mix", "bank_b", "bank_b_missing_message", "public_bank",
           "file_bank", "llm_label_bank", "llm_icl_bank", "make_bank"]

BANK_KINDS = ("bankA", "bankB", "file", "public", "llm-label", "llm-icl")


@dataclass(frozen=True)
class Bank:
    """A candidate bank before any probe is written into it: p distinct ``texts`` in bank order, their ``labels``
    (or None) and ``info`` (``kind`` and what remakes it)."""

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
    """Largest-remainder allocation of ``size`` slots in proportion to ``counts`` (label → items), capped by them
    (ties: sorted label; a capped label passes its excess on). Raises ValueError if ``size`` exceeds the total or a
    count is negative."""
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
    """Per-entry labels (p, in blocks by label) for a generated bank, in proportion to each label's record share
    among ``users`` (public knowledge), and the count per label. Raises ValueError if the users hold no records."""
    size = _check_size(size)
    share = Counter()
    for u in users:
        share[u.label] += len(u.texts)
    if not share:
        raise ValueError("users hold no records: cannot derive a label mix (pass public/aux users)")
    # uncapped (each label could fill every slot): the shares of size·n_l/Σn are those of size·n_l·size/Σ(n·size)
    alloc = allocate({lab: n * size for lab, n in sorted(share.items())}, size)
    labels = [lab for lab in sorted(alloc, key=lambda x: (-alloc[x], x)) for _ in range(alloc[lab])]
    return labels, {lab: n for lab, n in alloc.items() if n}


def file_bank(path, size: int, rng: np.random.Generator, kind: str = "file") -> Bank:
    """``size`` distinct texts sampled without replacement (kept in file order) from a JSON Lines file (None: bank A).
    Raises ValueError if the file has fewer distinct texts than ``size``; DataError on a malformed line."""
    size = _check_size(size)
    texts, info = load_bank_texts(path)
    if len(texts) < size:
        raise ValueError(f"bank {kind!r} has {len(texts)} distinct texts but size={size}; lower bank_size (--set "
                         f"bank_size={len(texts)}) or supply more candidates")
    chosen = np.sort(rng.choice(len(texts), size=size, replace=False))
    return Bank(tuple(texts[i] for i in chosen), None,
                {"bank": kind, "kind": kind, **info, "available": len(texts), "bank_size": size})


def bank_b_missing_message() -> str:
    """Why ``bankB`` cannot be built here (not shipped; how much of it is committed) and what to do."""
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
    """``size`` texts of the shipped bank B (App. C), sampled as bank A's; ValueError if absent or too small."""
    from pe_kit.data.loaders import bank_b_authors, default_bank_b_path

    path = default_bank_b_path()
    if not path.is_file():
        raise ValueError(bank_b_missing_message())
    bank = file_bank(path, size, rng, kind="bankB")
    return Bank(bank.texts, None, {**bank.info, "examples_per_prompt": 3, "example_authors": len(bank_b_authors(path))})


def public_bank(corpus: Corpus, splits: Splits, size: int, rng: np.random.Generator) -> Bank:
    """Label-stratified bank of public users' distinct records: each label's share of ``size`` (``allocate``) drawn
    uniformly, kept in (user, record) order. Raises ValueError if there are fewer distinct records than ``size``."""
    size = _check_size(size)
    by_id = corpus.by_id()
    first_label: dict[str, str] = {}  # distinct text → label of its first user, in (user, record) order
    for uid in splits.public:
        for t in by_id[uid].texts:
            first_label.setdefault(t, by_id[uid].label)
    items = [(lab, t) for t, lab in first_label.items()]
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
    """Label-only generated bank (App. C bank A): each prompt names one label (``prompts.label_prompt``), the label
    mix from ``users`` (``label_mix``). Raises ValueError for a raw-text generator; ``PoolShortfallError``."""
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
    """In-context generated bank (App. C bank B): entry j gets label ℓ_j from the public + aux label mix and a
    prompt showing ``examples`` distinct public records of ℓ_j (topped up from all public records); ``info`` counts
    outputs copying an example. Raises ValueError if public users hold fewer than ``examples`` records, or as
    ``llm_label_bank``."""
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
    """A bank by ``kind``: ``bankA``, ``bankB``, ``public``, ``llm-label``, ``llm-icl``, ``file:<path>`` or a path
    (``corpus`` and ``splits`` for ``public`` / ``llm-*``; ``generator`` default SmolLM2). Raises ValueError for an
    unknown kind, missing corpus/splits, or too few texts."""
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
