"""Multi-round PE that evolves (issue 13): a generator without the answer key, the σ → ∞ random-retention
control, the adaptive audit of Eq. 36, and resume after a crash mid-round.

Sources: Alg. A.1 (App. A), Fig. 2 / App. D, Eq. 36 (App. E.8) of "Canaries in the Bank".
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import pe_kit.pe.multiround as mr
from pe_kit.attack.variants import design_nonce
from pe_kit.audit.accounting import epsilon_theory_prefixes
from pe_kit.audit.adaptive import _adaptive_audit, side_by_side, transcript_tree
from pe_kit.audit.composed import _composed_audit, round_problems
from pe_kit.cache import content_hash
from pe_kit.settings import AuditConfig, MechanismConfig
from pe_kit.report.mauve import paired_gain
from pe_kit.text.generators.base import GenerationError, SeededGenerator
from pe_kit.text.generators.cached import CachedGenerator
from pe_kit.text.generators.prompts import icl_prompt
from pe_kit.text.variation import PublicRetrievalGenerator, public_pool

D = 8


def _unit(text: str, d: int) -> np.ndarray:
    v = np.random.default_rng(int(content_hash(text)[:12], 16)).normal(size=d)
    return (v / np.linalg.norm(v)).astype(np.float32)


class HashVariation(SeededGenerator):
    """Raw-text variation "<prompt> ~<seed>" with a content-hash embedding (no encoder needed); records its prompts
    and can crash on its ``crash_on``-th backend call (a kill mid-round)."""

    raw_text_input = True
    batch_size = 5

    def __init__(self, d: int = D, crash_on: int | None = None):
        self.d, self.crash_on, self.calls, self.prompts = d, crash_on, 0, []
        self.name = "hash-variation"

    def config(self):
        return {"d": self.d}

    def generate_seeded(self, prompts, seeds):
        self.calls += 1
        if self.crash_on is not None and self.calls == self.crash_on:
            raise GenerationError("killed mid-round", completed={0: f"{prompts[0]} ~{int(seeds[0])}"})
        self.prompts.extend(prompts)
        return [f"{p} ~{int(s)}" for p, s in zip(prompts, seeds)]

    def embedding_of(self, texts):
        return np.stack([_unit(t, self.d) for t in texts]) if texts else np.zeros((0, self.d), np.float32)


class CachedHash(CachedGenerator):
    def embedding_of(self, texts):
        return self.inner.embedding_of(texts)


def _synthetic(seed: int = 0, p: int = 40, n_users: int = 30, m: int = 4):
    rng = np.random.default_rng(seed)
    texts = [f"public candidate {i}" for i in range(p)]
    emb = np.stack([_unit(t, D) for t in texts])
    rec = rng.normal(size=(n_users * m, D)).astype(np.float32)
    rec /= np.linalg.norm(rec, axis=1, keepdims=True)
    return texts, emb, mr.Population(rec, np.repeat(np.arange(n_users), m), n_users, "test")


MECH1 = MechanismConfig(top_k=1, clip_norm=0.1, noise_multiplier=1.1088, sample_rate=0.5, record_cap=4)


# --------------------------------------------------------------------------------------- no answer key
def test_public_pool_excludes_the_scored_corpus_by_default(tiny_world):
    """Retrieval answers only with the bank source (label-only SmolLM2 texts), never a post of the corpus MAUVE
    is scored against; the public users' posts come back only when asked for."""
    pool = public_pool(tiny_world)
    corpus = {t for s in ("canary", "aux", "calibration", "test", "public") for u in tiny_world.users(s)
              for t in u.texts}
    assert not set(pool) & corpus and len(pool) == 8192 - 1024
    with_users = public_pool(tiny_world, include_public_users=True)
    assert len(with_users) == len(pool) + len({t for u in tiny_world.users("public") for t in u.texts})


