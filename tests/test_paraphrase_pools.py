"""Content-keyed paraphrase pools (pe_kit.text.generators.paraphrase_pools) and the study's paraphrase route:
keys, per-entry recomputation, the shipped-pool lookup, and (slow) the shipped SmolLM2 pools against the model."""
from __future__ import annotations

import gzip
import importlib.util
import json
import os
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pe_kit.text.generators import paraphrase_pools as PP
import make_paraphrase_pools as MPP
import pool_canaries as PC
from pe_kit.text.generators.base import SeededGenerator
from pe_kit.text.generators.cached import CachedGenerator
from pe_kit.text.generators.prompts import paraphrase_prompt
from tests.oracles import recompute_entries

RECORDS = ["my sister called last night about her job", "we watched a bad movie and ate cold pizza",
           "finished the exam and now I can read novels", "the weather was awful so the party moved inside"]


class FakeLM(SeededGenerator):
    """Deterministic in (prompt, seed); 1 seed in 5 repeats the record verbatim (rejected, asked again)."""

    name = "fake-lm"
    calls = 0

    def config(self) -> dict:
        return {"style": 1}

    def generate_seeded(self, prompts, seeds):
        FakeLM.calls += len(prompts)
        out = []
        for p, s in zip(prompts, seeds):
            rec = p.split("Text: ", 1)[1]
            out.append(rec if s % 5 == 0 else f"{rec.upper()}  variant {int(s) % 9973}")
        return out


def _entry(seed=(0, 3, 7), size=12, gen=None):
    return PP.build_pool(RECORDS, size, list(seed), gen or FakeLM())


def test_build_pool_records_one_seed_per_entry_that_regenerates_it():
    e = _entry()
    assert len(e["texts"]) == len(e["sources"]) == len(e["seeds"]) == 12
    assert e["sources"] == [j % 4 for j in range(12)]  # round robin over records (App. B: spread across records)
    assert recompute_entries(e, RECORDS, FakeLM(), range(12)) == e["texts"]
    assert all(s % 5 for s in e["seeds"])  # verbatim outputs were rejected, the recorded seed is the accepted one
    # the pool equals make_paraphrase_pool's with the same rng (recording changes nothing)
    from pe_kit.text.generators.pools import make_paraphrase_pool

    texts, _ = make_paraphrase_pool(RECORDS, 12, FakeLM(), np.random.default_rng([0, 3, 7]), on_shortfall="reassign")
    assert texts == e["texts"]


def test_pool_key_follows_records_seed_size_and_settings():
    spec = PP.pool_spec(FakeLM())
    k = PP.pool_key(RECORDS, 12, [0, 3, 7], spec)
    assert k == _entry()["key"] and len(k) == 64
    assert PP.pool_key(RECORDS[::-1], 12, [0, 3, 7], spec) != k
    assert PP.pool_key(RECORDS, 12, [0, 3, 8], spec) != k
    assert PP.pool_key(RECORDS, 16, [0, 3, 7], spec) != k
    assert PP.pool_key(RECORDS, 12, [0, 3, 7], {**spec, "config": {"style": 2}}) != k
    assert spec["prompt"] == paraphrase_prompt("<record>")


def test_pools_file_round_trip_and_tamper_check(tmp_path):
    path = tmp_path / "pools.jsonl"
    e1, e2 = _entry(), _entry(seed=(1, 3, 7))
    MPP.append_pool(path, e1, canary_id="u1", arm="long")
    MPP.append_pool(path, e2, canary_id="u1", arm="short")
    spec = PP.pool_spec(FakeLM())
    found = PP.find_pool(RECORDS, 12, [0, 3, 7], spec, path=path)
    assert found["texts"] == e1["texts"] and found["canary_id"] == "u1"
    assert PP.find_pool(RECORDS, 12, [2, 3, 7], spec, path=path) is None
    e3 = {**_entry(seed=(5, 3, 7)), "model": "digest-a"}
    MPP.append_pool(path, e3)
    assert PP.find_pool(RECORDS, 12, [5, 3, 7], spec, path=path, model="digest-a")["key"] == e3["key"]
    assert PP.find_pool(RECORDS, 12, [5, 3, 7], spec, path=path, model="digest-b") is None  # another model file
    assert PP.find_pool(RECORDS, 12, [5, 3, 7], spec, path=path, model=None) is not None  # model not installed
    lines = path.read_text().splitlines()
    bad = json.loads(lines[0])
    bad["pool_size"] = 11
    gz = tmp_path / "bad.jsonl.gz"
    with gzip.open(gz, "wt") as fh:
        fh.write(json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match="stored key does not match"):
        PP.load_pools(gz)
    assert PP.load_pools(tmp_path / "absent.jsonl.gz") == {}


