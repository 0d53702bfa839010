"""The eight attack variants (Table 1, App. B): canary slots, pools, exact copies, frozen designs, and a
real-data ε_lower table for all variants on the tiny Blogs world."""
import numpy as np
import pytest

from pe_kit.attack.variants import (
    NONCE_VARIANTS,
    REAL_VARIANTS,
    VARIANTS,
    design_exact,
    nonce_canary_and_pool,
    nonce_strings,
    spread_select,
    variant_objective,
)
from pe_kit.settings import AuditConfig, MechanismConfig
from pe_kit.pe.mechanism import build_neighbor_index, contributions, routes_with_probes
from pe_kit.study.world import audit_design, make_design
from pe_kit.text.generators.base import normalize_text
from pool_canaries import variant_slots

MECH = MechanismConfig(record_cap=16)
POOL, R = 128, 32  # CI-sized pool and probe budget (paper: 512, 64)


def test_variant_objectives():
    assert [variant_objective(v) for v in VARIANTS] == [None, None, None, "norm", "mu_eff", None, "norm", "mu_eff"]
    assert REAL_VARIANTS + NONCE_VARIANTS == VARIANTS
    with pytest.raises(ValueError, match="unknown"):
        variant_objective("paraphrase-mu")


def test_canary_slots_disjoint_and_wrapped():
    """scripts/pool_canaries.py's slots are the notebooks' (designs.canary_slots): disjoint blocks, else wrapped."""
    full = variant_slots(25)
    assert sorted(s for v in REAL_VARIANTS for s in full[v]) == list(range(25))  # five disjoint blocks of five
    assert full["exact"] == (5, 6, 7, 8, 9)
    small = variant_slots(7)
    for v in REAL_VARIANTS:
        assert len(set(small[v])) == 5 and max(small[v]) < 7  # distinct within a variant
    assert small["exact"] == (5, 6, 0, 1, 2)
    assert variant_slots(10, per_variant=1) == {v: (i,) for i, v in enumerate(REAL_VARIANTS)}  # the sweep canaries


def test_canaries_are_disjoint_from_other_splits(tiny_world):
    s = tiny_world.splits
    others = set(s.aux) | set(s.calibration) | set(s.test) | set(s.public)
    slots = variant_slots(len(s.canary))
    for v in REAL_VARIANTS:
        ids = [s.canary[i] for i in slots[v]]
        assert len(set(ids)) == 5 and not set(ids) & others
        assert all(len(tiny_world.corpus.by_id()[u].texts) == 16 for u in ids)  # m records each


def test_spread_select_covers_records_evenly():
    sources = np.arange(512) % 64
    chosen = spread_select(sources, 64, np.random.default_rng(0))
    assert len(set(chosen)) == 64 and sorted(sources[chosen]) == list(range(64))  # one per record
    sources16 = np.arange(128) % 16
    chosen = spread_select(sources16, 40, np.random.default_rng(1))
    per = np.bincount(sources16[chosen], minlength=16)
    assert len(set(chosen)) == 40 and per.min() == 2 and per.max() == 3  # ⌊40/16⌋ or ⌈40/16⌉
    # a record with a small share is exhausted, the others take the slack
    uneven = np.r_[np.zeros(2, int), np.ones(30, int)]
    chosen = spread_select(uneven, 10, np.random.default_rng(2))
    assert (uneven[chosen] == 0).sum() == 2 and len(set(chosen)) == 10
    np.testing.assert_array_equal(spread_select(sources, 64, np.random.default_rng(0)),
                                  spread_select(sources, 64, np.random.default_rng(0)))
    with pytest.raises(ValueError, match="r=513"):
        spread_select(sources, 513, np.random.default_rng(0))


def test_nonce_canary_and_pool_are_independent_high_entropy():
    canary, pool = nonce_canary_and_pool(64, 512, np.random.default_rng(3))
    assert len(canary) == 64 and len(pool) == 512 and not set(canary) & set(pool)
    assert len(set(pool)) == 512 and all(len(s) == 4 * 6 + 3 for s in canary + pool)
    # same draw order as design_nonce: canary strings first, then the pool
    rng = np.random.default_rng(3)
    assert nonce_strings(64, rng) == canary
    c2, p2 = nonce_canary_and_pool(64, 512, np.random.default_rng(3))
    assert (c2, p2) == (canary, pool)


