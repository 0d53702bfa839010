"""Encoder: offline default model, L2-normalized float32, per-text verified cache, ONNX backend verified."""
import importlib.util
import uuid

import numpy as np
import pytest

from pe_kit.cache import EmbeddingStore, cache_dir, text_key
from pe_kit.text.encoder import Encoder, embedding_store_key
from pe_kit.text.onnx_encoder import verify_against_torch


def test_encode_normalized_and_cached():
    enc = Encoder(max_seq_length=32, progress=False)
    texts = ["the cat sat on the mat", "a completely different sentence about tax law", "the cat sat on a mat"]
    x = enc.encode(texts)
    assert x.dtype == np.float32 and x.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert x[0] @ x[2] > x[0] @ x[1]  # semantic neighbours are closer
    files = sorted((cache_dir() / "embeddings" / enc.store_key).glob("*.npy"))
    assert files
    again = Encoder(max_seq_length=32, progress=False)
    np.testing.assert_array_equal(again.encode(texts), x)
    assert again.last_stats["encoded"] == 0 and again.last_stats["cached"] == 3


def test_each_text_encoded_once_whatever_the_chunking():
    enc = Encoder(max_seq_length=32, progress=False)
    tag = uuid.uuid4().hex  # texts no earlier run put in a shared PE_KIT_CACHE
    a = [f"per-text cache sentence number {i} {tag}" for i in range(6)]
    x = enc.encode(a + a[::-1] + a[:2])  # repeats inside one call
    assert enc.last_stats == {**enc.last_stats, "texts": 14, "unique": 6, "encoded": 6}
    np.testing.assert_array_equal(x[6:12], x[:6][::-1])
    y = enc.encode(a[3:] + [f"a brand new sentence {tag}", a[0]])  # differently aligned, one new text
    assert enc.last_stats["encoded"] == 1 and enc.last_stats["cached"] == 4
    np.testing.assert_array_equal(y[:3], x[3:6])
    assert max(enc.encoded_counts.values()) == 1  # no text encoded twice


def test_corrupt_cache_is_recomputed_not_trusted():
    enc = Encoder(max_seq_length=32, progress=False)
    texts = [f"a sentence for the corruption test {uuid.uuid4().hex}"]
    x = enc.encode(texts)
    newest = max((cache_dir() / "embeddings").rglob("*.npy"), key=lambda p: p.stat().st_mtime)
    newest.write_bytes(newest.read_bytes()[:-8] + b"garbage!")
    fresh = Encoder(max_seq_length=32, progress=False)
    np.testing.assert_allclose(fresh.encode(texts), x, atol=1e-6)
    assert fresh.last_stats["encoded"] == 1


def test_store_merges_small_segments_and_keeps_rows(tmp_path):
    store = EmbeddingStore(tmp_path / "s")
    rng = np.random.default_rng(0)
    rows = {}
    for i in range(20):
        keys = [text_key(f"t{i}-{j}") for j in range(3)]
        emb = rng.normal(size=(3, 4)).astype(np.float32)
        store.put(keys, emb)
        rows.update(zip(keys, emb))
    assert len(list((tmp_path / "s").glob("*.keys"))) <= 17  # merged once past 16 small segments
    got = EmbeddingStore(tmp_path / "s").get(rows)  # a fresh reader (another process) sees every row
    assert set(got) == set(rows) and all(np.array_equal(got[k], rows[k]) for k in rows)
    with pytest.raises(ValueError, match="keys"):
        store.put([b"short"], np.zeros((1, 4), np.float32))


def test_cache_key_depends_on_model_settings_and_backend():
    assert Encoder(max_seq_length=32).model_id != Encoder(max_seq_length=64).model_id
    assert embedding_store_key("m", 32, "torch") != embedding_store_key("m", 32, "onnx-fp32/abc")
    assert embedding_store_key("m", 32, "torch") != embedding_store_key("m", 64, "torch")
    with pytest.raises(ValueError, match="backend"):
        Encoder(backend="int8")


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime not installed")
def test_onnx_backend_is_default_verified_and_matches_torch():
    texts = ["the cat sat on the mat", "privacy audits of private evolution", "word " * 200]
    onnx = Encoder(max_seq_length=32, progress=False)
    torch_enc = Encoder(max_seq_length=32, progress=False, backend="torch", use_cache=False)
    assert onnx.backend_id.startswith("onnx-fp32/")
    ver = onnx.backend_info["verification"]
    assert ver["passed"] and ver["routes_identical"] == 1.0 and ver["max_abs_diff"] < 1e-4
    assert ver["max_seq_length"] == 32
    np.testing.assert_allclose(onnx.encode(texts), torch_enc.encode(texts), atol=1e-5)
    assert onnx.store_key != Encoder(max_seq_length=32, backend="torch").store_key


