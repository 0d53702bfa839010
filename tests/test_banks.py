"""Candidate banks (§3, App. C): public (label-stratified, disjoint), bundled bank A, file, llm-label, llm-icl."""
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pe_kit.cache import content_hash
from pe_kit.data.loaders import load_bank_texts, load_blogs
from pe_kit.data.splits import split_users
from pe_kit.text.banks import allocate, label_mix, make_bank, public_bank

from .conftest import TINY_DATA


class FakeGenerator:
    """Fast deterministic stand-in for an LLM: output = hash of (prompt, seed); records every prompt."""

    name = "fake-llm-v1"
    batch_size = 64

    def __init__(self):
        self.prompts = []

    def config(self):
        return {"kind": "fake"}

    def generate(self, prompts, rng):
        seeds = rng.integers(0, 2**31 - 1, size=len(prompts))
        self.prompts.extend(prompts)
        return [f"generated post {content_hash(p, int(s))[:16]}" for p, s in zip(prompts, seeds)]


@pytest.fixture(scope="module")
def corpus_splits():
    corpus = load_blogs(TINY_DATA, record_cap=16, min_records=16)
    return corpus, split_users(corpus, 5, 5, 5, 5, seed=0, canary_records=16)


def _private_texts(corpus, splits):
    by_id = corpus.by_id()
    return {t for name in ("canary", "aux", "calibration", "test") for u in getattr(splits, name) for t in by_id[u].texts}


def test_allocate_closed_forms():
    assert allocate({"a": 50, "b": 30, "c": 20}, 10) == {"a": 5, "b": 3, "c": 2}
    # shares 3.5 / 2.1 / 1.4 → floors 3,2,1 and the one remaining slot to the largest remainder (a)
    assert allocate({"a": 50, "b": 30, "c": 20}, 7) == {"a": 4, "b": 2, "c": 1}
    # capped label passes its excess on: b has only 1 item
    assert allocate({"a": 10, "b": 1, "c": 10}, 9) == {"a": 4, "b": 1, "c": 4}
    assert allocate({"a": 3, "b": 0}, 3) == {"a": 3, "b": 0}
    with pytest.raises(ValueError, match="cannot allocate"):
        allocate({"a": 2}, 3)


def test_label_mix_is_proportional(corpus_splits):
    corpus, _ = corpus_splits
    labels, counts = label_mix(corpus.users, 100)
    share = Counter()
    for u in corpus.users:
        share[u.label] += len(u.texts)
    total = sum(share.values())
    assert len(labels) == 100 and Counter(labels) == Counter(counts) and sum(counts.values()) == 100
    for lab, n in counts.items():
        assert abs(n - 100 * share[lab] / total) < 1  # largest remainder: within one slot of the exact share


def test_public_bank_is_stratified_and_disjoint(corpus_splits):
    corpus, splits = corpus_splits
    bank = public_bank(corpus, splits, 256, np.random.default_rng(0))
    by_id = corpus.by_id()
    public_texts = {t for u in splits.public for t in by_id[u].texts}
    assert len(bank) == 256 and len(set(bank.texts)) == 256
    assert set(bank.texts) <= public_texts and not set(bank.texts) & _private_texts(corpus, splits)
    available = Counter()
    seen = set()
    for uid in splits.public:
        for t in by_id[uid].texts:
            if t not in seen:
                seen.add(t)
                available[by_id[uid].label] += 1
    assert Counter(bank.labels) == Counter({k: v for k, v in allocate(dict(available), 256).items() if v})
    assert bank.info["kind"] == "public" and bank.info["label_counts"] == dict(Counter(bank.labels))
    again = public_bank(corpus, splits, 256, np.random.default_rng(0))
    assert again.texts == bank.texts
    with pytest.raises(ValueError, match="lower bank_size"):
        public_bank(corpus, splits, len(public_texts) + 1, np.random.default_rng(0))


