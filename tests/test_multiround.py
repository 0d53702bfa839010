"""Multi-round PE (Alg. A.1), its composed audit (Eq. 36) and checkpoints (pe_kit.pe.multiround, pe_kit.text.variation)."""
from __future__ import annotations

import numpy as np
import pytest

import pe_kit.pe.multiround as mr
from pe_kit.attack.variants import design_nonce
from pe_kit.audit.accounting import epsilon_theory, epsilon_theory_prefixes
from pe_kit.audit.composed import RoundProblem, _composed_audit, round_problems
from pe_kit.audit.trials import ScalarProblem
from pe_kit.settings import AuditConfig, MechanismConfig
from steps.multiround_study import multiround_study
from pe_kit.text.generators.base import GenerationError
from pe_kit.text.variation import (
    Feedback,
    PublicRetrievalGenerator,
    build_feedback,
    make_variations,
    public_pool,
)

P = 256  # initial bank: the first 256 texts of the tiny world's bank A sample
R = 16  # probes
ROUNDS = 3
MECH = MechanismConfig(noise_multiplier=1.1088, sample_rate=0.1, record_cap=16)
PE = mr.PEConfig(rounds=ROUNDS)  # k̃ = round(0.05·256) = 13, g = 256 − 16 − 13 = 227


class Spy:
    """Forwards to a generator and records every input it receives (prompts and exclusions)."""

    def __init__(self, inner, fail_on_call: int | None = None):
        self.inner, self.fail_on_call, self.calls = inner, fail_on_call, 0
        self.name = inner.name
        self.raw_text_input = getattr(inner, "raw_text_input", False)
        self.accepts_exclude = getattr(inner, "accepts_exclude", False)
        self.seen_inputs: list[str] = []

    def config(self):
        return self.inner.config()

    def register(self, texts, emb):
        self.inner.register(texts, emb)

    def embedding_of(self, texts):
        return self.inner.embedding_of(texts)

    def generate(self, prompts, rng, exclude=()):
        self.calls += 1
        if self.fail_on_call is not None and self.calls == self.fail_on_call:
            raise GenerationError("simulated crash")
        self.seen_inputs.extend(prompts)
        self.seen_inputs.extend(exclude)
        return self.inner.generate(prompts, rng, exclude=exclude)


def _retrieval(world):
    # public texts: bank A texts outside the initial 256 (label-only SmolLM2 output; no private record)
    return PublicRetrievalGenerator(world.bank_texts[P:], world.bank[P:], encoder=world.encoder)


@pytest.fixture(scope="module")
def design(tiny_world):
    return design_nonce(tiny_world.encoder, P, np.random.default_rng(3), records=16, r=R)


@pytest.fixture(scope="module")
def loop(tiny_world, design):
    """One 3-round run on real Blogs users, with spies on the generator and on the release."""
    spy = Spy(_retrieval(tiny_world))
    released = []
    real_release = mr.release_round

    def spy_release(bank, private, mechanism, rng):
        released.append((bank.embeddings.flags.writeable, bank.probe_positions.flags.writeable, bank.texts))
        return real_release(bank, private, mechanism, rng)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mr, "release_round", spy_release)
        tr = mr.run_pe(tiny_world.bank_texts[:P], tiny_world.bank[:P], mr.Population.from_world(tiny_world, "test"),
                       spy, MECH, PE, np.random.default_rng(7), design=design, checkpoint_dir=False)
    return tr, spy, released


def _same(a: mr.Transcript, b: mr.Transcript) -> bool:
    if a.key != b.key or len(a.rounds) != len(b.rounds) or a.final_bank.texts != b.final_bank.texts:
        return False
    for x, y in zip(a.rounds, b.rounds):
        if (x.bank.texts != y.bank.texts or x.new_texts != y.new_texts or x.participants != y.participants
                or not np.array_equal(x.histogram, y.histogram) or not np.array_equal(x.retained, y.retained)
                or not np.array_equal(x.bank.embeddings, y.bank.embeddings)):
            return False
    return True


