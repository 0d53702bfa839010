"""ONNX Runtime backend (fp32) for sentence-transformers encoders: exported once, cached by content, verified.

The whole sentence-transformers pipeline of a model (its Transformer, Pooling and — when the model has
one — Normalize modules) is traced once with ``torch.onnx.export`` into one fp32 graph
``(input_ids, attention_mask[, token_type_ids]) → sentence_embedding``, so pooling and normalisation are
the model's own by construction. The tokenizer the pipeline used is saved beside the graph and called
exactly as sentence-transformers calls it (``padding=True, truncation="longest_first",
max_length=max_seq_length``); texts are length-sorted into batches as sentence-transformers does.

The export is stored under ``cache_dir()/onnx/<key>/`` with SHA-256 sidecars, where ``<key>`` hashes the
model folder's bytes and the versions of torch, transformers, sentence-transformers and onnxruntime
(:func:`export_key`); a new model or library version exports afresh. Before a graph is used, it is
verified against the torch model on a probe set (:func:`verify_against_torch`: max |Δ| over every
coordinate and identical top-k routes); the verdict is cached per ``max_seq_length``. fp32 only: dynamic
int8 was measured to change ~19 % of top-5 routes, i.e. the audited mechanism.

Source: ONNX Runtime (``onnxruntime.InferenceSession``), ``torch.onnx.export`` (TorchScript exporter);
paper §3 (all-MiniLM-L6-v2 embeddings, L2-normalised).
"""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from pe_kit.cache import cache_dir, content_hash, read_verified, write_verified

__all__ = ["ONNX_FORMAT", "onnx_runtime_available", "model_digest", "export_key", "export_dir",
           "export_sentence_transformer", "OnnxSentenceEncoder", "probe_texts", "verify_against_torch",
           "load_verified_backend"]

ONNX_FORMAT = 1
PROBE_MAX_ABS = 1e-4
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_DIGESTS: dict[tuple, str] = {}


def onnx_runtime_available() -> bool:
    """True when ``onnxruntime`` can be imported (the ONNX backend's only runtime requirement)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def model_digest(model_path: str | os.PathLike) -> str:
    """SHA-256 over a model folder's files (relative paths and bytes, sorted); memoised by size and mtime.

    Args:
        model_path: a sentence-transformers model folder.

    Returns:
        64-character hex string.

    Raises:
        FileNotFoundError: if ``model_path`` is not a folder.
    """
    root = Path(model_path)
    if not root.is_dir():
        raise FileNotFoundError(f"model_path={str(root)!r} is not a model folder")
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    stamp = (str(root.resolve()),) + tuple((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                                            for p in files)
    if stamp not in _DIGESTS:
        h = hashlib.sha256()
        for p in files:
            rel = str(p.relative_to(root)).replace(os.sep, "/").encode()
            h.update(b"%d:" % len(rel) + rel + b"%d:" % p.stat().st_size)
            with open(p, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 22), b""):
                    h.update(block)
        _DIGESTS[stamp] = h.hexdigest()
    return _DIGESTS[stamp]


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "absent"


def export_key(model_path: str | os.PathLike) -> str:
    """Content key of an export: model bytes + exporter/runtime versions + this module's format (hex, 24 chars)."""
    versions = {d: _version(d) for d in ("torch", "transformers", "sentence-transformers", "onnxruntime")}
    return content_hash("pe_kit-onnx-export", ONNX_FORMAT, model_digest(model_path), versions)[:24]


def export_dir(model_path: str | os.PathLike) -> Path:
    """Folder of the cached export of ``model_path`` (``cache_dir()/onnx/<export_key>``; may not exist yet)."""
    return cache_dir() / "onnx" / export_key(model_path)


def export_sentence_transformer(st, folder: str | os.PathLike) -> list[str]:
    """Trace a loaded ``SentenceTransformer`` (whole pipeline) into ``folder/model.onnx`` (fp32) + its tokenizer.

    Args:
        st: ``sentence_transformers.SentenceTransformer`` on CPU.
        folder: destination; ``model.onnx`` (+ ``.sha256``) and the tokenizer files are written atomically.

    Returns:
        the graph's input names (a subset of input_ids, attention_mask, token_type_ids, in that order).

    Raises:
        RuntimeError: if the model's features are not plain token tensors (not exportable here).
    """
    import torch

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    feats = st.preprocess(["an export probe sentence", "a second, longer probe sentence for the trace"])
    names = [k for k in _INPUTS if k in feats and hasattr(feats[k], "shape")]
    extra = [k for k, v in feats.items() if hasattr(v, "shape") and k not in names]
    if "input_ids" not in names or extra:
        raise RuntimeError(f"cannot export: features {sorted(feats)} are not plain token tensors")

    class _Pipeline(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, *tensors):
            return self.model(dict(zip(names, tensors)))["sentence_embedding"]

    axes = {n: {0: "batch", 1: "tokens"} for n in names}
    axes["sentence_embedding"] = {0: "batch"}
    with tempfile.TemporaryDirectory(dir=folder) as tmp, torch.no_grad(), _quiet():
        out = Path(tmp) / "model.onnx"
        torch.onnx.export(_Pipeline(st.to("cpu").eval()), tuple(feats[n] for n in names), str(out), dynamo=False,
                          input_names=names, output_names=["sentence_embedding"], dynamic_axes=axes,
                          opset_version=17, do_constant_folding=True)
        st.tokenizer.save_pretrained(str(folder / "tokenizer"))
        write_verified(folder / "model.onnx", out.read_bytes())
    write_verified(folder / "inputs.json", json.dumps(names).encode())
    return names