def test_bank_a_matches_the_previous_study_draw(tiny_world):
    """make_bank('bankA') reproduces the study's earlier sampling (seed [seed, 1]) exactly."""
    texts, _ = load_bank_texts(None)
    chosen = np.sort(np.random.default_rng([0, 1]).choice(len(texts), size=1024, replace=False))
    bank = make_bank("bankA", 1024, np.random.default_rng([0, 1]))
    assert list(bank.texts) == [texts[i] for i in chosen] == tiny_world.bank_texts
    assert bank.info["kind"] == "bankA" and tiny_world.bank_info["bank_size"] == 1024


def test_file_bank(tmp_path):
    path = tmp_path / "bank.jsonl"
    path.write_text("\n".join(json.dumps({"text": f"candidate number {i}"}) for i in range(20)) + "\n"
                    + json.dumps({"text": "candidate number 3"}) + "\n")
    bank = make_bank(f"file:{path}", 12, np.random.default_rng(4))
    assert len(set(bank.texts)) == 12 and bank.info["kind"] == "file" and bank.info["available"] == 20
    assert bank.info["duplicates_removed"] == 1
    assert make_bank(str(path), 12, np.random.default_rng(4)).texts == bank.texts
    with pytest.raises(ValueError, match="lower bank_size"):
        make_bank(f"file:{path}", 21, np.random.default_rng(4))
    with pytest.raises(ValueError, match="neither a known kind"):
        make_bank("bankZ", 10, np.random.default_rng(0))


def test_llm_label_bank_sees_only_labels(corpus_splits, tmp_path, monkeypatch):
    monkeypatch.setenv("PE_KIT_CACHE", str(tmp_path))
    corpus, splits = corpus_splits
    gen = FakeGenerator()
    bank = make_bank("llm-label", 64, np.random.default_rng(1), corpus=corpus, splits=splits, generator=gen)
    by_id = corpus.by_id()
    labels, counts = label_mix([by_id[u] for u in splits.public + splits.aux], 64)
    assert list(bank.labels) == labels and bank.info["label_counts"] == counts
    assert len(set(bank.texts)) == 64 and bank.info["generator"] == "fake-llm-v1"
    assert len(gen.prompts) == 64
    all_records = {t for u in corpus.users for t in u.texts}
    for prompt, lab in zip(gen.prompts, labels):
        assert lab in prompt and not any(t in prompt for t in all_records)
    # cached: the same seed asks the generator for nothing new
    gen2 = FakeGenerator()
    again = make_bank("llm-label", 64, np.random.default_rng(1), corpus=corpus, splits=splits, generator=gen2)
    assert again.texts == bank.texts and gen2.prompts == []


def test_llm_icl_bank_shows_three_public_examples(corpus_splits, tmp_path, monkeypatch):
    monkeypatch.setenv("PE_KIT_CACHE", str(tmp_path))
    corpus, splits = corpus_splits
    gen = FakeGenerator()
    bank = make_bank("llm-icl", 40, np.random.default_rng(2), corpus=corpus, splits=splits, generator=gen)
    by_id = corpus.by_id()
    public = {t: by_id[u].label for u in splits.public for t in by_id[u].texts}
    private = _private_texts(corpus, splits)
    assert len(bank) == 40 and bank.info["examples_per_prompt"] == 3 and bank.info["copied_examples"] == 0
    for prompt, lab in zip(gen.prompts, bank.labels):
        shown = [m.group(1) for m in re.finditer(r"^\d+\. (.*)$", prompt, flags=re.M)]
        assert len(shown) == 3 and all(t in public for t in shown)  # three public records, verbatim
        assert not set(shown) & (private - set(public))
        if sum(v == lab for v in public.values()) >= 3:
            assert all(public[t] == lab for t in shown)
    with pytest.raises(ValueError, match="needs corpus and splits"):
        make_bank("llm-icl", 4, np.random.default_rng(0), generator=gen)