def test_spy_icl_generator_sees_only_retained_candidates(tiny_world):
    """Every ICL prompt is the fixed public instruction around examples drawn from that round's retained
    candidates, and no private or reference record (any split) appears in any prompt."""

    class SpyLM:
        name, raw_text_input = "spy-lm", False

        def __init__(self):
            self.calls = []

        def generate(self, prompts, rng):
            self.calls.append(list(prompts))
            return [f"synthetic post {int(s)}" for s in rng.integers(0, 2**62, size=len(prompts))]

        def embedding_of(self, texts):
            return np.stack([_unit(t, 384) for t in texts])

    spy = SpyLM()
    p = 128
    cfg = mr.PEConfig(rounds=2, retain_fraction=0.05, icl_negatives=0, icl_examples=3)
    tr = mr.run_pe(tiny_world.bank_texts[:p], tiny_world.bank[:p], mr.Population.from_world(tiny_world, "test"), spy,
                   MechanismConfig(noise_multiplier=1.1088, sample_rate=0.1, record_cap=16), cfg,
                   np.random.default_rng(0), checkpoint_dir=False)
    assert len(spy.calls) == 2
    records = [t for s in ("canary", "aux", "calibration", "test", "public") for u in tiny_world.users(s)
               for t in u.texts]
    for rec, prompts in zip(tr.rounds, spy.calls):
        retained = {rec.bank.texts[i] for i in rec.retained}
        assert len(prompts) == p - rec.retained.size
        for prompt in prompts:
            examples = re.findall(r"^\d+\. (.*)$", prompt, flags=re.M)
            assert 1 <= len(examples) <= 3 and set(examples) <= retained
            assert prompt == icl_prompt(examples, genre=cfg.genre)  # nothing else: the instruction is fixed
            assert not any(r in prompt for r in records)


def test_spy_raw_text_generator_gets_retained_candidates_only(tiny_world):
    """Retrieval over bank-source texts (label-only SmolLM2 posts outside S^(0)): every prompt is a retained
    candidate of its round; no record of any split reaches the generator or the next bank."""
    pool = list(tiny_world.bank_texts[256:])
    calls = []

    class Spy(PublicRetrievalGenerator):
        def generate(self, prompts, rng=None, exclude=()):
            calls.append(list(prompts))
            return super().generate(prompts, rng, exclude)

    gen = Spy(pool, tiny_world.bank[256:])
    design = design_nonce(tiny_world.encoder, 256, np.random.default_rng(3), records=16, r=16)
    tr = mr.run_pe(tiny_world.bank_texts[:256], tiny_world.bank[:256], mr.Population.from_world(tiny_world, "test"),
                   gen, MechanismConfig(noise_multiplier=1.1088, sample_rate=0.1, record_cap=16),
                   mr.PEConfig(rounds=2), np.random.default_rng(1), design=design, checkpoint_dir=False)
    records = {t for s in ("canary", "aux", "calibration", "test", "public") for u in tiny_world.users(s)
               for t in u.texts}
    for rec, prompts in zip(tr.rounds, calls):
        assert set(prompts) == {rec.bank.texts[i] for i in rec.retained}
        assert not set(rec.new_texts) & records and set(rec.new_texts) <= set(pool)
    assert not set(design.probe_texts) & {t for c in calls for t in c}  # probes are never shown


# -------------------------------------------------------------------------------------- random control
def test_random_retention_is_the_sigma_infinity_control():
    texts, emb, pop = _synthetic()
    mech = MechanismConfig(top_k=1, clip_norm=0.1, noise_multiplier=0.05, sample_rate=1.0, record_cap=4)
    runs = {rule: mr.run_pe(texts, emb, pop, HashVariation(), mech, mr.PEConfig(rounds=3, retention=rule),
                            np.random.default_rng(5), checkpoint_dir=False) for rule in ("histogram", "random")}
    dp, ctl = runs["histogram"], runs["random"]
    assert dp.entropy == ctl.entropy  # same seed, same release draws
    np.testing.assert_array_equal(dp.rounds[0].histogram, ctl.rounds[0].histogram)
    k = mr.PEConfig().retain_count(40, 0)
    for rec in ctl.rounds:
        z = np.random.default_rng([ctl.entropy, rec.round, 1]).standard_normal(40)
        assert rec.retained.tolist() == np.argsort(-z, kind="stable")[:k].tolist()
    # low noise, everyone votes: the histogram keeps the top-voted candidates, the control does not
    y0 = dp.rounds[0].histogram
    assert y0[dp.rounds[0].retained].min() >= np.sort(y0)[-k]
    assert y0[ctl.rounds[0].retained].mean() < y0[dp.rounds[0].retained].mean()
    with pytest.raises(ValueError, match="retention"):
        mr.PEConfig(retention="none")


