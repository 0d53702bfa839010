"""Pool builders: the paraphrase probe pool Q (App. B) and label-only candidate banks (§3, App. C)."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from pe_kit.text.generators.base import (_WS, GenerationError, PoolShortfallError, TextGenerator, _check_int,
                                         _check_prompts, _check_text, normalize_text)
from pe_kit.text.generators.prompts import _LABEL_TEMPLATES, label_prompt, paraphrase_prompt


def _fill_slots(texts: list[str | None], slot_prompts: list[str], slot_sources: list[str | None],
                generator: TextGenerator, rng: np.random.Generator, seen: set[str], attempts: int,
                stats: dict[str, int], what: str) -> None:
    """Fill the empty slots of ``texts`` in place with non-empty outputs that are neither their slot's source nor
    in ``seen``, for at most ``attempts`` rounds (fresh seeds each)."""
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


def record_prompt(generator) -> Callable[[str], str]:
    """How a paraphrase pool prompts ``generator`` with a record: the record itself for a ``raw_text_input``
    generator, else ``paraphrase_prompt``."""
    return (lambda t: t) if getattr(generator, "raw_text_input", False) else paraphrase_prompt


def make_paraphrase_pool(records: Sequence[str], pool_size: int, generator: TextGenerator, rng: np.random.Generator, *,
                         prompt_fn: Callable[[str], str] | None = None, max_attempts: int = 8,
                         on_shortfall: str = "raise") -> tuple[list[str], np.ndarray]:
    """The paraphrase probe pool Q (App. B: M = 512 from 64 records): ``pool_size`` distinct, non-verbatim rewrites
    of a canary's records → (texts in slot order, int64 source record of each).

    Slot j paraphrases record ``j % len(records)``; an empty output or one equal to a record or entry (after
    ``normalize_text``) is asked again, up to ``max_attempts`` rounds; then ``on_shortfall="reassign"`` moves each
    empty slot to the next record. Prompts: ``prompt_fn`` or ``record_prompt``. Raises ValueError for bad input;
    ``PoolShortfallError`` naming the missing slots; ``GenerationError`` from the backend.
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
    prompt_fn = record_prompt(generator) if prompt_fn is None else prompt_fn
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


def make_label_bank(labels: Sequence[str], generator: TextGenerator, rng: np.random.Generator, *,
                    prompt_fn: Callable[[str, int], str] | None = None, max_attempts: int = 8) -> list[str]:
    """A label-only candidate bank (§3, App. C bank A): one distinct, non-empty text per entry of ``labels``.

    Entry j uses wording ``j % 4`` of ``label_prompt`` unless ``prompt_fn(label, j)`` is given; duplicates and empty
    outputs are asked again. Raises ValueError for bad input or a raw-text generator; ``PoolShortfallError``.
    """
    labs = _check_prompts(labels, "labels")
    if not labs:
        raise ValueError("labels must hold at least one label (one per bank entry)")
    for i, lab in enumerate(labs):
        _check_text(lab, f"labels[{i}]")
    max_attempts = _check_int(max_attempts, "max_attempts", 1)
    if prompt_fn is None:
        if getattr(generator, "raw_text_input", False):
            raise ValueError(
                f"generator {generator.name!r} rewrites its input text and cannot follow label prompts; "
                "use a language-model generator (LocalLMGenerator / OpenAIChatGenerator) or pass prompt_fn"
            )
        prompt_fn = lambda label, j: label_prompt(label, template=j % len(_LABEL_TEMPLATES))  # noqa: E731
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
