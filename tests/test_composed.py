"""``composed-mu_eff`` (beyond the paper, issue 34): probes only from the canary's own words, Alg. B.1 on the
composed pool against a literal brute-force Alg. B.1, the conservative Σ̂_Q in closed form, and the audit's
invariants ε_lower ≤ ε_theory and μ_eff ≤ 1/σ (Eq. 20) on a real-data world."""
import numpy as np
import pytest

import pe_kit.attack.composed_probes as composed
from pe_kit.attack.composed_probes import (
    AuxBackground,
    ComposedConfig,
    canary_vocabulary,
    composed_pool,
    design_composed,
    design_mu_eff,
    edit_candidates,
    probe_vote_examples,
    record_words,
    solo_pool_covariance,
)
from pe_kit.attack.selection import base_neighbors, greedy_select
from pe_kit.attack.variants import ALL_VARIANTS, VARIANTS, resolve_variants, variant_objective
from pe_kit.settings import AuditConfig, MechanismConfig
from pe_kit.pe.mechanism import build_neighbor_index, squared_distances
from tests.oracles import greedy_plain
from tests.test_selection import _brute_force

SMALL = ComposedConfig(pool_size=96, hub_sizes=(2, 4, 8), refine_rounds=1, refine_edits=24)
MECH = MechanismConfig(record_cap=16)


def _canary(world, slot=0):
    user = world.corpus.by_id()[world.splits.canary[slot]]
    rec = world.records["canary"]
    return user, rec["emb"][rec["owner"] == rec["ids"].index(user.user_id)]


def _background(world):
    aux = world.records["aux"]
    return AuxBackground(aux["index"], aux["emb"], aux["owner"], len(aux["ids"]), len(world.splits.test))


def _is_run_of(words, spans, text):
    """text is the concatenation of contiguous word runs words[r][a:b] (real words in real order)."""
    return text == " ".join(w for r, a, b in spans for w in words[r][a:b]) and all(b > a for _, a, b in spans)


def test_variant_is_selectable_and_marked_beyond_the_paper():
    assert "composed-mu_eff" not in VARIANTS and ALL_VARIANTS[-1] == "composed-mu_eff"
    assert resolve_variants("all") == list(VARIANTS)  # "all" stays Table 1's eight
    assert resolve_variants(["exact,composed-mu_eff"]) == ["exact", "composed-mu_eff"]
    assert variant_objective("composed-mu_eff") == "mu_eff"
    from steps.designs import canary_slots

    assert canary_slots("composed-mu_eff", 5, 25) == canary_slots("paraphrase-mu_eff", 5, 25) == [20, 21, 22, 23, 24]
    with pytest.raises(ValueError, match="covariance"):
        ComposedConfig(covariance="full")


def test_pool_is_made_of_the_canary_words_only(tiny_world, rng):
    user, emb = _canary(tiny_world)
    texts, spans, kinds = composed_pool(user.texts, emb, rng, SMALL)
    words, vocab = record_words(user.texts), canary_vocabulary(user.texts)
    assert len(texts) == SMALL.pool_size == len(set(texts))
    distinct = list(dict.fromkeys(" ".join(t.split()) for t in user.texts))
    assert texts[:len(distinct)] == distinct  # the (distinct) records come first
    assert set(kinds) <= {"record", "centroid", "knn", "sentence", "window", "random"}
    for t, sp in zip(texts, spans):
        assert set(t.split()) <= vocab and _is_run_of(words, sp, t)
    edits = edit_candidates(words, spans[:10], [0, 3], 50, rng, hub_words=20)
    assert len(edits) == 50
    for sp in edits:
        t = " ".join(w for r, a, b in sp for w in words[r][a:b])
        assert set(t.split()) <= vocab and sum(b - a for _, a, b in sp) <= 20


def test_solo_covariance_closed_form():
    # aux user 0 has two records; record 0 sits on candidate 0 (nearer than any base entry), record 1 is far
    # from both candidates; user 1's one record sits on candidates 0 and 1 (both enter it)
    e = np.eye(4, dtype=np.float32)
    bank = np.stack([e[3]] * 6)
    recs = np.stack([e[0], e[2], (e[0] + e[1]) / np.sqrt(2)]).astype(np.float32)
    pool = np.stack([e[0], e[1]]).astype(np.float32)
    mech = MechanismConfig(top_k=2, clip_norm=0.1, noise_multiplier=1.0, sample_rate=0.1)
    pos = np.array([5], np.int64)
    aux = AuxBackground(build_neighbor_index(recs, bank, 3), recs, np.array([0, 0, 1]), 2, n_users=10)
    sigma = solo_pool_covariance(aux, pool, pos, mech, AuditConfig(shrinkage=0.0, ridge=0.0))
    # user votes h = count / (records · k): user 0 → (1/4, 0), user 1 → (1/2, 1/2); M̂ = mean h hᵀ
    h = np.array([[0.25, 0.0], [0.5, 0.5]])
    want = 0.1 * 0.9 * 10 * (h.T @ h) / 2 + 0.01 * np.eye(2)
    np.testing.assert_allclose(sigma, want, rtol=1e-12)