def test_paired_gain_t_interval():
    dp = np.array([[0.5, 0.52], [0.57, 0.57], [0.61, 0.61]])
    ctl = np.array([[0.4, 0.42], [0.45, 0.45], [0.5, 0.5]])
    g = paired_gain(dp, ctl)
    d = np.array([0.1, 0.12, 0.11])
    half = 4.302652729911275 * d.std(ddof=1) / np.sqrt(3)  # t_{0.975, 2}
    assert g["gain"] == pytest.approx(d.mean()) and g["ci_low"] == pytest.approx(d.mean() - half)
    assert g["significant"] and g["n_seeds"] == 3 and g["ci_high"] == pytest.approx(d.mean() + half)
    assert not paired_gain(dp, dp)["significant"]
    one = paired_gain(dp[:1], ctl[:1])
    assert np.isnan(one["ci_low"]) and not one["significant"]
    with pytest.raises(ValueError, match="same shape"):
        paired_gain(dp, ctl[:2])


# ----------------------------------------------------------------------------------------- adaptive audit
def _boundary_canary(tr, t: int = 0):
    """A one-record canary sitting exactly on the first candidate below round t's top-k̃ boundary."""
    rec = tr.rounds[t]
    order = np.argsort(-rec.histogram, kind="stable")
    k = rec.retained.size
    j = int(order[k])
    gap = rec.histogram[order[k - 1]] - rec.histogram[j]
    return mr.Population(rec.bank.embeddings[[j]], np.zeros(1, np.int64), 1, "canary"), j, gap


def test_adaptive_tree_branches_where_the_canary_changes_retention():
    texts, emb, pop = _synthetic(1)
    gen = HashVariation()
    cfg = mr.PEConfig(rounds=3)
    tr = mr.run_pe(texts, emb, pop, gen, MECH1, cfg, np.random.default_rng(2), checkpoint_dir=False)
    canary, j, gap = _boundary_canary(tr)
    assert 0 <= gap < 0.1  # the canary's vote (C = 0.1 on one candidate) crosses the boundary
    calls = gen.calls
    tree = transcript_tree(tr, pop, canary, gen, MECH1, cfg)
    root = tree[0][0]
    assert root.reference and root.changes_retention and root.next_absent != root.next_present
    absent, present = tree[1][root.next_absent], tree[1][root.next_present]
    assert absent.reference and absent.bank.texts == tr.rounds[1].bank.texts  # J = 0 is the canary-free run
    assert texts[j] in present.bank.texts and texts[j] not in absent.bank.texts
    assert [n.bank.texts for n in tree[2] if n.reference] == [tr.rounds[2].bank.texts]
    # generation is reused along the canary-free path: only branches off it cost new calls
    built = sum(1 for nodes in tree[:-1] for n in nodes if not n.reference) + sum(
        1 for nodes in tree[:-1] for n in nodes if n.next_absent != n.next_present)
    assert gen.calls - calls == built  # one generation per distinct (bank, retained set); S^(T) is not built
    splits = [mr.Population(pop.embeddings, pop.owner, pop.n_users, s) for s in ("aux", "calibration")]
    rows = _adaptive_audit(tree, canary, *splits, pop, MECH1, AuditConfig(trials=10_000), np.random.default_rng(3))
    assert rows[0]["frac_retention_changed"] == pytest.approx(0.5, abs=0.02)  # J_0 ~ Bernoulli(q = 0.5)
    assert rows[0]["frac_bank_changed"] == 0.0 and rows[1]["frac_bank_changed"] == pytest.approx(0.5, abs=0.02)
    assert rows[-1]["frac_retention_changed"] >= rows[0]["frac_retention_changed"]
    theory = epsilon_theory_prefixes(1.1088, 0.5, 1e-5, 3)
    np.testing.assert_allclose([r["epsilon_theory"] for r in rows], theory)
    assert all(0 <= r["epsilon_lower"] <= r["epsilon_theory"] for r in rows)


