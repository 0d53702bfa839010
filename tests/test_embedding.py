"""Encoder: offline default model, L2-normalized float32, verified content-keyed cache."""
import numpy as np

from pe_kit.cache import cache_dir
from pe_kit.text.encoder import Encoder


def test_encode_normalized_and_cached():
    enc = Encoder(max_seq_length=32, progress=False)
    texts = ["the cat sat on the mat", "a completely different sentence about tax law", "the cat sat on a mat"]
    x = enc.encode(texts)
    assert x.dtype == np.float32 and x.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert x[0] @ x[2] > x[0] @ x[1]  # semantic neighbours are closer
    files = sorted((cache_dir() / "embeddings").glob("*.npy"))
    assert files
    np.testing.assert_array_equal(enc.encode(texts), x)


def test_corrupt_cache_is_recomputed_not_trusted():
    enc = Encoder(max_seq_length=32, progress=False)
    texts = ["a sentence for the corruption test"]
    x = enc.encode(texts)
    newest = max((cache_dir() / "embeddings").glob("*.npy"), key=lambda p: p.stat().st_mtime)
    newest.write_bytes(newest.read_bytes()[:-8] + b"garbage!")
    np.testing.assert_allclose(Encoder(max_seq_length=32, progress=False).encode(texts), x, atol=1e-6)


def test_cache_key_depends_on_model_settings():
    assert Encoder(max_seq_length=32).model_id != Encoder(max_seq_length=64).model_id


def test_empty_text_rejected():
    import pytest

    with pytest.raises(ValueError, match=r"texts\[1\]"):
        Encoder(progress=False).encode(["ok", "  "])