def _bank_b_file(tmp_path, corpus, splits, n=12):
    """A stand-in bank-B file whose examples come from two public users and one aux user."""
    by_id = corpus.by_id()
    authors = [splits.public[0], splits.aux[0], splits.public[1]]
    rows = [{"text": f"bank b text {j}", "label": by_id[authors[0]].label, "shard": 0, "row": j,
             "examples": [[a, 0] for a in authors]} for j in range(n)]
    path = tmp_path / "blogs-bankB-smollm2.jsonl.gz"
    import gzip

    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    return path, set(authors)


def test_bank_b_refused_until_shipped_and_its_authors_kept_out_of_private_splits(corpus_splits, tmp_path,
                                                                                monkeypatch):
    from pe_kit.data import loaders
    from pe_kit.study.world import StudyConfig, bank_reserved_users, study_splits

    corpus, splits = corpus_splits
    monkeypatch.setattr(loaders, "default_bank_b_path",
                        lambda partial=False: tmp_path / ("part.jsonl.gz" if partial else "absent.jsonl.gz"))
    with pytest.raises(ValueError, match="not shipped yet.*make_bank_b.py.*bankA"):
        make_bank("bankB", 8, np.random.default_rng(0))
    cfg = StudyConfig(data=str(TINY_DATA), bank="bankB", record_cap=16, n_canary=5, n_aux=5, n_calibration=5,
                      n_test=5, bank_size=8, max_probes=4)
    assert bank_reserved_users(cfg.bank) == frozenset()           # nothing shipped: nothing to reserve
    path, authors = _bank_b_file(tmp_path, corpus, splits)
    monkeypatch.setattr(loaders, "default_bank_b_path", lambda partial=False: path)
    bank = make_bank("bankB", 8, np.random.default_rng(0))
    assert len(bank) == 8 and bank.info["kind"] == "bankB" and bank.info["example_authors"] == 3
    assert set(bank.texts) <= {f"bank b text {j}" for j in range(12)}
    assert bank_reserved_users(cfg.bank) == authors
    s = study_splits(cfg, corpus)
    private = set(s.canary) | set(s.aux) | set(s.calibration) | set(s.test)
    assert not authors & private and s.report() == splits.report()
    # a bankA world of the same study is not touched by bank B
    assert study_splits(StudyConfig(**{**cfg.as_dict(), "bank": "bankA"}), corpus) == splits


@pytest.mark.parametrize("examples, match", [
    (["u1", "u2"], "not a \\[user id, record index\\] pair"),     # strings would reserve their characters
    ({"u1": 0}, "not a non-empty list"),
    ([[None, 0]], "user id must be a non-empty string"),
    ([["", 0]], "user id must be a non-empty string"),
    ([[["u1"], 0]], "user id must be a non-empty string"),
    ([["u1", 0, 9]], "not a \\[user id, record index\\] pair"),
    ([["u1", "0"]], "record index an integer"),
    (None, "missing field 'examples'"),
    (5, "not a non-empty list"),
    ([], "not a non-empty list"),
])
def test_bank_b_authors_rejects_malformed_examples_naming_file_and_line(tmp_path, examples, match):
    from pe_kit.data.loaders import DataError, bank_b_authors

    path = tmp_path / "b.jsonl"
    good = {"text": "a", "examples": [["u9", 0], [7, 1]]}
    bad = {"text": "b"} if examples is None else {"text": "b", "examples": examples}
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(DataError, match=f"b.jsonl: line 2: .*{match}") as ei:
        bank_b_authors(path)
    assert "on_error" not in str(ei.value)          # skipping a line would un-reserve its authors: never offered
    path.write_text(json.dumps(good) + "\n")
    assert bank_b_authors(path) == frozenset({"u9", "7"})


