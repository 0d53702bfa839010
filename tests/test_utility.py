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


def test_mauve_of_a_set_with_duplicates_against_itself_is_exactly_one():
    """Copies of a row share one k-means label (mauve itself could split them: MAUVE(P, P) = 0.75)."""
    z = np.random.default_rng(0).normal(size=(40, 16)).astype(np.float32)
    p = np.repeat(z, 5, axis=0)  # 200 rows, 40 distinct
    res = mauve_score(p, p, seeds=(0, 1, 2, 3))
    assert res.scores == pytest.approx((1.0,) * 4, abs=1e-12) and res.num_buckets == 20


def test_mauve_matches_the_mauve_package_on_distinct_rows():
    import mauve

    rng = np.random.default_rng(1)
    p, q = rng.normal(size=(300, 16)).astype(np.float32), rng.normal(size=(300, 16)).astype(np.float32) + 0.3
    ours = mauve_score(p, q, seeds=(0, 1), kmeans_num_redo=5, kmeans_max_iter=500).scores
    ref = [mauve.compute_mauve(p_features=p, q_features=q, seed=s, verbose=False).mauve for s in (0, 1)]
    assert ours == pytest.approx(ref, abs=1e-9)


def test_mauve_refuses_degenerate_inputs():
    x = np.random.default_rng(2).normal(size=(2, 8)).astype(np.float32)
    with pytest.raises(ValueError, match="too few distinct points: P ∪ Q has 2 distinct rows for num_buckets=2"):
        mauve_score(x, x)  # the 2-point set (was 0.75)
    with pytest.raises(ValueError, match="zero-variance"):
        mauve_score(np.ones((20, 8), np.float32), np.ones((20, 8), np.float32))  # all-identical rows
    scaled = np.outer(np.arange(1, 31), np.ones(8)).astype(np.float32)  # distinct rows, one direction
    with pytest.raises(ValueError, match="zero-variance"):
        mauve_score(scaled, scaled)
    three = np.repeat(np.random.default_rng(3).normal(size=(3, 8)).astype(np.float32), 10, axis=0)
    with pytest.raises(ValueError, match="3 distinct rows for num_buckets=3 .*need ≥ 6"):
        mauve_score(three, three)


def _twelve_points(seed: int = 0):
    """The issue-32 case: P = 500 rows drawn from 12 distinct points, Q = 500 noisy copies of those 12."""
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(12, 64)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    p = c[rng.integers(12, size=500)]
    q = c[rng.integers(12, size=500)] + 0.1 * rng.normal(size=(500, 64)).astype(np.float32)
    control = c[rng.integers(12, size=500)] + 0.1 * rng.normal(size=(500, 64)).astype(np.float32)
    return p, q, control


def test_mauve_caps_auto_buckets_at_each_sides_distinct_points():
    """Default buckets (50) on a 12-point P gave 0.042 here (issue: 0.168), the 12-bucket value is 0.955."""
    p, q, control = _twelve_points()
    res = mauve_score(p, q)
    assert res.mean > 0.9  # near the 12-bucket value, as the control of 500 distinct noisy copies gives
    assert (res.distinct_p, res.distinct_q) == (12, 500)
    assert res.num_buckets == 12 and res.num_buckets_requested == "auto"
    assert res.mean == pytest.approx(mauve_score(p, q, num_buckets=12).mean, abs=1e-12)
    assert mauve_score(control, q).mean > 0.9 and mauve_score(control, q).num_buckets == 50
    row = res.as_dict()
    assert (row["num_buckets"], row["num_buckets_requested"], row["distinct_p"]) == (12, "auto", 12)


def test_mauve_warns_when_asked_for_more_buckets_than_a_side_has_points():
    p, q, _ = _twelve_points()
    with pytest.warns(UserWarning, match=r"num_buckets=50 but p_features has only 12 distinct rows.*num_buckets='auto'"):
        res = mauve_score(p, q, num_buckets=50, seeds=(0,))
    assert res.num_buckets == 50 and res.num_buckets_requested == 50 and res.distinct_p == 12
