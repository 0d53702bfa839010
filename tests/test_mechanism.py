"""Top-k routing, vote normalization, clipping and the Gaussian release (Eq. 1, Alg. A.1)."""
import numpy as np
import pytest

from pe_kit.settings import MechanismConfig
from pe_kit.pe.mechanism import (
    build_neighbor_index,
    contributions,
    release,
    routes_with_probes,
    squared_distances,
    topk_routes,
)


def _unit(rng, n, d=16):
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_topk_matches_brute_force_and_breaks_ties_low(rng):
    bank = _unit(rng, 50)
    bank[[10, 30, 40]] = bank[5]  # exact duplicates of entry 5
    records = np.vstack([bank[5], _unit(rng, 20)])
    got = topk_routes(records, bank, 5, chunk_size=7)
    # reference: one dot product per (record, entry) pair, so identical entries get identical distances
    # on every BLAS (a matrix product may round duplicates differently at different column positions)
    r64, b64 = records.astype(np.float64), bank.astype(np.float64)
    d = np.array([[float(np.dot(r - b, r - b)) for b in b64] for r in r64])
    ref = np.array([sorted(range(50), key=lambda j: (d[i, j], j))[:5] for i in range(len(records))])
    np.testing.assert_array_equal(got, ref)
    assert list(got[0, :4]) == [5, 10, 30, 40]  # zero-distance ties in index order


def test_duplicate_bank_rows_get_identical_distances(rng):
    """Exact duplicates of a bank row get bit-identical distances whatever their column position."""
    bank = _unit(rng, 300, d=384)
    dup = [3, 17, 64, 65, 128, 255, 299]
    bank[dup] = bank[100]
    records = _unit(rng, 37, d=384)
    d = squared_distances(records, bank)
    for j in dup:
        np.testing.assert_array_equal(d[:, j], d[:, 100])
    # and the other columns are the plain formula's values
    ref = squared_distances(records, np.delete(bank, dup, axis=0))
    np.testing.assert_allclose(np.delete(d, dup, axis=1), ref, rtol=0, atol=1e-6)


def test_routes_with_probes_equals_full_recompute(rng):
    bank, records, probes = _unit(rng, 200), _unit(rng, 40), _unit(rng, 6)
    probes[0] = records[3]  # an exact copy takes the record's top-1 vote
    pos = np.array([7, 150, 3, 99, 42, 0])
    index = build_neighbor_index(records, bank, depth=5 + 6)
    got = routes_with_probes(index, records, probes, pos, 5)
    full = bank.copy()
    full[pos] = probes
    np.testing.assert_array_equal(got, topk_routes(records, full, 5))
    assert got[3, 0] == 7
    with pytest.raises(ValueError, match="depth"):
        routes_with_probes(build_neighbor_index(records, bank, depth=5), records, probes, pos, 5)


def test_contributions_normalize_and_clip():
    routes = np.array([[0, 1], [0, 2], [3, 4], [3, 3]])
    owner = np.array([0, 0, 1, 1])
    c = contributions(routes, owner, 3, 6, clip_norm=10.0).toarray()
    np.testing.assert_allclose(c[0], [2 / 4, 1 / 4, 1 / 4, 0, 0, 0])  # h̄ = counts / (|D_u| k)
    np.testing.assert_allclose(c[1], [0, 0, 0, 3 / 4, 1 / 4, 0])
    assert not c[2].any()
    clipped = contributions(routes, owner, 3, 6, clip_norm=0.1).toarray()
    np.testing.assert_allclose(np.linalg.norm(clipped[:2], axis=1), [0.1, 0.1])
    np.testing.assert_allclose(clipped[0] / np.linalg.norm(clipped[0]), c[0] / np.linalg.norm(c[0]))


def test_release_noise_std_is_sigma_times_c(rng):
    """The noise of a release has std σ·C per coordinate (not σ, not σ/C)."""
    for sigma, clip in [(1.0, 0.1), (2.0, 0.5)]:
        cfg = MechanismConfig(noise_multiplier=sigma, clip_norm=clip, sample_rate=0.5)
        routes = np.arange(40).reshape(20, 2) % 8
        contribs = contributions(routes, np.arange(20) // 2, 10, 4096, clip)
        part = rng.random(10) < 0.5
        ys = np.array([release(contribs, cfg, rng, participation=part) for _ in range(20)])
        noise = ys - np.asarray(contribs[part].sum(axis=0)).ravel()
        assert noise.std() == pytest.approx(sigma * clip, rel=0.01)
        assert abs(noise.mean()) < 4 * sigma * clip / np.sqrt(noise.size)


def test_release_participation_rate(rng):
    cfg = MechanismConfig(noise_multiplier=0.0, sample_rate=0.3)
    contribs = contributions(np.zeros((2000, 1), dtype=int), np.arange(2000), 2000, 2, 1.0)
    totals = [release(contribs, cfg, rng)[0] for _ in range(50)]
    assert np.mean(totals) == pytest.approx(600, rel=0.03)


@pytest.mark.parametrize("field, kwargs", [("top_k", dict(top_k=0)), ("clip_norm", dict(clip_norm=0)),
                                           ("sample_rate", dict(sample_rate=1.5)),
                                           ("noise_multiplier", dict(noise_multiplier=-1))])
def test_config_errors_name_field(field, kwargs):
    with pytest.raises(ValueError, match=field):
        MechanismConfig(**kwargs)
