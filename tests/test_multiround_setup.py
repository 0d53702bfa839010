"""Notebook 06's set-up as one call (steps.multiround_setup): k̃ = ⌈retain_fraction · p⌉ candidates kept,
r probes, g = p − r − k̃ new texts per round (Alg. A.1), and a retrieval pool of at most 3 · T · g texts."""
from __future__ import annotations

from pathlib import Path

import pytest

from steps.multiround_setup import multiround_setup

TINY = str(Path(__file__).parent / "data" / "blogs-tiny.jsonl.gz")
PARAMS = dict(data=TINY, fmt="blogs", arm="long", bank="bankA", model="all-MiniLM-L6-v2", max_seq_length=32,
              record_cap=16, n_canary=5, n_aux=15, n_calibration=20, n_test=20, bank_size=256, max_probes=16,
              seed=0, variant="nonce", generator="public-retrieval", rounds=3, retain_fraction=0.05, max_attempts=5,
              public_max_texts=None, top_k=5, clip_norm=0.1, noise_multiplier=1.1088, sample_rate=0.1)


def test_setup_sizes_follow_alg_a1():
    s = multiround_setup(PARAMS)
    assert s.n_probes == 16 and s.retained == round(0.05 * 256) == 13 and s.new_per_round == 256 - 16 - 13
    assert s.mechanism.noise_multiplier == 1.1088 and s.mechanism.top_k == 5 and s.pe.rounds == 3
    assert s.report.endswith(f"| r=16 probes, k̃=13, g=227 | generator: {s.generator.name}")
    assert len(s.world.bank_texts) == 256 and s.world.bank.shape[0] == 256


def test_setup_refuses_an_unknown_generator_before_building_anything():
    with pytest.raises(ValueError, match="generator='gpt' is unknown; use one of public-retrieval, wordnet"):
        multiround_setup({**PARAMS, "generator": "gpt"})