def test_verification_rejects_changed_routes():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(40, 8)).astype(np.float32)
    assert verify_against_torch(a, a.copy(), n_records=8)["passed"]
    b = a.copy()
    b[:8] = rng.normal(size=(8, 8))
    res = verify_against_torch(a, b, n_records=8)
    assert not res["passed"] and res["routes_identical"] < 1.0


def test_empty_text_rejected():
    with pytest.raises(ValueError, match=r"texts\[1\]"):
        Encoder(progress=False).encode(["ok", "  "])


def test_encoder_pickles_settings_only():
    import pickle

    enc = Encoder(max_seq_length=32, progress=False)
    x = enc.encode(["a sentence to pickle around"])
    clone = pickle.loads(pickle.dumps(enc))
    assert clone._st is None and clone._onnx is None and clone.max_seq_length == 32
    np.testing.assert_array_equal(clone.encode(["a sentence to pickle around"]), x)


def test_auto_backend_uses_cuda_when_present_and_rows_record_the_device(monkeypatch):
    """Issue 32 item 4: device=None means "cuda when present", so backend="auto" must take torch on CUDA (ONNX runs
    on the CPU only) and every result row must say which device encoded."""
    import torch

    import pe_kit.text.encoder as encoder_mod
    from pe_kit.report.results import tidy

    monkeypatch.setattr(encoder_mod, "_RESOLVED", {}, raising=False)
    import pe_kit.text.onnx_encoder as onnx_mod

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    # the ONNX export verifies, as it would on a GPU machine (here loading the torch model on "cuda" would fail)
    monkeypatch.setattr(onnx_mod, "load_verified_backend", lambda *a, **k: (object(), {"export_key": "verified"}))
    enc = Encoder(max_seq_length=32, progress=False)  # backend="auto", device=None
    assert enc.backend_id == "torch"
    assert enc.backend_info["device"] == "cuda" and "cuda" in enc.backend_info["reason"]
    row = tidy([{"value": 1.0}], "04_audit", "table2", {"preset": "tiny", "seed": 0})[0]
    assert (row["encoder_device"], row["encoder_backend"]) == ("cuda", "torch")
    assert tidy([{"value": 1.0, "encoder_device": "mine"}], "04_audit")[0]["encoder_device"] == "mine"  # rows win


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime not installed")
def test_auto_backend_on_a_cpu_machine_is_onnx_on_cpu(monkeypatch):
    import torch

    import pe_kit.text.encoder as encoder_mod
    from pe_kit.report.results import tidy

    monkeypatch.setattr(encoder_mod, "_RESOLVED", {}, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert tidy([{"value": 1.0}], "04_audit")[0]["encoder_device"] is None  # no encoder ran: nothing claimed
    enc = Encoder(max_seq_length=32, progress=False)
    assert enc.backend_id.startswith("onnx-fp32/") and enc.backend_info["device"] == "cpu"
    row = tidy([{"value": 1.0}], "04_audit")[0]
    assert (row["encoder_device"], row["encoder_backend"]) == ("cpu", "onnx-fp32")
    with pytest.raises(ValueError, match=r"device='cuda' but CUDA is not available.*device=None"):
        Encoder(device="cuda", backend="torch", progress=False).encode(["a text"])


def test_encoder_core_path_loads_neither_onnx_export_nor_model_assembly():
    """Resolving and fingerprinting the default model imports no ONNX code and no MPNet reassembly; they load
    only when the ONNX backend or MPNet is used."""
    import subprocess
    import sys

    code = ("import sys, pe_kit.text.encoder as e; e.resolve_model_path('all-MiniLM-L6-v2'); "
            "assert e.model_fingerprint('all-MiniLM-L6-v2').startswith('sha256:'); "
            "print(sorted(m for m in ('pe_kit.text.models', 'pe_kit.text.onnx_encoder', 'onnxruntime', 'torch') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