@pytest.mark.parametrize("covariance", ["solo", "pool"])
def test_greedy_equals_brute_force_on_composed_pool(tiny_world, covariance):
    user, emb = _canary(tiny_world, 1)
    texts, _, _ = composed_pool(user.texts, emb, np.random.default_rng(3), ComposedConfig(pool_size=10,
                                                                                           hub_sizes=(2, 3)))
    pool = tiny_world.encoder.encode(texts)
    bank = tiny_world.bank[:48]
    rng = np.random.default_rng(5)
    pos, k = rng.choice(48, 3, replace=False).astype(np.int64), 3
    mech = MechanismConfig(top_k=k, record_cap=16)
    aux = tiny_world.records["aux"]
    back = AuxBackground(build_neighbor_index(aux["emb"], bank, k + 3), aux["emb"], aux["owner"], len(aux["ids"]), 25)
    if covariance == "solo":
        sigma = solo_pool_covariance(back, pool, pos, mech)
    else:
        from pe_kit.attack.selection import pool_covariance

        sigma = pool_covariance(back.index, back.records, back.owner, back.n_aux_users, pool, pos, mech, 25)
    bi, bd = base_neighbors(build_neighbor_index(emb, bank, k + 3), pos, k)
    ref = _brute_force(bank, emb, pool, pos, sigma, k, "mu_eff")
    pd = squared_distances(emb, pool)
    sel = greedy_select(pd, bd, bi, pos, "mu_eff", sigma)
    np.testing.assert_array_equal(sel.order, ref)
    np.testing.assert_array_equal(greedy_plain(pd, bd, bi, pos, "mu_eff", sigma)[0], ref)
    assert sel.counts.sum() > 0  # the composed candidates do take canary votes in this case