def test_bank_b_authors_empty_missing_folder_and_plain_gz(tmp_path):
    from pe_kit.data.loaders import DataError, bank_b_authors

    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DataError, match="no rows"):
        bank_b_authors(tmp_path / "empty.jsonl")
    with pytest.raises(FileNotFoundError, match="bank-B file .* does not exist.*make_bank_b.py"):
        bank_b_authors(tmp_path / "absent.jsonl.gz")
    with pytest.raises(IsADirectoryError, match="is a folder.*bank-B file"):
        bank_b_authors(tmp_path)
    (tmp_path / "plain.jsonl.gz").write_text('{"text": "a", "examples": [["u", 0]]}\n')
    with pytest.raises(DataError, match="not gzip data.*rename it without .gz"):
        bank_b_authors(tmp_path / "plain.jsonl.gz")


def test_bank_b_refusal_survives_an_unreadable_partial_file(tmp_path, monkeypatch):
    from pe_kit.data import loaders
    from pe_kit.text.banks import bank_b_missing_message

    part = tmp_path / "part.jsonl.gz"
    import gzip

    with gzip.open(part, "wt") as f:
        f.write('{"text": "a"}\n{bad\n')
    monkeypatch.setattr(loaders, "default_bank_b_path",
                        lambda partial=False: part if partial else tmp_path / "absent.jsonl.gz")
    msg = bank_b_missing_message()
    assert "not shipped yet" in msg and "unreadable" in msg and "make_bank_b.py" in msg
    with gzip.open(part, "wt") as f:
        f.write('{"text": "a"}\n{"text": "b"}\n')
    assert "(2 of 8,192 texts are committed in part.jsonl.gz)" in bank_b_missing_message()


def test_build_world_refuses_bank_b_before_reading_the_corpus(tmp_path, monkeypatch):
    from pe_kit.data import loaders
    from pe_kit.study import world as world_mod

    monkeypatch.setattr(loaders, "default_bank_b_path",
                        lambda partial=False: tmp_path / ("part.jsonl.gz" if partial else "absent.jsonl.gz"))
    monkeypatch.setattr(world_mod, "cached_corpus", lambda *a, **k: pytest.fail("read the corpus before refusing"))
    cfg = world_mod.StudyConfig(data=str(TINY_DATA), bank="bankB", record_cap=16, n_canary=5, n_aux=5,
                                n_calibration=5, n_test=5, bank_size=8, max_probes=4)
    with pytest.raises(ValueError, match="bankB.*not shipped yet"):
        world_mod.build_world(cfg, encoder=object())
    with pytest.raises(ValueError, match="bankB.*not shipped yet"):
        world_mod.input_digests(cfg)


_FULL = Path(__file__).resolve().parents[2] / "shared" / "data" / "blogs" / "blogs.jsonl.gz"


@pytest.mark.skipif(not _FULL.is_file(), reason="the full Blog corpus (../shared/data) is not here")
def test_bank_b_authors_leave_the_paper_parts_splits_unchanged():
    """scripts/make_bank_b.py draws its 128 example authors from the public split of the paper preset's short arm at
    seed 0, so reserving them (a bank-B world) keeps the canary, aux, calibration and test users of parts long
    (N = 600) and short (N = 1000): the bank-B rows of Table 4 audit the same canaries as the bank-A rows."""
    import importlib.util

    from pe_kit.data.loaders import load_corpus
    from pe_kit.data.splits import make_arm, split_users
    from pe_kit.run.presets import get_preset

    spec = importlib.util.spec_from_file_location("make_bank_b", Path(__file__).resolve().parents[1] / "scripts" /
                                                  "make_bank_b.py")
    mbb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mbb)
    corpus = load_corpus(str(_FULL), "blogs", record_cap=64)
    authors, items = mbb.public_examples(corpus, mbb.author_pool(corpus, str(_FULL)), 128, 300,
                                         np.random.default_rng([0, 0]))
    assert len(set(authors)) == 128 and len(items) > 3 * 128
    from pe_kit.data.loaders import bank_b_authors, default_bank_b_path

    if default_bank_b_path().is_file():  # the shipped file's example authors are exactly these
        assert set(map(str, authors)) == set(bank_b_authors())
    P = get_preset("paper", None, str(_FULL), "blogs")
    for arm, n in (("long", 600), ("short", P.n_test)):
        users = make_arm(corpus, arm, P.record_cap)
        plain = split_users(users, P.n_canary, P.n_aux, n, n, seed=0, canary_records=P.record_cap)
        assert split_users(users, P.n_canary, P.n_aux, n, n, seed=0, canary_records=P.record_cap,
                           reserved=authors) == plain
        assert not set(authors) & (set(plain.canary) | set(plain.aux) | set(plain.calibration) | set(plain.test))


