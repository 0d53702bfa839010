"""MAUVE on the kit's embeddings (pe_kit.report.mauve; Pillutla et al. 2021, paper Fig. 2)."""
from __future__ import annotations

import numpy as np
import pytest

from pe_kit.report.mauve import MauveResult, mauve_score


def test_mauve_of_a_set_against_itself_is_one(tiny_world):
    aux = tiny_world.records["aux"]["emb"]  # 320 real Blogs records
    res = mauve_score(aux, aux, seeds=(0, 1, 2))
    assert isinstance(res, MauveResult)
    assert res.mean == pytest.approx(1.0, abs=1e-6)
    assert res.sd < 1e-6
    assert (res.n_p, res.n_q, res.num_buckets) == (320, 320, 32)
    assert len(res.scores) == 3 and res.seeds == (0, 1, 2)


def test_mauve_drops_for_a_shifted_set_and_for_synthetic_text(tiny_world):
    aux = tiny_world.records["aux"]["emb"]
    cal = tiny_world.records["calibration"]["emb"]
    u = np.random.default_rng(0).normal(size=aux.shape[1]).astype(np.float32)
    u /= np.linalg.norm(u)
    same = mauve_score(aux, cal, seeds=(0, 1, 2))  # two disjoint user splits: same distribution
    shifted = mauve_score(aux, aux + 0.5 * u, seeds=(0, 1, 2))
    synthetic = mauve_score(tiny_world.bank[:320], cal, seeds=(0, 1, 2))  # label-only SmolLM2 bank vs real posts
    assert same.mean > 0.7
    assert shifted.mean < 0.4
    assert synthetic.mean < 0.4
    assert same.mean - shifted.mean > 0.4 and same.mean - synthetic.mean > 0.4


def test_mauve_subsample_is_seeded_and_sized(tiny_world):
    aux = tiny_world.records["aux"]["emb"]
    cal = tiny_world.records["calibration"]["emb"]
    a = mauve_score(aux, cal, seeds=(0,), max_samples=100, rng=np.random.default_rng(5))
    b = mauve_score(aux, cal, seeds=(0,), max_samples=100, rng=np.random.default_rng(5))
    assert (a.n_p, a.n_q, a.num_buckets) == (100, 100, 10)
    assert a.scores == b.scores
    assert a.sd == 0.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"p_features": np.zeros((5, 4)), "q_features": np.zeros((5, 3))}, "same encoder"),
        ({"p_features": np.zeros(5), "q_features": np.zeros((5, 3))}, "p_features"),
        ({"p_features": np.full((5, 3), np.nan), "q_features": np.zeros((5, 3))}, "NaN"),
        ({"p_features": np.ones((5, 3)), "q_features": np.ones((5, 3)), "seeds": ()}, "seeds"),
        ({"p_features": np.ones((50, 3)), "q_features": np.ones((5, 3)), "max_samples": 10}, "rng"),
        ({"p_features": np.ones((5, 3)), "q_features": np.ones((5, 3)), "num_buckets": 1}, "num_buckets"),
    ],
)
def test_mauve_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mauve_score(**kwargs)