class _quiet:
    """Silence the TorchScript tracer's warnings during one export."""

    def __enter__(self):
        import warnings
        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore")
        return self

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


class OnnxSentenceEncoder:
    """Run a verified export with ONNX Runtime (CPU, fp32).

    Args:
        folder: an export folder written by :func:`export_sentence_transformer`.
        max_seq_length: token cap (int ≥ 4), as sentence-transformers' ``max_seq_length``.

    Raises:
        FileNotFoundError: if the export is missing or fails its checksum (re-export).
    """

    def __init__(self, folder: str | os.PathLike, max_seq_length: int) -> None:
        from transformers import AutoTokenizer

        self.folder = Path(folder)
        self.max_seq_length = int(max_seq_length)
        graph = read_verified(self.folder / "model.onnx")
        names = read_verified(self.folder / "inputs.json")
        if graph is None or names is None:
            raise FileNotFoundError(f"ONNX export in {self.folder} is missing or corrupt: it will be re-exported")
        self._graph = graph
        self.input_names = list(json.loads(names))
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.folder / "tokenizer"))
        self._sessions: dict[int, object] = {}

    def session(self, num_threads: int):
        """The ``onnxruntime.InferenceSession`` for ``num_threads`` intra-op threads (created once each)."""
        if num_threads not in self._sessions:
            import onnxruntime as ort
            so = ort.SessionOptions()
            so.intra_op_num_threads = int(num_threads)
            so.inter_op_num_threads = 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            so.log_severity_level = 3
            self._sessions[num_threads] = ort.InferenceSession(self._graph, so, providers=["CPUExecutionProvider"])
        return self._sessions[num_threads]

    def tokenize(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Token tensors (int64 (n, T), T = longest in ``texts`` ≤ max_seq_length), as the pipeline makes them."""
        enc = self.tokenizer(list(texts), padding=True, truncation="longest_first", max_length=self.max_seq_length,
                             return_tensors="np")
        return {n: np.ascontiguousarray(enc[n], dtype=np.int64) for n in self.input_names}

    def encode(self, texts: Sequence[str], batch_size: int = 64, num_threads: int = 1) -> np.ndarray:
        """Embed ``texts`` → float32 (n, d) in input order; batches of length-sorted texts (longest first).

        Raises:
            ValueError: if ``batch_size`` < 1.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be ≥ 1")
        texts = list(texts)
        sess = self.session(num_threads)
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out: np.ndarray | None = None
        for start in range(0, len(texts), batch_size):
            idx = order[start:start + batch_size]
            emb = sess.run(["sentence_embedding"], self.tokenize([texts[i] for i in idx]))[0]
            if out is None:
                out = np.empty((len(texts), emb.shape[1]), dtype=np.float32)
            out[idx] = emb
        return out if out is not None else np.zeros((0, 0), np.float32)


def probe_texts(n_posts: int = 64) -> list[str]:
    """Verification texts: ``n_posts`` bundled blog posts (their first records) + edge cases.

    Edge cases: a one-letter text, a text far over any token cap, accents / CJK / emoji, repeated
    punctuation. Returns a list of str (deterministic).
    """
    from pe_kit.data.loaders import load_blogs

    posts: list[str] = []
    for user in load_blogs().users:
        posts.extend(user.texts[:2])
        if len(posts) >= n_posts:
            break
    edge = ["a", " ".join(["privacy"] * 600), "naïve café — 東京の天気 🙂👍", "!!! ??? ... ---",
            "The quick brown fox jumps over the lazy dog."]
    return edge + posts[:n_posts]


def _routes(x: np.ndarray, bank: np.ndarray, top_k: int) -> np.ndarray:
    scores = x.astype(np.float64) @ bank.astype(np.float64).T
    return np.sort(np.argsort(-scores, axis=1, kind="stable")[:, :top_k], axis=1)


def verify_against_torch(onnx_emb: np.ndarray, torch_emb: np.ndarray, n_records: int = 20, top_k: int = 5,
                         max_abs: float = PROBE_MAX_ABS) -> dict:
    """Compare ONNX and torch embeddings of the same probe texts.

    The first ``n_records`` rows act as records, the rest as a bank; top-``k`` routes (Eq. 1, by inner
    product of the L2-normalised rows) must be identical and every coordinate within ``max_abs``.

    Args:
        onnx_emb, torch_emb: float32 (n, d), n > n_records + top_k.

    Returns:
        dict ``passed`` (bool), ``max_abs_diff``, ``min_cosine``, ``routes_identical`` (fraction of
        records whose top-k set is unchanged), ``n_texts``, ``top_k``.

    Raises:
        ValueError: if the shapes differ or there are too few rows.
    """
    a, b = np.asarray(onnx_emb, np.float32), np.asarray(torch_emb, np.float32)
    if a.shape != b.shape or a.ndim != 2 or a.shape[0] <= n_records + top_k:
        raise ValueError(f"embeddings must share a 2-D shape with > {n_records + top_k} rows, got {a.shape}, {b.shape}")
    diff = float(np.max(np.abs(a - b)))
    cos = float(np.min(np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))
    same = np.all(_routes(a[:n_records], a[n_records:], top_k) == _routes(b[:n_records], b[n_records:], top_k), axis=1)
    frac = float(np.mean(same))
    return {"passed": bool(diff <= max_abs and frac == 1.0), "max_abs_diff": diff, "min_cosine": cos,
            "routes_identical": frac, "n_texts": int(a.shape[0]), "top_k": int(top_k), "tolerance": max_abs}


def _normalize(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def load_verified_backend(model_path: str, max_seq_length: int | None, load_torch) -> tuple[OnnxSentenceEncoder | None, dict]:
    """The ONNX encoder for ``model_path`` if its (cached or fresh) export verifies, else None and why.

    Exports on first use (needs the torch model: ``load_torch()`` → a ``SentenceTransformer`` with
    ``max_seq_length`` already applied), verifies on :func:`probe_texts` and caches both.

    Args:
        model_path: a local sentence-transformers folder.
        max_seq_length: the encoder's token cap (None: the model's own).
        load_torch: zero-argument callable returning the loaded torch ``SentenceTransformer``.

    Returns:
        ``(encoder or None, info)``; ``info`` holds ``export_key``, the verification record, or ``reason``.
    """
    if not onnx_runtime_available():
        return None, {"reason": "onnxruntime is not installed (pip install onnxruntime)"}
    if not os.path.isdir(model_path):
        return None, {"reason": f"{model_path!r} is not a local folder"}
    folder = export_dir(model_path)
    info: dict = {"export_key": folder.name}
    verdict_path = folder / f"verify-maxlen={max_seq_length}.json"
    raw = read_verified(verdict_path)
    verdict = json.loads(raw) if raw is not None else None
    st = None
    try:
        if read_verified(folder / "model.onnx") is None or read_verified(folder / "inputs.json") is None:
            st = load_torch()
            export_sentence_transformer(st, folder)
            verdict = None
        if verdict is None:
            st = st or load_torch()
            probe = probe_texts()
            enc = OnnxSentenceEncoder(folder, int(st.max_seq_length))
            ref = _normalize(st.encode(probe, batch_size=32, convert_to_numpy=True, normalize_embeddings=True,
                                       show_progress_bar=False))
            got = _normalize(enc.encode(probe, batch_size=32, num_threads=1))
            got_small = _normalize(enc.encode(probe[:21], batch_size=7, num_threads=1))  # other padding widths
            verdict = verify_against_torch(got, ref)
            batch_diff = float(np.max(np.abs(got[:21] - got_small)))
            verdict["batch_invariance"] = batch_diff
            verdict["passed"] = bool(verdict["passed"] and batch_diff <= PROBE_MAX_ABS)
            verdict["max_seq_length"] = int(st.max_seq_length)
            write_verified(verdict_path, json.dumps(verdict, sort_keys=True).encode())
    except Exception as exc:  # any export/runtime failure means: fall back to torch, and say why
        info["reason"] = f"ONNX export/verification failed: {type(exc).__name__}: {exc}"
        return None, info
    info["verification"] = verdict
    if not verdict["passed"]:
        info["reason"] = f"ONNX export did not verify against torch: {verdict}"
        return None, info
    try:
        return OnnxSentenceEncoder(folder, verdict["max_seq_length"]), info
    except FileNotFoundError as exc:
        info["reason"] = str(exc)
        return None, info
