"""Prompt builders: paraphrase (App. B), label-only (App. C bank A), label plus public examples (bank B) and
ICL feedback (Alg. A.1 line 23) prompts."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from pe_kit.text.generators.base import _check_prompts, _check_text


def paraphrase_prompt(text: str) -> str:
    """Instruction asking a chat model to paraphrase ``text`` (App. B); ValueError if ``text`` is empty."""
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
    """Label-only prompt for bank generation (§3, App. C bank A): ``attribute`` is what the label describes,
    ``template`` one of four wordings. Raises ValueError naming the bad field."""
    for field, value in (("label", label), ("genre", genre), ("attribute", attribute)):
        _check_text(value, field)
    if not isinstance(template, (int, np.integer)) or not 0 <= int(template) < len(_LABEL_TEMPLATES):
        raise ValueError(f"template must be an int in [0, {len(_LABEL_TEMPLATES)}), got {template!r}")
    return _LABEL_TEMPLATES[int(template)].format(label=label.strip(), genre=genre, attribute=attribute)


def icl_prompt(examples: Sequence[str], negatives: Sequence[str] = (), *, genre: str = "text") -> str:
    """In-context prompt for PE variations (Alg. A.1 feedback): positively scored ``examples`` to imitate and
    optional ``negatives`` to avoid. Raises ValueError if ``examples`` is empty or an item is not a non-empty str."""
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


def bank_b_prompt(label: str, examples: Sequence[str], *, genre: str = "personal blog post",
                  attribute: str = "industry") -> str:
    """Label plus public in-context ``examples`` for bank generation (§3, App. C bank B; public records only).
    Raises ValueError naming the bad field."""
    for field, value in (("label", label), ("genre", genre), ("attribute", attribute)):
        _check_text(value, field)
    items = _check_prompts(examples, "examples")
    if not items:
        raise ValueError("examples must hold at least one public text (bank B shows three)")
    for i, t in enumerate(items):
        _check_text(t, f"examples[{i}]")
    lines = [f"Here are {len(items)} short {genre}s by people whose {attribute} is {label.strip()}:"]
    lines += [f"{i + 1}. {t.strip()}" for i, t in enumerate(items)]
    lines.append(f"Write one new short {genre} by someone whose {attribute} is {label.strip()}, similar in topic "
                 f"and style to these, without copying any of them. Reply with the {genre} only.")
    return "\n".join(lines)