# ------------------------------------------------------------------------------------------- accounting
def test_epsilon_theory_prefixes_match_paper():
    eps = epsilon_theory_prefixes(1.1088, 0.1, 1e-5, 6)
    np.testing.assert_allclose(eps, [1.345, 1.540, 1.682, 1.800, 1.905, 2.000], atol=0.003)
    assert eps[3] == pytest.approx(epsilon_theory(1.1088, 0.1, 1e-5, releases=4))


# ------------------------------------------------------------------------------------ retention, banks
def test_build_feedback_keeps_top_k_non_probes_with_ties_to_lowest_index():
    texts = [f"t{i}" for i in range(8)]
    y = np.array([0.5, 9.0, 0.5, -1.0, 7.0, 0.5, 3.0, -2.0])
    retained, fb = build_feedback(texts, y, np.array([1, 4]), retain=3, n_negatives=2, seen={"old"})
    # probes 1 and 4 have the largest Y but are not candidates; 6 (3.0) then the 0.5 tie → indices 0, 2
    assert retained.tolist() == [6, 0, 2]
    assert fb.positives == ("t6", "t0", "t2")
    assert fb.negatives == ("t7", "t3")
    assert fb.seen == frozenset(texts) | {"old"}


@pytest.mark.parametrize("retain", [0, 7])
def test_build_feedback_rejects_bad_retain(retain):
    with pytest.raises(ValueError, match="retain"):
        build_feedback(["a", "b", "c", "d", "e", "f", "g"], np.zeros(7), np.array([0]), retain=retain)


def test_pe_config_retain_count_and_errors():
    assert mr.PEConfig().retain_count(8192, 64) == 410
    assert PE.retain_count(P, R) == 13
    with pytest.raises(ValueError, match="retain_fraction"):
        mr.PEConfig(retain_fraction=0.5).retain_count(100, 50)
    with pytest.raises(ValueError, match="rounds"):
        mr.PEConfig(rounds=0)


def test_retention_keeps_exactly_k_tilde_plus_every_probe(loop, design):
    tr, _, _ = loop
    k, g = PE.retain_count(P, R), P - R - PE.retain_count(P, R)
    banks = tr.banks
    assert len(tr.rounds) == ROUNDS and len(banks) == ROUNDS + 1
    for t, rec in enumerate(tr.rounds):
        assert rec.round == t
        assert rec.retained.shape == (k,) and len(rec.new_texts) == g
        assert not np.isin(rec.retained, rec.bank.probe_positions).any()
        nxt = banks[t + 1]
        assert nxt.size == P
        # every probe, at its own position, in every round
        np.testing.assert_array_equal(nxt.probe_positions, design.positions)
        assert [nxt.texts[j] for j in design.positions] == list(design.probe_texts)
        np.testing.assert_array_equal(nxt.embeddings[design.positions], design.probe_embeddings)
        # the non-probe slots are exactly the k̃ retained candidates (previous order) followed by the g new texts
        slots = np.flatnonzero(nxt.candidate_mask())
        kept = [rec.bank.texts[i] for i in np.sort(rec.retained)]
        assert [nxt.texts[s] for s in slots] == kept + list(rec.new_texts)
        # the retained ones are the top-k̃ candidates by the released histogram
        cand = np.flatnonzero(rec.bank.candidate_mask())
        assert set(rec.retained.tolist()) == set(cand[np.argsort(-rec.histogram[cand], kind="stable")[:k]].tolist())
        assert rec.histogram.shape == (P,) and np.isfinite(rec.histogram).all()