def _make_bank_b_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_bank_b", Path(__file__).resolve().parents[1] / "scripts" /
                                                  "make_bank_b.py")
    mbb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mbb)
    return mbb


def test_make_bank_b_redraws_rows_that_repeat_an_earlier_rows_text():
    """Shards keep their own texts distinct, not texts of different shards, so the ship step asks a repeated row
    again with its own prompt (rebuilt from its stored examples) until its text is new: bank_b(8192) then has 8,192
    distinct candidates, as bank A has. The first occurrence keeps its text; the seed is [seed, 2, row]."""
    from pe_kit.text.generators.prompts import bank_b_prompt

    mbb = _make_bank_b_script()
    items = [("Arts", "u1", 0, "first post"), ("Arts", "u2", 4, "second post"), ("Arts", "u3", 1, "third post")]
    ex = [["u1", 0], ["u2", 4], ["u3", 1]]
    rows = {j: {"row": j, "label": "Arts", "examples": ex, "text": t}
            for j, t in enumerate(["No.", "a post", "No. ", "a  post", "other"])}

    class Gen:
        prompts, rngs = [], []
        answers = iter(["a post", "2. fresh text", "another fresh text"])   # the first redraw repeats row 1

        def generate(self, prompts, rng):
            self.prompts += prompts
            self.rngs.append(rng.bit_generator.state)
            return [next(self.answers)]

    gen = Gen()
    assert mbb.redraw_duplicates(rows, items, gen, seed=0) == [2, 3]
    assert [rows[j]["text"] for j in range(5)] == ["No.", "a post", "fresh text", "another fresh text", "other"]
    assert rows[2]["duplicate_of"] == "No. " and rows[2]["redrawn"] == [0, 2, 2] and "redrawn" not in rows[0]
    assert set(gen.prompts) == {bank_b_prompt("Arts", ["first post", "second post", "third post"])}
    assert gen.rngs[0] == np.random.default_rng([0, 2, 2]).bit_generator.state      # row 2's own seed
    assert gen.rngs[2] == np.random.default_rng([0, 2, 3]).bit_generator.state      # row 3's, not row 2's stream
    with pytest.raises(RuntimeError, match="row 1: 2 generations"):
        Gen.answers = iter(["x", "x"])
        mbb.redraw_duplicates({0: {**rows[0], "text": "x"}, 1: {**rows[1], "text": "x"}}, items, Gen(), 0, attempts=2)


def test_a_bank_b_file_reserves_its_authors_by_any_name(tmp_path):
    """Bank B passed as a path (file:…, bare, a copy elsewhere) reserves the same example authors as ``bankB``; a
    plain bank file and the built-in kinds reserve none."""
    import shutil

    from pe_kit.data.loaders import default_bank_b_path
    from pe_kit.study.world import bank_reserved_users

    shipped = default_bank_b_path()
    if not shipped.is_file():
        pytest.skip("bank B is not shipped in this checkout")
    want = bank_reserved_users("bankB")
    assert len(want) == 128
    copy = tmp_path / "mine.jsonl.gz"
    shutil.copy(shipped, copy)
    for spelling in (f"file:{shipped}", str(shipped), str(copy), f"file:{copy}"):
        assert bank_reserved_users(spelling) == want, spelling
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"text": "a post"}\n')
    for spelling in (str(plain), f"file:{plain}", "bankA", "public", str(tmp_path / "missing.jsonl")):
        assert bank_reserved_users(spelling) == frozenset(), spelling