def test_cached_generator_without_code_key_and_length_order(tmp_path):
    g = CachedGenerator(FakeLM(), root=tmp_path, with_code=False, sort_by_length=True)
    assert "code" not in g.identity() and "code" in CachedGenerator(FakeLM(), root=tmp_path).identity()
    prompts = [paraphrase_prompt(r) for r in ("a much longer record than the others here", "short one")]
    assert g.generate_seeded(prompts, [1, 2]) == FakeLM().generate_seeded(prompts, [1, 2])  # order kept
    FakeLM.calls = 0
    assert g.generate_seeded(prompts, [1, 2]) == FakeLM().generate_seeded(prompts, [1, 2]) and FakeLM.calls == 2


def _world(seed=0):
    enc = SimpleNamespace(encode=lambda texts, desc=None: np.zeros((len(texts), 3), np.float32))
    return SimpleNamespace(config=SimpleNamespace(seed=seed), encoder=enc)


def test_llm_route_picks_the_stored_pool_without_generating(tmp_path, monkeypatch):
    """generator="smollm2": a stored pool whose key matches (records, M, seed, SmolLM2 settings) is used as is."""
    from pe_kit.study import pools as study

    llm = PP.llm_paraphraser()
    user = SimpleNamespace(user_id="u42", texts=tuple(RECORDS))
    seed = study.paraphrase_pool_seed(0, "u42")
    impostor = FakeLM()  # builds a pool under the LLM's name and settings, so the key is the LLM route's key
    impostor.name, impostor.config = llm.name, llm.config
    entry = PP.build_pool(RECORDS, 12, seed, impostor)
    path = tmp_path / "pools.jsonl"
    MPP.append_pool(path, entry)
    monkeypatch.setattr(PP, "SHIPPED_POOLS_FILE", path)

    def refuse(*a, **k):
        raise AssertionError("the LLM was asked to generate although a stored pool matches")

    monkeypatch.setattr(PP, "build_pool", refuse)
    texts, sources, emb, info = study.paraphrase_pool(_world(), user, 12, generator="smollm2")
    assert texts == entry["texts"] and sources.tolist() == entry["sources"] and emb.shape == (12, 3)
    assert info["pool_source"] == "shipped" and info["pool_key"] == entry["key"]
    assert info["pool_generator"] == llm.name
    texts_auto, _, _, info_auto = study.paraphrase_pool(_world(), user, 12, generator="auto")
    assert texts_auto == entry["texts"] and info_auto["pool_source"] == "shipped"
    with pytest.raises(ValueError, match="unknown"):
        study.paraphrase_pool(_world(), user, 12, generator="gpt")


def test_auto_route_falls_back_to_wordnet_with_a_warning(tmp_path, monkeypatch):
    """generator="auto" never runs the LLM: a canary without a shipped pool gets the WordNet pool, flagged."""
    from pe_kit.study import pools as study
    from pe_kit.text.generators import wordnet

    class RawFake(FakeLM):
        name, raw_text_input = "fake-wordnet", True

        def generate_seeded(self, prompts, seeds):
            return [f"{p} ({int(s) % 997})" for p, s in zip(prompts, seeds)]

    monkeypatch.setattr(PP, "SHIPPED_POOLS_FILE", tmp_path / "absent.jsonl.gz")
    monkeypatch.setattr(wordnet, "WordNetParaphraser", RawFake)
    monkeypatch.setattr(PP, "build_pool", lambda *a, **k: pytest.fail("auto must not generate with the LLM"))
    monkeypatch.setattr(study, "_FALLBACKS_WARNED", set())
    user = SimpleNamespace(user_id="u9", texts=tuple(RECORDS))
    with pytest.warns(UserWarning, match="no shipped SmolLM2 pool"):
        texts, sources, _, info = study.paraphrase_pool(_world(), user, 8, generator="auto")
    assert info["pool_generator"] == "fake-wordnet" and "u9" in info["pool_fallback"] and len(set(texts)) == 8
    # the same canary again (another variant, arm or bank) and another canary of the same data: flagged, no warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again, _, _, info2 = study.paraphrase_pool(_world(), user, 8, generator="auto")
        _, _, _, info3 = study.paraphrase_pool(_world(), SimpleNamespace(user_id="u8", texts=tuple(RECORDS)), 8,
                                               generator="auto")
    assert again == texts and "u9" in info2["pool_fallback"] and "u8" in info3["pool_fallback"]
    assert not [w for w in caught if "no shipped SmolLM2 pool" in str(w.message)]