def test_adaptive_and_frozen_audits_of_the_nonce_canary(tiny_world):
    """A nonce canary votes only on probes, which are never candidates: it never changes retention, the tree is
    the canary-free transcript, and adaptive and frozen ε_lower agree within trial noise, both ≤ ε_theory."""
    p, mech = 256, MechanismConfig(noise_multiplier=1.1088, sample_rate=0.1, record_cap=16)
    design = design_nonce(tiny_world.encoder, p, np.random.default_rng(3), records=16, r=16)
    gen = PublicRetrievalGenerator(tiny_world.bank_texts[p:], tiny_world.bank[p:])
    test = mr.Population.from_world(tiny_world, "test")
    cfg = mr.PEConfig(rounds=3)
    tr = mr.run_pe(tiny_world.bank_texts[:p], tiny_world.bank[:p], test, gen, mech, cfg, np.random.default_rng(7),
                   design=design, checkpoint_dir=False)
    canary = mr.Population(design.canary_embeddings, np.zeros(16, np.int64), 1, "canary")
    aux, cal = (mr.Population.from_world(tiny_world, s) for s in ("aux", "calibration"))
    tree = transcript_tree(tr, test, canary, gen, mech, cfg)
    assert [len(nodes) for nodes in tree] == [1, 1, 1]
    assert not any(n.changes_retention for nodes in tree for n in nodes)
    audit = AuditConfig(trials=50_000)
    problems = round_problems(tr, canary, aux, cal, test, mech, audit, np.random.default_rng(1))
    frozen = _composed_audit(problems, mech, audit, np.random.default_rng(2))
    adapt = _adaptive_audit(tree, canary, aux, cal, test, mech, audit, np.random.default_rng(2))
    # on a chain the adaptive trials score exactly the frozen per-round problems (same law; ε_lower differs
    # only by trial noise, which at 25 users spans 0.0–0.6 per prefix over seeds)
    for nodes, prob in zip(tree, problems):
        assert nodes[0].problem.mu_eff == prob.mu_eff
        np.testing.assert_array_equal(nodes[0].problem.test.projections, prob.test.projections)
    rows = side_by_side(frozen, adapt)
    for r in rows:
        assert r["frac_retention_changed"] == 0.0 and r["frac_bank_changed"] == 0.0 and r["n_banks"] == 1
        assert 0 <= r["epsilon_lower_adaptive"] <= r["epsilon_theory"]
        assert 0 <= r["epsilon_lower_frozen"] <= r["epsilon_theory"]
    np.testing.assert_allclose([r["epsilon_theory"] for r in rows], [1.345, 1.540, 1.682], atol=0.003)


def test_transcript_tree_refuses_too_many_banks():
    texts, emb, pop = _synthetic(1)
    gen = HashVariation()
    tr = mr.run_pe(texts, emb, pop, gen, MECH1, mr.PEConfig(rounds=2), np.random.default_rng(2), checkpoint_dir=False)
    canary, _, _ = _boundary_canary(tr)
    with pytest.raises(ValueError, match="max_banks"):
        transcript_tree(tr, pop, canary, gen, MECH1, mr.PEConfig(rounds=2), max_banks=1)
    with pytest.raises(ValueError, match="one user"):
        transcript_tree(tr, pop, pop, gen, MECH1, mr.PEConfig(rounds=2))


# --------------------------------------------------------------------------------------------------- resume
def test_run_killed_mid_round_resumes_bit_identical(tmp_path):
    """A crash inside round 1's generation (after some batches were cached) and a rerun give exactly the
    transcript of an uninterrupted run; the finished round 0 is read from its checkpoint."""
    texts, emb, pop = _synthetic(4)
    cfg = mr.PEConfig(rounds=3)
    ref = mr.run_pe(texts, emb, pop, CachedHash(HashVariation(), root=tmp_path / "g0"), MECH1, cfg,
                    np.random.default_rng(9), checkpoint_dir=tmp_path / "c0")
    g = 40 - cfg.retain_count(40, 0)
    per_round = -(-g // HashVariation.batch_size)
    crashing = CachedHash(HashVariation(crash_on=per_round + 3), root=tmp_path / "g1")
    with pytest.raises(GenerationError, match="killed mid-round"):
        mr.run_pe(texts, emb, pop, crashing, MECH1, cfg, np.random.default_rng(9), checkpoint_dir=tmp_path / "c1")
    assert sorted(p.name for p in (tmp_path / "c1").rglob("round-*.npz")) == ["round-000.npz"]
    rerun = CachedHash(HashVariation(), root=tmp_path / "g1")
    again = mr.run_pe(texts, emb, pop, rerun, MECH1, cfg, np.random.default_rng(9), checkpoint_dir=tmp_path / "c1")
    assert again.resumed_rounds == 1 and rerun.hits == 2 * HashVariation.batch_size + 1
    assert again.key == ref.key and again.entropy == ref.entropy
    assert again.final_bank.texts == ref.final_bank.texts
    assert again.final_bank.embeddings.tobytes() == ref.final_bank.embeddings.tobytes()
    for a, b in zip(again.rounds, ref.rounds):
        assert a.bank.texts == b.bank.texts and a.new_texts == b.new_texts and a.participants == b.participants
        for f in ("histogram", "retained", "new_embeddings"):
            assert getattr(a, f).tobytes() == getattr(b, f).tobytes()