def test_each_bank_is_frozen_before_its_release(loop):
    tr, _, released = loop
    assert len(released) == ROUNDS
    for (emb_w, pos_w, texts), rec in zip(released, tr.rounds):
        assert emb_w is False and pos_w is False
        assert texts == rec.bank.texts
    for bank in tr.banks:
        assert isinstance(bank.texts, tuple)
        assert not bank.embeddings.flags.writeable
        with pytest.raises(ValueError):
            bank.embeddings[0, 0] = 1.0
    assert not tr.rounds[0].histogram.flags.writeable


def test_release_round_refuses_a_writeable_bank(tiny_world):
    bank = mr.FrozenBank(tuple(tiny_world.bank_texts[:8]), tiny_world.bank[:8])
    object.__setattr__(bank, "embeddings", np.array(bank.embeddings))  # tamper: writeable again
    with pytest.raises(ValueError, match="frozen"):
        mr.release_round(bank, mr.Population.from_world(tiny_world, "test"), MECH, np.random.default_rng(0))


def test_generator_never_sees_a_private_record(loop, tiny_world):
    tr, spy, _ = loop
    private = {t for s in ("canary", "aux", "calibration", "test") for u in tiny_world.users(s) for t in u.texts}
    assert spy.calls == ROUNDS and len(spy.seen_inputs) > 0
    assert not private & set(spy.seen_inputs)
    # new candidates are public texts, never reused across rounds, never a private record
    new = [t for rec in tr.rounds for t in rec.new_texts]
    assert len(set(new)) == len(new) and not private & set(new)
    assert set(new) <= set(tiny_world.bank_texts[P:])
    assert not set(new) & set(tr.rounds[0].bank.texts)


def test_icl_generator_prompts_hold_only_bank_texts(tiny_world):
    """An LM-style (ICL) generator sees prompts built from bank texts only; no private record is inside."""

    class FakeLM:
        name, raw_text_input = "fake-lm", False

        def __init__(self):
            self.prompts = []

        def generate(self, prompts, rng):
            self.prompts.extend(prompts)
            return [f"synthetic post {int(s)}" for s in rng.integers(0, 10**9, size=len(prompts))]

    bank = tiny_world.bank_texts[:64]
    y = np.random.default_rng(1).normal(size=64)
    _, fb = build_feedback(bank, y, None, retain=5, n_negatives=4)
    lm = FakeLM()
    out = make_variations(lm, fb, 20, np.random.default_rng(2), icl_examples=3, icl_negatives=2)
    assert len(out) == 20 and len(set(out)) == 20 and not set(out) & set(bank)
    private = [t for s in ("canary", "aux", "calibration", "test") for u in tiny_world.users(s) for t in u.texts]
    assert all(rec not in p for p in lm.prompts for rec in private)
    assert all(any(pos in p for pos in fb.positives) for p in lm.prompts)
    assert all("to avoid" in p for p in lm.prompts)


def test_make_variations_reports_a_shortfall():
    class Stuck:
        name, raw_text_input = "stuck", True

        def generate(self, prompts, rng):
            return ["same text"] * len(prompts)

    with pytest.raises(GenerationError, match="only 1 of 3"):
        make_variations(Stuck(), Feedback(positives=("a",)), 3, np.random.default_rng(0), max_attempts=2)


def test_public_retrieval_returns_nearest_unused_and_exhausts():
    emb = np.eye(4, dtype=np.float32)
    gen = PublicRetrievalGenerator(["a", "b", "c", "d"], emb)
    gen.register(["q"], np.array([[0.9, 0.43, 0.0, 0.0]], np.float32))
    assert gen.generate(["q", "q"], None) == ["a", "b"]
    assert gen.generate(["q"], None, exclude={"a"}) == ["b"]
    with pytest.raises(GenerationError, match="exhausted"):
        gen.generate(["q"] * 3, None, exclude={"a", "b"})
    with pytest.raises(ValueError, match="duplicates"):
        PublicRetrievalGenerator(["a", "a"], emb[:2])