def test_exact_copy_takes_the_top1_vote(tiny_world):
    """Each copied record is at zero distance from its source and takes that record's top-1 vote."""
    design = make_design(tiny_world, "exact", 0, np.random.default_rng(0), mechanism=MECH)
    emb = design.canary_embeddings
    assert design.probe_texts == design.canary_texts and len(design.positions) == 16
    index = build_neighbor_index(emb, tiny_world.bank, 5 + tiny_world.config.max_probes)
    routes = routes_with_probes(index, emb, design.probe_embeddings, design.positions, 5)
    # the record's own copy, or — for a record the blogger posted several times — the copy of that same
    # text at the lowest bank position (exact tie at distance 0 → lowest index)
    texts = design.canary_texts
    want = [min(q for t, q in zip(texts, design.positions) if t == texts[i]) for i in range(16)]
    np.testing.assert_array_equal(routes[:, 0], want)
    assert len(set(texts)) < 16 and (routes[:, 0] == design.positions).sum() >= len(set(texts))
    assert np.allclose(np.sum((design.probe_embeddings - emb) ** 2, axis=1), 0.0)
    with pytest.raises(ValueError, match="one position per record"):
        design_exact("u", design.canary_texts, emb, design.positions[:3])


def test_exact_injects_one_copy_per_record_at_the_paper_cap():
    """App. B "Exact": one verbatim copy of each of the m = 64 records, so r = m = 64 probes (not a cap of 32)."""
    rng = np.random.default_rng(1)
    emb = rng.normal(size=(64, 8)).astype(np.float32)
    texts = [f"post {i}" for i in range(64)]
    design = design_exact("u", texts, emb, np.arange(100, 164))
    assert design.positions.size == 64 and design.info["r"] == 64 and list(design.probe_texts) == texts
    np.testing.assert_array_equal(design.probe_embeddings, emb)
    np.testing.assert_array_equal(design.positions, np.arange(100, 164))


def test_every_preset_lets_exact_copy_every_record():
    """Issue 11: exact injects r = m copies (one per record), so each preset reserves max_probes ≥ record_cap, and
    the quick and paper presets sit at the paper's m = r = 64 (not the old cap of 32)."""
    from pe_kit.run.presets import PRESETS

    for p in PRESETS.values():
        assert p.record_cap <= p.max_probes and p.n_calibration == p.n_test, p.name
    assert {(p.record_cap, p.max_probes) for n, p in PRESETS.items() if n != "tiny"} == {(64, 64)}


@pytest.fixture(scope="module")
def designs(tiny_world):
    return {v: make_design(tiny_world, v, 1, np.random.default_rng([9, i]), mechanism=MECH, pool_size=POOL, r=R)
            for i, v in enumerate(VARIANTS)}


def test_designs_are_frozen_and_well_formed(tiny_world, designs):
    p = tiny_world.bank.shape[0]
    assert designs["ordinary"].probe_embeddings is None and designs["ordinary"].positions is None
    for v, d in designs.items():
        assert d.variant == v
        if v == "ordinary":
            continue
        r = 16 if v == "exact" else R
        assert d.probe_embeddings.shape == (r, 384) and len(d.probe_texts) == r and d.positions.shape == (r,)
        assert len(set(d.positions.tolist())) == r and d.positions.max() < p
        assert len(set(d.pool_indices.tolist())) == r
        assert not d.probe_embeddings.flags.writeable and not d.positions.flags.writeable
    real = designs["paraphrase"].canary_id
    assert real == tiny_world.splits.canary[1] and designs["paraphrase-mu_eff"].canary_id == real
    originals = {normalize_text(t) for t in designs["paraphrase"].canary_texts}
    for v in ("paraphrase", "paraphrase-norm", "paraphrase-mu_eff"):
        assert not {normalize_text(t) for t in designs[v].probe_texts} & originals  # non-verbatim rewrites
        assert designs[v].info["pool_size"] == POOL and designs[v].info["pool_generator"] == "wordnet-v1"
    assert designs["paraphrase"].info["records_covered"] == 16  # 32 probes spread over all 16 records
    # nonce variants: fresh synthetic canaries, independent of each other
    ids = {designs[v].canary_id for v in NONCE_VARIANTS}
    assert len(ids) == 3 and all(i.startswith("nonce-") for i in ids)
    assert not set(designs["nonce-norm"].canary_texts) & set(designs["nonce-mu_eff"].canary_texts)