def test_default_route_matches_shipped_pools():
    """While the default route is not 'wordnet', the shipped pools cover every quick-preset paraphrase canary."""
    from pe_kit.study import pools as study

    assert study.DEFAULT_PARAPHRASER in PP.PARAPHRASERS
    shipped = PP.load_pools()
    if study.DEFAULT_PARAPHRASER == "wordnet":
        return
    spec = PP.pool_spec(PP.llm_paraphraser())
    assert spec == PP.LLM_POOL_SPEC  # the auto route's key, written out so auto never imports the LLM backend
    sweep = PC.sweep_paraphrase_canaries("quick", seed=0)  # notebook 05's Fig. 1 canary: slot 4, short arm
    assert [(arm, vs) for arm, _, _, vs in sweep] == [("short", ["paraphrase-mu_eff"])]
    for arm, cid, recs, _ in PC.paraphrase_canaries("quick", ("long", "short"), seed=0) + sweep:
        assert PP.pool_key(recs, 512, study.paraphrase_pool_seed(0, cid), spec) in shipped, (arm, cid)
        entry = PP.find_pool(recs, 512, study.paraphrase_pool_seed(0, cid), spec)  # sources in range, no verbatim
        assert entry is not None and max(entry["sources"]) < len(recs) and len(set(entry["sources"])) == len(recs)


def test_damaged_pools_file_names_the_file_and_the_fix(tmp_path):
    """A truncated gzip, a file that is not gzip and a cut-off JSON line: ValueError with the path and the fix."""
    good = PP.SHIPPED_POOLS_FILE.read_bytes() if PP.SHIPPED_POOLS_FILE.is_file() else gzip.compress(b"{}\n")
    cases = {"truncated.jsonl.gz": good[: len(good) // 2], "plain.jsonl.gz": b'{"a": 1}\n',
             "cut.jsonl.gz": gzip.compress(b'{"spec": {"generator": "x"}, "pool_se')}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ValueError, match=rf"{name}.*(damaged).*make_paraphrase_pools"):
            PP.load_pools(tmp_path / name)


def test_edited_pool_entries_are_refused(tmp_path):
    """Sources / seeds must be non-negative integers; a matching pool whose sources exceed the records or that holds
    a verbatim record is refused by find_pool."""
    entry = PP.build_pool(RECORDS, 8, [0, 3, 9], FakeLM())
    spec = entry["spec"]
    for field, value in (("sources", -1), ("sources", "3"), ("seeds", "x")):
        bad = json.loads(json.dumps(entry))
        bad[field][0] = value
        with pytest.raises(ValueError, match="integer"):
            PP._check_entry(bad, "edited")
    for change in ({"sources": 999}, {"texts": RECORDS[0]}):
        bad = json.loads(json.dumps(entry))
        (field, value), = change.items()
        bad[field][0] = value
        path = tmp_path / f"{field}.jsonl"
        MPP.append_pool(path, bad)
        with pytest.raises(ValueError, match="edited"):
            PP.find_pool(RECORDS, 8, [0, 3, 9], spec, path=path)


def test_auto_route_imports_no_llm_backend():
    """auto finds a shipped pool by ``LLM_POOL_SPEC`` and falls back to WordNet: no LLM backend is imported."""
    import subprocess
    import sys

    code = ("import sys, types, numpy as np; from pe_kit.study.pools import paraphrase_pool as pp; "
            "enc = types.SimpleNamespace(encode=lambda t, desc=None: np.zeros((len(t), 3), np.float32)); "
            "w = types.SimpleNamespace(config=types.SimpleNamespace(seed=0), encoder=enc); "
            f"pp(w, types.SimpleNamespace(user_id='u1', texts={RECORDS!r}), 8, 'auto'); "
            "print(sorted(m for m in sys.modules if m.endswith(('local_lm', 'openai_chat'))))")
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_auto_route_ignores_the_installed_model_file(monkeypatch):
    """auto only reads shipped text: another installed SmolLM2 file does not push it to WordNet (smollm2 checks it)."""
    from pe_kit.study import pools as study

    shipped = PP.load_pools()
    if not shipped:
        pytest.skip("no shipped pools")
    arm, cid, recs, _ = PC.paraphrase_canaries("quick", ("long",), seed=0)[0]
    monkeypatch.setattr(study, "_installed_model", lambda llm: "sha256:another-model-file")
    user = SimpleNamespace(user_id=cid, texts=tuple(recs))
    texts, _, _, info = study.paraphrase_pool(_world(), user, 512, generator="auto")
    assert info["pool_source"] == "shipped" and "pool_fallback" not in info


