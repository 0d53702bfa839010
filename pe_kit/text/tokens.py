"""How many texts the encoder cuts: token lengths against the encoder's ``max_seq_length``.

A sentence-transformers encoder silently truncates every text to ``max_seq_length`` word pieces
(special tokens included; all-MiniLM-L6-v2's own cap is 256), so the embedding of a longer text only
sees its beginning. :func:`truncation_report` counts those texts so that every run can say how many
records and bank texts were cut, and at which cap.

Source: the model's own tokenizer (``transformers.AutoTokenizer``) and its ``sentence_bert_config.json``
``max_seq_length`` — the two things ``sentence_transformers.SentenceTransformer`` uses to truncate.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from pe_kit.text.encoder import resolve_model_path

__all__ = ["token_cap", "token_lengths", "truncation_report"]


@lru_cache(maxsize=8)
def _tokenizer(path: str):
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    tok.model_max_length = 1 << 30  # we measure full lengths: no "sequence is longer than" warnings
    return tok


def token_cap(model: str, max_seq_length: int | None = None) -> int:
    """The number of word pieces the encoder keeps per text (special tokens included).

    Args:
        model: encoder name or path (as ``pe_kit.text.encoder.Encoder``).
        max_seq_length: the run's cap (None = the model's own, from ``sentence_bert_config.json``,
            else the tokenizer's limit).

    Returns:
        int ≥ 1.

    Raises:
        ValueError: if neither a cap is given nor one can be read from the model folder.
    """
    if max_seq_length is not None:
        return int(max_seq_length)
    folder = Path(resolve_model_path(model))
    cfg = folder / "sentence_bert_config.json"
    if cfg.is_file():
        value = json.loads(cfg.read_text()).get("max_seq_length")
        if value:
            return int(value)
    tok_cfg = folder / "tokenizer_config.json"
    if tok_cfg.is_file():
        value = json.loads(tok_cfg.read_text()).get("model_max_length")
        if value and value < 1 << 20:
            return int(value)
    raise ValueError(f"cannot read the token cap of model {model!r}; pass max_seq_length")


def token_lengths(texts: Sequence[str], model: str) -> np.ndarray:
    """Word pieces per text with the model's tokenizer, special tokens included: int64 (n,)."""
    texts = list(texts)
    if not texts:
        return np.zeros(0, dtype=np.int64)
    tok = _tokenizer(resolve_model_path(model))
    out = []
    for i in range(0, len(texts), 4096):
        enc = tok(texts[i:i + 4096], add_special_tokens=True, truncation=False, return_attention_mask=False,
                  return_token_type_ids=False)
        out.extend(len(ids) for ids in enc["input_ids"])
    return np.asarray(out, dtype=np.int64)


def truncation_report(groups: dict[str, Sequence[str]], model: str, max_seq_length: int | None = None) -> dict:
    """Count the texts of each group longer than the encoder's cap (they are embedded truncated).

    Args:
        groups: name → texts, e.g. ``{"records": [...], "bank": [...]}``.
        model: encoder name or path. max_seq_length: the run's cap (None = the model's own).

    Returns:
        dict ``token_cap`` plus, per group, ``<name>_truncated`` (texts with more word pieces than the cap)
        and ``<name>_total`` (texts), e.g. ``{"token_cap": 32, "records_truncated": 12, "records_total": 900}``.
    """
    cap = token_cap(model, max_seq_length)
    out: dict = {"token_cap": cap}
    for name, texts in groups.items():
        lengths = token_lengths(texts, model)
        out[f"{name}_truncated"] = int((lengths > cap).sum())
        out[f"{name}_total"] = int(lengths.size)
    return out