@pytest.mark.parametrize("variant", ["paraphrase-norm", "paraphrase-mu_eff", "nonce-norm", "nonce-mu_eff"])
def test_selection_votes_equal_audit_routing(tiny_world, designs, variant):
    """The w_P that Alg. B.1 optimized is what the frozen bank's exact routing gives the canary."""
    d = designs[variant]
    emb = d.canary_embeddings
    index = build_neighbor_index(emb, tiny_world.bank, 5 + tiny_world.config.max_probes)
    routes = routes_with_probes(index, emb, d.probe_embeddings, d.positions, 5)
    counts = [(routes == q).sum() for q in d.positions]
    np.testing.assert_array_equal(counts, d.info["selection_counts"])
    w = np.asarray(counts) / (16 * 5)
    if variant.endswith("-norm"):
        assert d.info["selection_scores"][-1] == pytest.approx(w @ w, rel=1e-12)
    v = contributions(routes, np.zeros(16, int), 1, tiny_world.bank.shape[0], 0.1).toarray().ravel()
    if variant.startswith("nonce"):
        assert v[d.positions].sum() == pytest.approx(v.sum())  # every nonce-canary vote lands on a probe


def test_make_design_rejects_bad_arguments(tiny_world):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="variant"):
        make_design(tiny_world, "paraphrase-max", 0, rng)
    with pytest.raises(ValueError, match="canary_slot"):
        make_design(tiny_world, "exact", 5, rng)
    with pytest.raises(ValueError, match="max_probes"):
        make_design(tiny_world, "nonce-norm", 0, rng, r=65)
    with pytest.raises(ValueError, match="pool_size"):
        make_design(tiny_world, "nonce-norm", 0, rng, pool_size=16, r=32)


@pytest.mark.slow
def test_epsilon_table_all_variants_real_blogs(tiny_world):
    """ε_lower for 8 variants × 5 canaries on real Blogs data (tiny world: m = 16, p = 1024, N = 30,
    M = 128, r = 32, 100k trials). Sanity, not the paper's numbers: every ε_lower in [0, ε_theory],
    ordinary injects nothing, nonce canaries reach the μ_eff ceiling 1/σ and beat every natural variant."""
    import pandas as pd

    audit = AuditConfig(trials=100_000)
    slots = variant_slots(len(tiny_world.splits.canary))
    rows = []
    for vi, v in enumerate(VARIANTS):
        for j in range(5):
            slot = slots[v][j] if v in slots else j
            rng = np.random.default_rng([2024, vi, j])
            d = make_design(tiny_world, v, slot, rng, mechanism=MECH, pool_size=POOL, r=R)
            row = audit_design(tiny_world, d, MECH, audit, rng)
            rows.append({"variant": v, "canary": row["canary_id"], "mu_eff": row["mu_eff"],
                         "epsilon_lower": row["epsilon_lower"], "epsilon_theory": row["epsilon_theory"],
                         "n_probes": 0 if d.positions is None else len(d.positions),
                         "votes_on_P": row["canary_votes_on_P"], "pool_generator": row.get("pool_generator", "")})
    df = pd.DataFrame(rows)
    print("\n" + df.groupby("variant", sort=False)[["mu_eff", "epsilon_lower"]].agg(["median", "max"]).to_string())
    assert len(df) == 40
    assert ((df.epsilon_lower >= 0) & (df.epsilon_lower <= df.epsilon_theory)).all()
    assert df.epsilon_theory.iloc[0] == pytest.approx(1.695, abs=0.003)
    assert (df[df.variant == "ordinary"].n_probes == 0).all()
    assert (df[df.variant == "exact"].n_probes == 16).all() and (df[df.variant.str.contains("-")].n_probes == R).all()
    assert (df.mu_eff <= 1.0 + 1e-9).all()  # Eq. 20 ceiling 1/σ
    # every paraphrase row says which generator made its pool (tiny data: no shipped pool, so WordNet)
    assert (df[df.variant.str.startswith("paraphrase")].pool_generator.str.len() > 0).all()
    assert (df[df.variant.isin(["ordinary", "exact"])].pool_generator == "").all()
    nonce = df[df.variant.str.startswith("nonce")]
    assert (nonce.votes_on_P > 0.999).all() and (nonce.mu_eff > 0.99).all()
    natural = df[~df.variant.str.startswith("nonce")].groupby("variant")
    best = df[df.variant == "nonce-mu_eff"]
    assert best.mu_eff.min() >= natural.mu_eff.median().max()
    assert best.epsilon_lower.max() >= natural.epsilon_lower.median()["ordinary"]
    assert best.epsilon_lower.max() > 0.3