def test_a_non_generator_is_refused_by_name():
    from pe_kit.study import pools as study

    for bad in (0, b"auto", False):
        with pytest.raises(ValueError, match="generator=.*neither a route name"):
            study.paraphrase_pool(_world(), SimpleNamespace(user_id="u1", texts=tuple(RECORDS)), 8, generator=bad)


def test_paraphrase_canaries_are_the_audited_ones():
    """Slots 10–24 of the quick preset's canary split (5 each for paraphrase, -norm, -mu_eff; §2), same ids per arm."""
    from pe_kit.study import pools as study
    from steps.designs import canary_slots

    rows = PC.paraphrase_canaries("quick", ("long",), seed=0)
    assert len(rows) == 15 and all(len(r[2]) == 64 for r in rows)
    assert [r[3] for r in rows] == [[v] for v in ("paraphrase", "paraphrase-norm", "paraphrase-mu_eff") for _ in range(5)]
    assert [s for v in ("paraphrase", "paraphrase-norm", "paraphrase-mu_eff") for s in canary_slots(v, 5, 25)] == \
        list(range(10, 25))


_FULL_BLOGS = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared" / "data" / "blogs" / "blogs.jsonl.gz"


@pytest.mark.skipif(not _FULL_BLOGS.is_file(), reason="the full Blog corpus (../shared/data) is not here")
@pytest.mark.parametrize("arm, overrides", [("long", {"n_test": 600, "n_calibration": 600}), ("short", {})])
def test_paraphrase_canaries_of_the_paper_run_are_the_ones_it_audited(arm, overrides):
    """With --data and --set, the listing is the canary draw of that run: the paper run's long part (full corpus,
    N = 600) and short part (N = 1000, the preset's) audited exactly these 15 paraphrase canaries each
    (docs/paper_run/<arm>/results.csv), and a shipped SmolLM2 pool covers each one."""
    import csv
    from pathlib import Path

    from pe_kit.study import pools as study

    rows = PC.paraphrase_canaries("paper", (arm,), seed=0, data=str(_FULL_BLOGS), fmt="blogs",
                                     overrides=overrides)
    listed = {(vs[0], cid) for _, cid, _, vs in rows}
    committed = Path(__file__).resolve().parents[1] / "docs" / "paper_run" / arm / "results.csv"
    audited = {(r["variant"], r["canary_id"]) for r in csv.DictReader(committed.open())
               if r.get("variant", "").startswith("paraphrase") and r.get("canary_id")}
    assert len(listed) == 15 and listed == audited
    assert all(len(recs) == 64 for _, _, recs, _ in rows)
    # and the shipped file holds a SmolLM2 pool for each of them, so route `auto` audits LLM rewrites (no WordNet)
    spec = PP.pool_spec(PP.llm_paraphraser())
    shipped = PP.load_pools()
    missing = [cid for _, cid, recs, _ in rows
               if PP.pool_key(recs, 512, study.paraphrase_pool_seed(0, cid), spec) not in shipped]
    assert not missing, f"no shipped SmolLM2 pool for the paper run's {arm}-arm canaries {missing}"


