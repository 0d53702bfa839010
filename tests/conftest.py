"""Shared fixtures: a tiny real-data world (80 bloggers × 16 posts, bundled bank A subset).

Embeddings are cached under a per-session folder (PE_KIT_CACHE) unless the caller set one.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TESTS = Path(__file__).parent
TINY_DATA = TESTS / "data" / "blogs-tiny.jsonl.gz"
SHARED_DATA = TESTS.parent.parent / "shared" / "data"
sys.path.insert(0, str(TESTS.parent / "scripts"))  # the repository's tools (docs_results, before_after, …)
sys.path.insert(0, str(TESTS.parent / "notebooks"))  # the notebooks' own step modules (``from steps import …``)


@pytest.fixture(scope="session", autouse=True)
def _cache_dir(tmp_path_factory):
    if "PE_KIT_CACHE" not in os.environ:
        os.environ["PE_KIT_CACHE"] = str(tmp_path_factory.mktemp("pe_kit_cache"))
    yield


@pytest.fixture(scope="session")
def tiny_config():
    from pe_kit.study.world import StudyConfig

    return StudyConfig(data=str(TINY_DATA), arm="long", n_canary=5, n_aux=20, n_calibration=25, n_test=25,
                       bank="bankA", bank_size=1024, max_probes=64, max_seq_length=32, record_cap=16, seed=0)


@pytest.fixture(scope="session")
def tiny_world(tiny_config):
    """A real-data World: 5 canaries, 20 aux, 20 calibration, 30 test users; p = 1024; MiniLM-L6 at 32 tokens."""
    from pe_kit.study.world import build_world
    from pe_kit.text.encoder import Encoder

    return build_world(tiny_config, encoder=Encoder(max_seq_length=32, progress=False))


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
