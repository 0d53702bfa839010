"""ONNX Runtime backend (fp32) of a sentence-transformers encoder: the whole pipeline traced once into one graph
under ``cache_dir()/onnx/<export_key>``, verified against the torch model on ``probe_texts`` (identical top-k
routes, Eq. 1; the verdict cached per token cap) before use. fp32 only: int8 changed ~19 % of top-5 routes.
"""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from pe_kit.cache import cache_dir, content_hash, hash_file, read_verified, write_verified

__all__ = ["export_key", "OnnxSentenceEncoder", "probe_texts", "verify_against_torch", "load_verified_backend"]

ONNX_FORMAT = 1
PROBE_MAX_ABS = 1e-4
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_DIGESTS: dict[tuple, str] = {}


def _model_digest(root: Path) -> str:
    """SHA-256 of a model folder's files (relative path, size, bytes; sorted), memoised by (path, size, mtime)."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    stamp = (str(root.resolve()),) + tuple((p.relative_to(root).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
                                            for p in files)
    if stamp not in _DIGESTS:
        h = hashlib.sha256()
        for (rel, size, _), p in zip(stamp[1:], files):
            h.update(b"%d:" % len(rel.encode()) + rel.encode() + b"%d:" % size)
            with open(p, "rb") as fh:
                hash_file(fh, h)
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
    return content_hash("pe_kit-onnx-export", ONNX_FORMAT, _model_digest(Path(model_path)), versions)[:24]


def _export(st, folder: Path) -> None:
    """Trace a loaded ``SentenceTransformer`` (on CPU) into ``folder/model.onnx`` (fp32), its input names into
    ``inputs.json`` and its tokenizer into ``tokenizer/``; RuntimeError if its features are not plain token tensors."""
    import torch

    feats = st.preprocess(["an export probe sentence", "a second, longer probe sentence for the trace"])
    names = [k for k in _INPUTS if k in feats and hasattr(feats[k], "shape")]
    if "input_ids" not in names or any(hasattr(v, "shape") and k not in names for k, v in feats.items()):
        raise RuntimeError(f"cannot export: features {sorted(feats)} are not plain token tensors")

    class Pipeline(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, *tensors):
            return self.model(dict(zip(names, tensors)))["sentence_embedding"]

    axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"sentence_embedding": {0: "batch"}}
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript tracer's warnings
        out = Path(tmp) / "model.onnx"
        torch.onnx.export(Pipeline(st.to("cpu").eval()), tuple(feats[n] for n in names), str(out), dynamo=False,
                          input_names=names, output_names=["sentence_embedding"], dynamic_axes=axes,
                          opset_version=17, do_constant_folding=True)
        st.tokenizer.save_pretrained(str(folder / "tokenizer"))
        write_verified(folder / "model.onnx", out.read_bytes())
    write_verified(folder / "inputs.json", json.dumps(names).encode())


class OnnxSentenceEncoder:
    """Run a verified export (``folder``) with ONNX Runtime (CPU, fp32) at token cap ``max_seq_length``.
    Raises FileNotFoundError if the export is missing or fails its checksum."""

    def __init__(self, folder: str | os.PathLike, max_seq_length: int) -> None:
        from transformers import AutoTokenizer

        self.folder = Path(folder)
        self.max_seq_length = int(max_seq_length)
        graph, names = read_verified(self.folder / "model.onnx"), read_verified(self.folder / "inputs.json")
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

    def encode(self, texts: Sequence[str], batch_size: int = 64, num_threads: int = 1) -> np.ndarray:
        """Embed ``texts`` → float32 (n, d) in input order, in batches of length-sorted texts tokenized as the
        pipeline does (padding to the longest, truncation at ``max_seq_length``)."""
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be ≥ 1")
        texts = list(texts)
        sess = self.session(num_threads)
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.zeros((0, 0), np.float32)
        for start in range(0, len(texts), batch_size):
            idx = order[start:start + batch_size]
            enc = self.tokenizer([texts[i] for i in idx], padding=True, truncation="longest_first",
                                 max_length=self.max_seq_length, return_tensors="np")
            emb = sess.run(["sentence_embedding"], {n: np.ascontiguousarray(enc[n], dtype=np.int64)
                                                    for n in self.input_names})[0]
            if not start:
                out = np.empty((len(texts), emb.shape[1]), dtype=np.float32)
            out[idx] = emb
        return out


def probe_texts(n_posts: int = 64) -> list[str]:
    """Verification texts: edge cases (one letter, a text over any token cap, accents / CJK / emoji, punctuation,
    a pangram), then ``n_posts`` bundled blog posts. Deterministic."""
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
    """Compare ONNX and torch embeddings (n, d) of the same probe texts: with the first ``n_records`` rows as records
    and the rest as a bank, top-k routes (Eq. 1) must be identical and every coordinate within ``max_abs``. Returns
    ``passed``, ``max_abs_diff``, ``min_cosine``, ``routes_identical`` (fraction), ``n_texts``, ``top_k``,
    ``tolerance``. Raises ValueError if the shapes differ or rows are too few."""
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


def _verify(st, folder: Path) -> dict:
    """``verify_against_torch`` of the export in ``folder`` on ``probe_texts``, plus ``batch_invariance``."""
    probe = probe_texts()
    enc = OnnxSentenceEncoder(folder, int(st.max_seq_length))
    ref = _normalize(st.encode(probe, batch_size=32, convert_to_numpy=True, normalize_embeddings=True,
                               show_progress_bar=False))
    got = _normalize(enc.encode(probe, batch_size=32, num_threads=1))
    verdict = verify_against_torch(got, ref)
    verdict["batch_invariance"] = float(np.max(np.abs(got[:21] - _normalize(enc.encode(probe[:21], 7, 1)))))
    verdict["passed"] = bool(verdict["passed"] and verdict["batch_invariance"] <= PROBE_MAX_ABS)
    verdict["max_seq_length"] = int(st.max_seq_length)
    return verdict


def load_verified_backend(model_path: str, max_seq_length: int | None,
                          load_torch) -> tuple[OnnxSentenceEncoder | None, dict]:
    """``(encoder or None, info)``: the ONNX encoder for ``model_path`` if its (cached or fresh) export verifies;
    ``info`` holds ``export_key``, ``verification`` or ``reason``. ``load_torch()`` returns the torch model."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return None, {"reason": "onnxruntime is not installed (pip install onnxruntime)"}
    if not os.path.isdir(model_path):
        return None, {"reason": f"{model_path!r} is not a local folder"}
    folder = cache_dir() / "onnx" / export_key(model_path)
    info: dict = {"export_key": folder.name}
    verdict_path = folder / f"verify-maxlen={max_seq_length}.json"
    raw = read_verified(verdict_path)
    verdict = json.loads(raw) if raw is not None else None
    try:
        st = None
        if read_verified(folder / "model.onnx") is None or read_verified(folder / "inputs.json") is None:
            st = load_torch()
            _export(st, folder)
            verdict = None
        if verdict is None:
            verdict = _verify(st or load_torch(), folder)
            write_verified(verdict_path, json.dumps(verdict, sort_keys=True).encode())
        info["verification"] = verdict
        if not verdict["passed"]:
            return None, {**info, "reason": f"ONNX export did not verify against torch: {verdict}"}
        return OnnxSentenceEncoder(folder, verdict["max_seq_length"]), info
    except Exception as exc:  # any export/runtime failure means: fall back to torch, and say why
        return None, {**info, "reason": f"ONNX export/verification failed: {type(exc).__name__}: {exc}"}