@pytest.mark.skipif(not _FULL_BLOGS.is_file(), reason="the full Blog corpus (../shared/data) is not here")
def test_sweep_canary_of_the_paper_run_is_the_one_it_audited():
    """Notebook 05's Fig. 1 sweeps audit one canary per variant (slot i of the variant order): the paper run's part
    `checks` (short arm, N = 1000) audited paraphrase-mu_eff on canary 3632402, an ordinary slot of notebook 04
    (docs/paper_run/checks/results.csv), and a shipped SmolLM2 pool covers it."""
    import csv
    from pathlib import Path

    from pe_kit.study import pools as study
    from steps.designs import canary_slots

    rows = PC.sweep_paraphrase_canaries("paper", seed=0, data=str(_FULL_BLOGS), fmt="blogs")
    assert [(arm, cid, vs) for arm, cid, _, vs in rows] == [("short", "3632402", ["paraphrase-mu_eff"])]
    assert canary_slots("paraphrase-mu_eff", 1, 25) == [4] and 4 in canary_slots("ordinary", 5, 25)
    committed = Path(__file__).resolve().parents[1] / "docs" / "paper_run" / "checks" / "results.csv"
    audited = {r["canary_id"] for r in csv.DictReader(committed.open())
               if r["notebook"] == "05_ablations" and r["variant"] == "paraphrase-mu_eff"}
    assert audited == {"3632402"}
    recs = rows[0][2]
    key = PP.pool_key(recs, 512, study.paraphrase_pool_seed(0, "3632402"), PP.pool_spec(PP.llm_paraphraser()))
    assert key in PP.load_pools(), "no shipped SmolLM2 pool for the paper run's Fig. 1 paraphrase-mu_eff canary"


@pytest.mark.slow
@pytest.mark.skipif(not PP.SHIPPED_POOLS_FILE.is_file() or importlib.util.find_spec("transformers") is None,
                    reason="no shipped pools or no transformers")
def test_shipped_pools_are_what_the_generator_makes():
    """Recompute a few entries of the shipped SmolLM2 pools from their (record, seed): the same texts."""
    from pe_kit.data.loaders import load_corpus
    from pe_kit.data.splits import make_arm
    from pe_kit.text.generators.base import GenerationError

    llm = PP.llm_paraphraser()
    try:
        model = llm.identity()
    except GenerationError as exc:
        pytest.skip(f"SmolLM2 not installed: {exc}")
    # the bundled sample's pools (quick preset), and the full corpus's (paper run) when that corpus is here
    by_data = {}
    for entry in PP.load_pools().values():
        by_data.setdefault(entry.get("data", "bundled blogs-900"), []).append(entry)
    assert "bundled blogs-900" in by_data
    corpora = {"bundled blogs-900": lambda: load_corpus(None, "auto", record_cap=64)}
    if _FULL_BLOGS.is_file():
        corpora[_FULL_BLOGS.name] = lambda: load_corpus(_FULL_BLOGS, "blogs", record_cap=64)
    rng = np.random.default_rng(0)
    checked = 0
    for data, pools in by_data.items():
        if data not in corpora:
            continue
        corpus = corpora[data]()
        for entry in [pools[i] for i in rng.choice(len(pools), size=min(2 if checked == 0 else 1, len(pools)),
                                                     replace=False)]:
            assert entry["spec"] == PP.pool_spec(llm) and entry["model"] == model
            user = make_arm(corpus, entry["arm"], 64).by_id()[entry["canary_id"]]
            idx = rng.choice(len(entry["texts"]), size=2, replace=False)
            assert recompute_entries(entry, user.texts, llm, idx) == [entry["texts"][j] for j in idx]
            checked += len(idx)
    assert checked >= 2


def test_paraphrase_examples_show_the_shipped_llm_rewrite_beside_the_probe(tmp_path, monkeypatch):
    """Notebook 02's table: source record, the design's probe, and the same record's shipped SmolLM2 rewrite."""
    from steps import designs
    from pe_kit.study import pools as study

    llm = PP.llm_paraphraser()
    seed = study.paraphrase_pool_seed(0, "u7")
    impostor = FakeLM()
    impostor.name, impostor.config = llm.name, llm.config
    entry = PP.build_pool(RECORDS, 8, seed, impostor)
    path = tmp_path / "pools.jsonl"
    MPP.append_pool(path, entry)
    design = SimpleNamespace(variant="paraphrase", canary_id="u7", canary_texts=tuple(RECORDS),
                             probe_texts=("p2", "p0", "p1"),
                             info={"probe_sources": [2, 0, 1], "pool_size": 8, "pool_generator": "wordnet-v1"})
    monkeypatch.setattr(PP, "SHIPPED_POOLS_FILE", tmp_path / "absent.jsonl.gz")
    assert designs.paraphrase_examples(design, 3, world=_world())["smollm2"].tolist() == ["", "", ""]
    monkeypatch.setattr(PP, "SHIPPED_POOLS_FILE", path)
    ex = designs.paraphrase_examples(design, 3, world=_world())
    assert ex["record"].tolist() == [2, 0, 1] and ex["paraphrase"].tolist() == ["p2", "p0", "p1"]
    assert ex["smollm2"].tolist() == [entry["texts"][2], entry["texts"][0], entry["texts"][1]]
    assert "smollm2" not in designs.paraphrase_examples(design, 3).columns