def test_design_is_natural_text_and_audits_within_the_ceiling(tiny_world, monkeypatch):
    from pe_kit.study.world import audit_design, make_design

    monkeypatch.setattr(composed, "DEFAULT_CONFIG", SMALL)
    design = make_design(tiny_world, "composed-mu_eff", 2, np.random.default_rng(7), mechanism=MECH, r=16)
    words = record_words(design.canary_texts)
    vocab = canary_vocabulary(design.canary_texts)
    assert design.variant == "composed-mu_eff" and len(design.probe_texts) == 16 == len(set(design.probe_texts))
    for t, sp in zip(design.probe_texts, design.info["probe_spans"]):
        assert set(t.split()) <= vocab and _is_run_of(words, [tuple(s) for s in sp], t)
    assert design.info["beyond_paper"].startswith("beyond the paper")
    assert len(design.info["rounds"]) == 2 and design.info["encodes"] + design.info["cached_texts"] >= 96
    kept = design.info["rounds"][design.info["kept_round"]]["aux_mu_eff"]
    assert kept == max(r["aux_mu_eff"] for r in design.info["rounds"])
    np.testing.assert_allclose(np.linalg.norm(design.probe_embeddings, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(design.probe_embeddings, tiny_world.encoder.encode(list(design.probe_texts)), atol=1e-6)
    audit = AuditConfig(trials=20_000)
    row = audit_design(tiny_world, design, MECH, audit, np.random.default_rng(0))
    assert row["beyond_paper"] == design.info["beyond_paper"] and row["variant"] == "composed-mu_eff"
    assert 0 <= row["epsilon_lower"] <= row["epsilon_theory"]
    assert 0 < row["mu_eff"] <= row["mu_eff_ceiling"] == 1 / MECH.noise_multiplier  # Eq. 20
    # the design's aux-only μ_eff is the audit row's μ_eff (same routing, Σ̂ from aux users, N = n_test)
    summ = design_mu_eff(design.canary_embeddings, tiny_world.bank, design.probe_embeddings, design.positions,
                         _background(tiny_world), MECH, audit)
    assert summ["mu_eff"] == pytest.approx(row["mu_eff"], rel=1e-9)
    assert summ["mu_eff"] == pytest.approx(kept, rel=1e-9)


def test_probe_vote_examples_show_the_k_votes_of_a_record(tiny_world):
    from pe_kit.attack.variants import design_exact

    user, emb = _canary(tiny_world)
    pos = np.random.default_rng(1).choice(tiny_world.bank.shape[0], len(user.texts), replace=False)
    design = design_exact(user.user_id, user.texts, emb, pos.astype(np.int64))
    ex = probe_vote_examples(design, tiny_world.bank, top_k=5, records=[0, 4], bank_texts=tiny_world.bank_texts)
    assert [e["record"] for e in ex] == [0, 4] and all(len(e["votes"]) == 5 for e in ex)
    for e in ex:  # an exact copy is the record's nearest entry, at distance 0
        assert e["votes"][0]["probe"] == e["record"] and e["votes"][0]["text"] == e["text"]
        assert e["votes"][0]["distance"] == pytest.approx(0, abs=1e-6)
        assert [v["distance"] for v in e["votes"]] == sorted(v["distance"] for v in e["votes"])
        for v in e["votes"]:
            assert v["probe"] is not None or v["text"].startswith("bank #")
    with pytest.raises(ValueError, match="records"):
        probe_vote_examples(design, tiny_world.bank, records=[99])


def test_design_mu_eff_of_a_design_without_probes_is_the_audit_rows(tiny_world):
    """ordinary (positions None): P is the canary's natural top-k support, as audit_design inspects it."""
    from pe_kit.attack.variants import design_ordinary
    from pe_kit.study.world import audit_design

    user, emb = _canary(tiny_world, slot=1)
    design = design_ordinary(user.user_id, user.texts, emb)
    audit = AuditConfig(trials=20_000)
    row = audit_design(tiny_world, design, MECH, audit, np.random.default_rng(0))
    summ = design_mu_eff(design.canary_embeddings, tiny_world.bank, design.probe_embeddings, None,
                         _background(tiny_world), MECH, audit)
    assert summ["mu_eff"] == pytest.approx(row["mu_eff"], rel=1e-9) and summ["mu_eff"] > 0
    assert summ["canary_votes_on_P"] == pytest.approx(1.0)  # every vote lands on its own support
    assert (summ["record_probe_votes"] == MECH.top_k).all()


def test_repetitive_canary_is_a_pool_shortfall_the_audit_skips(tiny_world, monkeypatch):
    """A canary whose records give fewer than r distinct composed candidates is skipped as a pool shortfall (as the
    paraphrase variants' are), not a crash of the run; a pool_size below r is the config's error, named so."""
    from types import SimpleNamespace

    from steps import designs
    from pe_kit.text.generators.base import PoolShortfallError

    user, emb = _canary(tiny_world, 1)
    same = np.repeat(emb[:1], len(user.texts), axis=0)
    bank, pos = tiny_world.bank, np.arange(16)
    with pytest.raises(PoolShortfallError, match=r"records give only \d distinct composed candidates < r=16.*"
                                                 r"pool_size is not the limit"):
        design_composed(tiny_world.encoder, user.user_id, ["same"] * len(user.texts), same, bank, pos, MECH,
                        _background(tiny_world), np.random.default_rng(0), config=SMALL)
    with pytest.raises(ValueError, match=r"ComposedConfig.pool_size=8 < r=16 probes: raise pool_size"):
        design_composed(tiny_world.encoder, user.user_id, user.texts, emb, bank, pos, MECH, _background(tiny_world),
                        np.random.default_rng(0), config=ComposedConfig(pool_size=8))

    def short(*a, **k):
        raise PoolShortfallError("canary x: its 16 records give only 2 distinct composed candidates", [], [], 14)

    monkeypatch.setattr(designs, "make_design", short)
    design, reason = designs.try_design(SimpleNamespace(), "composed-mu_eff", 0, 1, 0)
    assert design is None and reason.startswith("pool shortfall: canary x")


@pytest.mark.parametrize("field, value", [("windows", (8.0,)), ("windows", 8), ("hub_sizes", (2.0,)),
                                          ("hub_sizes", ()), ("hub_sizes", (True, 3)), ("windows", (2,))])
def test_composed_config_rejects_non_integer_tuples_by_name(field, value):
    with pytest.raises(ValueError, match=f"ComposedConfig.{field}=.*non-empty tuple of integers"):
        ComposedConfig(**{field: value})


def test_composed_config_stores_tuples_and_keys_the_audit_step(monkeypatch):
    """A list is stored as a tuple (the frozen config stays hashable); the step key of composed-mu_eff rows holds the
    config in use, so a changed DEFAULT_CONFIG (benchmarks/composed_reference.py --refine-rounds) never reuses rows."""
    from steps.audits import _route_key

    c = ComposedConfig(windows=[8, 16], hub_sizes=[2, 3])
    assert c.windows == (8, 16) and c.hub_sizes == (2, 3) and hash(c) == hash(ComposedConfig(windows=(8, 16),
                                                                                              hub_sizes=(2, 3)))
    before = _route_key("composed-mu_eff", None)
    monkeypatch.setattr(composed, "DEFAULT_CONFIG", SMALL)
    after = _route_key("composed-mu_eff", None)
    assert before != after and after == ("composed", SMALL.as_dict()) and _route_key("exact", None) == ()