def test_public_pool_is_disjoint_from_every_private_split(tiny_world):
    pool = public_pool(tiny_world)
    private = {t for s in ("canary", "aux", "calibration", "test") for u in tiny_world.users(s) for t in u.texts}
    assert len(pool) == len(set(pool)) and not set(pool) & private and not set(pool) & set(tiny_world.bank_texts)
    public_records = {t for u in tiny_world.users("public") for t in u.texts}
    assert not public_records & set(pool)  # same corpus as the MAUVE reference: only on request
    assert len(pool) == 8192 - 1024
    with_users = public_pool(tiny_world, include_public_users=True)
    assert public_records <= set(with_users) and len(with_users) == len(pool) + len(public_records)
    sub = public_pool(tiny_world, max_texts=100, rng=np.random.default_rng(0))
    assert len(sub) == 100 and set(sub) <= set(pool)
    with pytest.raises(ValueError, match="rng"):
        public_pool(tiny_world, max_texts=100)


# ------------------------------------------------------------------------------------------ checkpoints
def test_interrupted_run_resumes_at_last_finished_round(loop, tiny_world, design, tmp_path):
    reference, _, _ = loop
    test_pop = mr.Population.from_world(tiny_world, "test")
    args = (tiny_world.bank_texts[:P], tiny_world.bank[:P], test_pop)
    crashing = Spy(_retrieval(tiny_world), fail_on_call=3)  # dies while generating round 2's variations
    with pytest.raises(GenerationError, match="simulated crash"):
        mr.run_pe(*args, crashing, MECH, PE, np.random.default_rng(7), design=design, checkpoint_dir=tmp_path)
    files = sorted(p.name for p in tmp_path.rglob("round-*.npz"))
    assert files == ["round-000.npz", "round-001.npz"]
    resumed = mr.run_pe(*args, Spy(_retrieval(tiny_world)), MECH, PE, np.random.default_rng(7), design=design,
                        checkpoint_dir=tmp_path)
    assert resumed.resumed_rounds == 2
    assert _same(resumed, reference)
    # a corrupt checkpoint is recomputed, not trusted
    victim = next(tmp_path.rglob("round-001.npz"))
    victim.write_bytes(b"garbage")
    again = mr.run_pe(*args, Spy(_retrieval(tiny_world)), MECH, PE, np.random.default_rng(7), design=design,
                      checkpoint_dir=tmp_path)
    assert again.resumed_rounds == 2  # rounds 0 and 2 read, round 1 recomputed
    assert _same(again, reference)
    # another seed is another run (another key)
    other = mr.run_pe(*args, Spy(_retrieval(tiny_world)), MECH, PE, np.random.default_rng(8), design=design,
                      checkpoint_dir=tmp_path)
    assert other.key != reference.key and other.resumed_rounds == 0


# --------------------------------------------------------------------------------------- composed audit
def test_composed_audit_on_blogs_stays_below_theory(loop, tiny_world, design):
    tr, _, _ = loop
    audit = AuditConfig(trials=200_000)
    canary = mr.Population(design.canary_embeddings, np.zeros(16, np.int64), 1, "canary")
    probs = round_problems(tr, canary, *(mr.Population.from_world(tiny_world, s) for s in
                                            ("aux", "calibration", "test")), MECH, audit, np.random.default_rng(1))
    assert [p.round for p in probs] == [0, 1, 2]
    for p in probs:
        np.testing.assert_array_equal(p.coords, np.sort(design.positions))
        assert p.canary_norm == pytest.approx(0.1)  # every nonce vote lands on a probe: ‖v_P‖ = C
        assert 0.85 < p.mu_eff <= 1 / 1.1088  # Eq. 20 ceiling 1/σ = 0.9019
        assert p.test.n_users == p.calibration.n_users == 25
    rows = _composed_audit(probs, MECH, audit, np.random.default_rng(2))
    assert [r["releases"] for r in rows] == [1, 2, 3]
    theory = [r["epsilon_theory"] for r in rows]
    np.testing.assert_allclose(theory, [1.345, 1.540, 1.682], atol=0.003)
    lower = [r["epsilon_lower"] for r in rows]
    assert all(0 <= lo < th for lo, th in zip(lower, theory))
    # the composed nonce signal is detected and grows with the rounds (0.69–0.78 at t = 3 over seeds 0–5)
    assert lower[-1] > 0.5 and lower[-1] > lower[0]
    assert rows[-1]["mu_eff_composed"] == pytest.approx(np.sqrt(sum(p.mu_eff ** 2 for p in probs)))
    assert rows[0]["test_n_h0"] == rows[0]["test_n_h1"] == 200_000


