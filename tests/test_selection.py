"""Greedy forward selection (Alg. B.1, Eq. 6): brute-force references, ties, objectives, Σ̂_Q (Eqs. 31–35)."""
import numpy as np
import pytest

from pe_kit.attack.selection import (
    base_neighbors,
    greedy_select,
    pool_covariance,
    pool_routes,
    probe_votes,
)
from pe_kit.settings import MechanismConfig
from pe_kit.pe.mechanism import (
    build_neighbor_index,
    contributions,
    squared_distances,
    topk_routes,
)
from tests.oracles import greedy_plain, objective_value

FAR = 1e3  # a removed bank position is parked far away in the materialized reference bank


def _unit(x):
    x = np.asarray(x, np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _instance(seed, m=6, n_pool=8, r=3, k=3, p=40, d=8, spread=0.5):
    """Random unit embeddings where pool entries sit near canary records, so probes compete for votes."""
    rng = np.random.default_rng(seed)
    bank = _unit(rng.normal(size=(p, d)))
    rec = _unit(rng.normal(size=(m, d)))
    pool = _unit(rec[rng.integers(0, m, n_pool)] + spread * rng.normal(size=(n_pool, d)))
    pos = rng.choice(p, r, replace=False).astype(np.int64)
    a = rng.normal(size=(n_pool, n_pool))
    sigma = a @ a.T / n_pool + 0.3 * np.eye(n_pool)
    return bank, rec, pool, pos, sigma, k


def _parts(bank, rec, pool, pos, k):
    bi, bd = base_neighbors(build_neighbor_index(rec, bank, k + pos.size), pos, k)
    return squared_distances(rec, pool), bd, bi


def _brute_force(bank, rec, pool, pos, sigma, k, objective):
    """Literal Alg. B.1 on a materialized bank: every trial set rebuilds S(T) and re-routes from scratch
    with ``topk_routes``; J by explicit matrix inverse; exact ties → lowest pool index (strict >)."""
    m = rec.shape[0]
    order = []
    for t in range(pos.size):
        best = None
        for j in range(pool.shape[0]):
            if j in order:
                continue
            trial = order + [j]
            s = bank.copy()
            s[pos] = FAR  # reserved positions not yet filled are out of reach
            s[pos[:len(trial)]] = pool[trial]
            routes = topk_routes(rec, s, k)
            w = np.array([(routes == pos[i]).sum() for i in range(len(trial))]) / (m * k)
            score = w @ w if objective == "norm" else w @ np.linalg.inv(sigma[np.ix_(trial, trial)]) @ w
            if best is None or score > best[0] * (1 + 1e-9) + 1e-15:
                best = (score, j)
        order.append(best[1])
    return np.array(order)


@pytest.mark.parametrize("objective", ["norm", "mu_eff"])
@pytest.mark.parametrize("seed", range(6))
def test_greedy_equals_brute_force(objective, seed):
    bank, rec, pool, pos, sigma, k = _instance(seed)
    pd, bd, bi = _parts(bank, rec, pool, pos, k)
    ref = _brute_force(bank, rec, pool, pos, sigma, k, objective)
    sel = greedy_select(pd, bd, bi, pos, objective, sigma)
    np.testing.assert_array_equal(sel.order, ref)
    np.testing.assert_array_equal(greedy_plain(pd, bd, bi, pos, objective, sigma)[0], ref)
    # the reported final counts are the votes of the frozen bank
    s = bank.copy()
    s[pos] = pool[sel.order]
    routes = topk_routes(rec, s, k)
    np.testing.assert_array_equal(sel.counts, [(routes == q).sum() for q in pos])
    want = objective_value(sel.counts, rec.shape[0], k, objective, sigma[np.ix_(sel.order, sel.order)])
    assert sel.scores[-1] == pytest.approx(want, rel=1e-12)


def _orthogonal_instance(pool_rows):
    """Records e_0..e_5 in R^8; every base entry sits near one record (distance² ≈ 0.21) and far from the
    others; pool rows are given as signed record indices (+i → e_i, −i−1 → −e_i)."""
    rng = np.random.default_rng(0)
    eye = np.eye(8, dtype=np.float32)
    rec = eye[:6]
    bank = _unit(eye[np.arange(40) % 6] + 0.5 * eye[6] + 0.01 * rng.normal(size=(40, 8)))
    pool = np.stack([eye[i] if i >= 0 else -eye[-i - 1] for i in pool_rows]).astype(np.float32)
    pos = rng.choice(40, 3, replace=False).astype(np.int64)
    return bank, rec, pool, pos


def test_ties_resolve_to_lowest_pool_index():
    # candidates 2 and 6 are both exactly record 0 (one top-1 vote each); the rest are antipodes (no votes)
    bank, rec, pool, pos = _orthogonal_instance([-1, -2, 0, -4, -5, -6, 0, -3])
    pd, bd, bi = _parts(bank, rec, pool, pos, 3)
    sigma = 0.5 * np.eye(8)
    for objective in ("norm", "mu_eff"):
        ref = _brute_force(bank, rec, pool, pos, sigma, 3, objective)
        sel = greedy_select(pd, bd, bi, pos, objective, sigma)
        order, _, ties = greedy_plain(pd, bd, bi, pos, objective, sigma)
        for o, t in ((sel.order, sel.ties), (order, ties)):
            assert o[0] == 2 and t[0] == 2  # exact tie between 2 and 6 → lowest index
            np.testing.assert_array_equal(o, [2, 6, 0])  # then 6 (second vote), then an all-way tie
            np.testing.assert_array_equal(o, ref)
        np.testing.assert_array_equal(sel.counts, [1, 1, 0])
    # every candidate is an antipode: every round is an all-way tie → 0, 1, 2
    bank, rec, pool, pos = _orthogonal_instance([-1, -2, -3, -4, -5, -6, -1, -2])
    pd, bd, bi = _parts(bank, rec, pool, pos, 3)
    for objective in ("norm", "mu_eff"):
        sel = greedy_select(pd, bd, bi, pos, objective, 0.5 * np.eye(8))
        np.testing.assert_array_equal(sel.order, [0, 1, 2])
        np.testing.assert_array_equal(sel.ties, [8, 7, 6])
        assert (sel.counts == 0).all() and (sel.scores == 0).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_incremental_equals_plain_recomputation(seed):
    """Vectorized merge + bordered inverse selects the same sequence as literal re-routing + Cholesky."""
    bank, rec, pool, pos, sigma, k = _instance(seed, m=16, n_pool=60, r=20, k=5, p=300, d=16, spread=0.35)
    pd, bd, bi = _parts(bank, rec, pool, pos, k)
    for objective in ("norm", "mu_eff"):
        a = greedy_select(pd, bd, bi, pos, objective, sigma)
        order, scores, ties = greedy_plain(pd, bd, bi, pos, objective, sigma)
        np.testing.assert_array_equal(a.order, order)
        np.testing.assert_allclose(a.scores, scores, rtol=1e-10)
        np.testing.assert_array_equal(a.ties, ties)
        np.testing.assert_array_equal(a.counts, probe_votes(pd, bd, bi, pos, order))
        assert a.counts.sum() > 0


def test_isotropic_sigma_gives_norm_sequence_on_real_nonce(tiny_world):
    """App. B: with Σ̂ ∝ I, nonce-norm and nonce-μ_eff select the same sequence, ties included."""
    from pe_kit.attack.variants import nonce_canary_and_pool, replacement_positions

    rng = np.random.default_rng(1)
    canary, pool = nonce_canary_and_pool(16, 128, rng)
    pos = replacement_positions(tiny_world.bank.shape[0], 32, rng)
    emb = tiny_world.encoder.encode(canary + pool)
    pd, bd, bi = _parts(tiny_world.bank, emb[:16], emb[16:], pos, 5)
    norm = greedy_select(pd, bd, bi, pos, "norm")
    for scale in (0.01, 0.37):
        mu = greedy_select(pd, bd, bi, pos, "mu_eff", scale * np.eye(128))
        np.testing.assert_array_equal(norm.order, mu.order)
        np.testing.assert_allclose(mu.scores * scale, norm.scores, rtol=1e-12)
    assert norm.ties[0] > 1 and norm.order[0] == 0  # many nonce probes tie in round 1: lowest index wins
    assert norm.counts.sum() == 16 * 5  # every nonce-canary vote lands on a probe


def test_mu_eff_avoids_background_probe_norm_takes_it():
    """Candidate 0 attracts the most canary votes but also many aux-user votes: norm takes it, μ_eff avoids it."""
    rng = np.random.default_rng(7)
    d, p, k = 12, 200, 2
    bank = _unit(rng.normal(size=(p, d)))
    rec = _unit(rng.normal(size=(8, d)))
    hub = _unit(rec[:4].mean(axis=0, keepdims=True))  # close to records 0..3
    pool = np.concatenate([hub, _unit(rec[[0, 1, 2, 4, 5, 6]] + 0.05 * rng.normal(size=(6, d)))])
    # background: aux users whose records sit right on the hub candidate
    aux = _unit(hub + 0.02 * rng.normal(size=(40, d)))
    owner = np.repeat(np.arange(10), 4)
    pos = rng.choice(p, 3, replace=False).astype(np.int64)
    mech = MechanismConfig(top_k=k, clip_norm=0.1, noise_multiplier=1.0, sample_rate=0.1, record_cap=4)
    aux_index = build_neighbor_index(aux, bank, k + pos.size)
    sigma = pool_covariance(aux_index, aux, owner, 10, pool, pos, mech, n_users=1000)
    assert sigma[0, 0] > 20 * sigma[1, 1]  # the hub coordinate carries background traffic
    pd, bd, bi = _parts(bank, rec, pool, pos, k)
    norm = greedy_select(pd, bd, bi, pos, "norm")
    mu = greedy_select(pd, bd, bi, pos, "mu_eff", sigma)
    assert norm.order[0] == 0
    assert 0 not in mu.order
    np.testing.assert_array_equal(mu.order, greedy_plain(pd, bd, bi, pos, "mu_eff", sigma)[0])


def test_pool_covariance_matches_materialized_reference():
    """Σ̂_Q = q(1−q)N·shrink(M̂_Q) + (σC)²I + ridge with aux users routed to S_base ∪ Q (Eqs. 31–35)."""
    bank, rec, pool, pos, _, k = _instance(11, m=6, n_pool=10, r=4, k=3, p=60, d=6)
    rng = np.random.default_rng(3)
    aux = _unit(np.concatenate([pool[rng.integers(0, 10, 30)] + 0.3 * rng.normal(size=(30, 6)),
                                rng.normal(size=(20, 6))]))
    owner = np.sort(rng.integers(0, 12, size=50))
    owner[:12] = np.arange(12)
    owner = np.sort(owner)
    mech = MechanismConfig(top_k=k, clip_norm=0.1, noise_multiplier=1.3, sample_rate=0.2, record_cap=16)
    idx = build_neighbor_index(aux, bank, k + pos.size)
    got = pool_covariance(idx, aux, owner, 12, pool, pos, mech, n_users=77, shrinkage=0.1, ridge=1e-9)
    # reference: materialize S_base ∪ Q as one bank (removed positions far away) and use topk_routes
    full = np.concatenate([bank, pool])
    full[pos] = FAR
    routes = topk_routes(aux, full, k)
    np.testing.assert_array_equal(routes, pool_routes(idx, aux, pool, pos, k))
    c = contributions(routes, owner, 12, full.shape[0], mech.clip_norm)[:, bank.shape[0]:].toarray()
    m2 = c.T @ c / 12
    shrunk = 0.9 * m2 + 0.1 * np.diag(np.diag(m2))
    want = 0.2 * 0.8 * 77 * shrunk + ((1.3 * 0.1) ** 2 + 1e-9) * np.eye(10)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert np.abs(want - np.diag(np.diag(want))).max() > 0  # the reference really has background covariance


def test_probe_votes_matches_materialized_routing():
    bank, rec, pool, pos, _, k = _instance(5, m=6, n_pool=8, r=3)
    pd, bd, bi = _parts(bank, rec, pool, pos, k)
    sel = [4, 1, 7]
    s = bank.copy()
    s[pos] = pool[sel]
    routes = topk_routes(rec, s, k)
    np.testing.assert_array_equal(probe_votes(pd, bd, bi, pos, sel), [(routes == q).sum() for q in pos])
    np.testing.assert_array_equal(probe_votes(pd, bd, bi, pos, []), np.zeros(0))


def test_bad_inputs_raise_value_errors():
    bank, rec, pool, pos, sigma, k = _instance(0)
    pd, bd, bi = _parts(bank, rec, pool, pos, k)
    with pytest.raises(ValueError, match="objective"):
        greedy_select(pd, bd, bi, pos, "max")
    with pytest.raises(ValueError, match="sigma"):
        greedy_select(pd, bd, bi, pos, "mu_eff")
    with pytest.raises(ValueError, match="r=9"):
        greedy_select(pd, bd, bi, np.arange(9) + 100, "norm")
    with pytest.raises(ValueError, match="sorted"):
        greedy_select(pd, bd[:, ::-1], bi[:, ::-1], pos, "norm")
    with pytest.raises(ValueError, match="reserved position"):
        greedy_select(pd, bd, bi, np.r_[bi[0, 0], pos[1:]], "norm")
    with pytest.raises(ValueError, match="distinct"):
        greedy_select(pd, bd, bi, np.r_[pos[0], pos[0]], "norm")
    with pytest.raises(ValueError, match="depth"):
        base_neighbors(build_neighbor_index(rec, bank, k), pos, k)
    with pytest.raises(ValueError, match="symmetric"):
        greedy_select(pd, bd, bi, pos, "mu_eff", sigma + np.triu(np.ones_like(sigma), 1))
    with pytest.raises(ValueError, match="n_aux_users"):
        pool_covariance(build_neighbor_index(rec, bank, k + 3), rec, np.zeros(6, int), 0, pool, pos,
                        MechanismConfig(top_k=k), 10)