@pytest.mark.slow
def test_llm_pool_entries_regenerate_one_at_a_time():
    """SmolLM2 pool built in batches; every entry comes back from its own (record, seed) alone (batch 1)."""
    from pe_kit.text.generators.base import GenerationError

    llm = PP.llm_paraphraser(batch_size=8)
    try:
        llm.identity()
    except GenerationError as exc:
        pytest.skip(f"SmolLM2 not installed: {exc}")
    llm.max_new_tokens = 24  # short records, short rewrites: seconds on CPU
    entry = PP.build_pool(RECORDS[:2], 4, [0, 3, 1], llm)
    assert entry["sources"] == [0, 1, 0, 1] and entry["model"] == llm.identity()
    one = PP.llm_paraphraser(batch_size=1)
    one.max_new_tokens = 24
    assert recompute_entries(entry, RECORDS[:2], one, [0, 3]) == [entry["texts"][0], entry["texts"][3]]


def test_try_design_hands_the_paraphrase_route_to_make_design(monkeypatch):
    """``try_design(..., generator=...)`` (used by benchmarks/fidelity_mu_eff.py --paraphraser) reaches make_design;
    without it make_design gets no generator and uses DEFAULT_PARAPHRASER."""
    from steps import designs

    calls = []
    monkeypatch.setattr(designs, "make_design", lambda *a, **k: calls.append(k) or "design")
    assert designs.try_design(None, "paraphrase-mu_eff", 0, 20, 0, pool_size=8, generator="smollm2") == ("design", None)
    assert designs.try_design(None, "paraphrase-mu_eff", 0, 20, 0) == ("design", None)
    assert calls[0] == {"pool_size": 8, "generator": "smollm2"} and "generator" not in calls[1]


def test_canary_listings_refuse_names_without_a_pool():
    """Only paraphrase variants have pools; a misspelt sweep variant is refused by name, as notebook 05 refuses it."""
    from pe_kit.study import pools as study

    with pytest.raises(ValueError, match=r"variants=\['exact'\] have no paraphrase pool"):
        PC.paraphrase_canaries("quick", ("short",), ("paraphrase-mu_eff", "exact"))
    with pytest.raises(ValueError, match=r"sweep_variants\[1\]='paraphrase-mueff' is not accepted: use one of"):
        PC.sweep_paraphrase_canaries("quick", overrides={"sweep_variants": ("ordinary", "paraphrase-mueff")})
    # a comma-separated string names the same variants as the tuple; repeats count once
    a = PC.sweep_paraphrase_canaries("quick", overrides={"sweep_variants": "nonce,paraphrase-mu_eff,paraphrase-mu_eff"})
    b = PC.sweep_paraphrase_canaries("quick")
    assert [(arm, cid, vs) for arm, cid, _, vs in a] == [(arm, cid, vs) for arm, cid, _, vs in b]
    assert PC.sweep_paraphrase_canaries("quick", overrides={"sweep_variants": ("ordinary", "nonce")}) == []


def test_paraphrase_canaries_cover_a_bank_b_world_that_draws_other_canaries(tmp_path, monkeypatch):
    """A shipped bank B keeps its example authors out of the private splits, so a bank-B world may draw other
    canaries than a bank-A one: the listing then holds the canaries of both draws (each variant once per canary)."""
    import gzip
    import json

    from pe_kit.data import loaders

    base = PC.paraphrase_canaries("quick", ("long",), seed=0)
    taken = base[0][1]                                  # reserve the first paraphrase canary of the bank-A world
    path = tmp_path / "bankB.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"text": "t", "examples": [[taken, 0]]}) + "\n")
    monkeypatch.setattr(loaders, "default_bank_b_path", lambda partial=False: path)
    both = PC.paraphrase_canaries("quick", ("long",), seed=0, overrides={"banks": ["bankA", "bankB"]})
    ids = [cid for _, cid, _, _ in both]
    assert ids[:15] == [cid for _, cid, _, _ in base] and len(ids) == len(set(ids)) > 15
    assert all(vs == list(dict.fromkeys(vs)) for *_, vs in both)
    only_b = PC.paraphrase_canaries("quick", ("long",), seed=0, overrides={"banks": ["bankB"], "bank": "bankB"})
    assert taken not in {cid for _, cid, _, _ in only_b}