def test_composed_audit_null_canary_gives_zero():
    null = ScalarProblem(projections=np.array([0.01, -0.02, 0.03]), canary_shift=0.0, noise_sd=0.5, offset=0.0,
                         sample_rate=0.1, n_users=3)
    probs = [RoundProblem(t, np.arange(2), 0.0, 0.0, null, null) for t in range(4)]
    rows = _composed_audit(probs, MECH, AuditConfig(trials=20_000), np.random.default_rng(0))
    assert [r["epsilon_lower"] for r in rows] == [0.0] * 4
    np.testing.assert_allclose([r["epsilon_theory"] for r in rows], [1.345, 1.540, 1.682, 1.800], atol=0.003)


def test_composed_audit_rejects_empty_and_noiseless():
    with pytest.raises(ValueError, match="problems"):
        _composed_audit([], MECH, AuditConfig(trials=10), np.random.default_rng(0))
    p = ScalarProblem(np.zeros(0), 1.0, 1.0, 0.0, 0.1, 1)
    with pytest.raises(ValueError, match="noise_multiplier"):
        _composed_audit([RoundProblem(0, np.arange(1), 1.0, 0.1, p, p)],
                          MechanismConfig(noise_multiplier=0.0), AuditConfig(trials=10), np.random.default_rng(0))


def test_multiround_study_rows(tiny_world, design, tmp_path):
    res = multiround_study(tiny_world, design, _retrieval(tiny_world), MECH, mr.PEConfig(rounds=2),
                           AuditConfig(trials=5_000), np.random.default_rng(0), pe_seeds=(0, 1), mauve_seeds=(0, 1),
                           mauve_samples=200, checkpoint_dir=tmp_path, bank_texts=tiny_world.bank_texts[:P],
                           bank_embeddings=tiny_world.bank[:P])
    rows = res.rows
    assert [(r["arm"], r["pe_seed"], r["round"]) for r in rows] == [
        (a, s, t) for s in (0, 1) for a in ("dp", "control") for t in range(3)]
    first = [r for r in rows if r["arm"] == "dp" and r["pe_seed"] == 0]
    assert first[0]["frac_initial_bank"] == 1.0 and first[1]["frac_initial_bank"] == pytest.approx(13 / 240)
    for r in rows:
        assert 0 < r["mauve_mean"] <= 1 and r["mauve_sd"] >= 0 and r["mauve_n_p"] == 200 and r["mauve_n_q"] == 200
        assert r["mech_noise_multiplier"] == 1.1088 and r["pe_rounds"] == 2 and r["variant"] == "nonce"
    # the two arms share S^(0), MAUVE subsample and k-means seeds: identical scores at round 0, no gain
    assert [g["round"] for g in res.gain] == [0, 1, 2] and res.gain[0]["gain"] == 0.0
    assert all(g["n_seeds"] == 2 and g["ci_low"] <= g["gain"] <= g["ci_high"] for g in res.gain)
    assert res.transcripts["dp", 0].entropy == res.transcripts["control", 0].entropy
    assert res.transcripts["dp", 0].entropy != res.transcripts["dp", 1].entropy
    np.testing.assert_allclose([a["epsilon_theory"] for a in res.audit], [1.345, 1.540], atol=0.003)
    for a in res.audit:
        assert a["epsilon_lower_frozen"] < a["epsilon_theory"] and a["epsilon_lower_adaptive"] < a["epsilon_theory"]
        assert a["frac_retention_changed"] == 0.0  # nonce votes land on probes only
    with pytest.raises(ValueError, match="reference_split"):
        multiround_study(tiny_world, design, _retrieval(tiny_world), MECH, mr.PEConfig(rounds=1),
                         AuditConfig(trials=10), np.random.default_rng(0), reference_split="test")


