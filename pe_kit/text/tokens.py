"""How many texts the encoder cuts: sentence-transformers truncates every text to ``max_seq_length`` word pieces
(special tokens included); ``truncation_report`` counts the longer texts for every run."""
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
    """Word pieces the encoder keeps per text: ``max_seq_length``, else the model's ``sentence_bert_config.json``,
    else its tokenizer's limit. Raises ValueError if none can be read."""
    if max_seq_length is not None:
        return int(max_seq_length)
    folder = Path(resolve_model_path(model))
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length")):
        cfg = folder / name
        value = json.loads(cfg.read_text()).get(key) if cfg.is_file() else None
        if value and value < 1 << 20:  # a tokenizer without a limit says 1e30
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
    """Texts of each group (name → texts) longer than the encoder's cap: ``token_cap`` and per group
    ``<name>_truncated`` and ``<name>_total``."""
    cap = token_cap(model, max_seq_length)
    out: dict = {"token_cap": cap}
    for name, texts in groups.items():
        lengths = token_lengths(texts, model)
        out[f"{name}_truncated"] = int((lengths > cap).sum())
        out[f"{name}_total"] = int(lengths.size)
    return out