# ------------------------------------------------------------------------------------------- notebook 6
NOTEBOOK = mr.__file__.rsplit("/pe_kit/", 1)[0] + "/notebooks/06_multiround_mauve.ipynb"


def test_notebook_is_clean_and_parameterized():
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    assert all(not c.outputs and c.execution_count is None for c in code)
    for name in ("output_dir", "rounds", "sample_rate", "noise_multiplier", "delta", "generator", "trials", "pe_seeds",
                 "control", "adaptive", "adaptive_trials"):
        assert f"\n{name} = " in "\n" + code[0].source


@pytest.mark.notebooks
def test_notebook_runs_headless_with_tiny_parameters(tmp_path, monkeypatch):
    import os

    import pandas as pd
    import papermill as pm

    from pe_kit.run.reproduce import this_python_kernel
    from tests.conftest import TINY_DATA

    # as pe-kit reproduce does: the kernel imports the notebook's own step modules from its folder
    path = (os.path.dirname(NOTEBOOK), os.environ.get("PYTHONPATH"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, path)))
    out = tmp_path / "out"
    pm.execute_notebook(NOTEBOOK, str(tmp_path / "executed.ipynb"), cwd=str(tmp_path), progress_bar=False,
                        kernel_name=this_python_kernel(),
                        parameters=dict(output_dir=str(out), preset="tiny", data=str(TINY_DATA), record_cap=16,
                                        n_canary=5, n_aux=15, n_calibration=20, n_test=20, bank_size=256,
                                        max_probes=16, max_seq_length=32, trials=20_000, rounds=2, pe_seeds=[0, 1],
                                        mauve_seeds=[0, 1], mauve_samples=200,
                                        checkpoint_dir=str(tmp_path / "ckpt")))
    every = pd.read_csv(out / "06_multiround_mauve.csv")  # MAUVE rows, then the gain and audit rows for results.md
    assert sorted(every["experiment"].unique()) == ["fig2_multiround", "fig2_multiround_audit", "fig2_multiround_gain"]
    assert (every["experiment"] == "fig2_multiround_gain").sum() == 3
    assert (every["experiment"] == "fig2_multiround_audit").sum() == 2
    df = every[every["experiment"] == "fig2_multiround"]
    assert sorted(set(zip(df["arm"], df["pe_seed"]))) == [("control", 0), ("control", 1), ("dp", 0), ("dp", 1)]
    assert sorted(df["round"].unique().tolist()) == [0, 1, 2]
    assert df["mauve_mean"].between(0, 1).all() and (df["notebook"] == "06_multiround_mauve").all()
    gain = pd.read_csv(out / "06_multiround_mauve_gain.csv")
    assert gain["round"].tolist() == [0, 1, 2] and (gain["n_seeds"] == 2).all()
    aud = pd.read_csv(out / "06_multiround_mauve_audit.csv")
    np.testing.assert_allclose(aud["epsilon_theory"].tolist(), [1.345, 1.540], atol=0.003)
    assert (aud["epsilon_lower_frozen"] <= aud["epsilon_theory"]).all()
    assert (aud["epsilon_lower_adaptive"] <= aud["epsilon_theory"]).all() and (aud["frac_retention_changed"] == 0).all()
    for ext in ("png", "pdf"):
        assert (out / "figures" / f"06_multiround_mauve_fig2.{ext}").stat().st_size > 1000
