"""Big corpora (issue 32, item 5): two streaming passes whose memory is what they keep, the selection stored by
content and read by every notebook, the file parsed once per run. Files here are a few thousand lines; the
1 M-review figures come from benchmarks/bench_big_corpus.py."""
from __future__ import annotations

import json
import shutil
import sys
import tracemalloc
from collections import Counter

import numpy as np
import pytest

from pe_kit.data.loaders import load_blogs, load_corpus, load_yelp

from .conftest import TINY_DATA


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PE_KIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PE_KIT_PROGRESS", "off")
    return tmp_path / "cache"


def _parse_log() -> list[str]:
    """The lines of ``cache_dir()/corpora/parses.log``: one per pass made over a data file, in any process."""
    from pe_kit.cache import cache_dir

    path = cache_dir() / "corpora" / "parses.log"
    return path.read_text(encoding="utf-8").splitlines() if path.is_file() else []


def _yelp(path, heavy=20, light=1700, seed=0):
    """``heavy`` users × 64 reviews of ~150 chars spread over the file, ``light`` one-review users of 4,000 chars."""
    rng = np.random.default_rng(seed)
    rows = [{"user_id": f"heavy{u:03d}", "text": f"review {i} of heavy {u} " + "good food " * 13, "stars": 1 + i % 5}
            for u in range(heavy) for i in range(64)]
    rows += [{"user_id": f"light{u:05d}", "text": "long one-off review " * 200, "stars": 3} for u in range(light)]
    order = rng.permutation(len(rows))
    path.write_text("".join(json.dumps(rows[i]) + "\n" for i in order))
    return path


def _kept_bytes(corpus) -> int:
    return sum(sys.getsizeof(t) for u in corpus.users for t in u.texts) + sum(
        sys.getsizeof(u.texts) + sys.getsizeof(u.user_id) + sys.getsizeof(u) for u in corpus.users)


def test_loader_memory_is_bounded_by_the_records_it_keeps(tmp_path, monkeypatch):
    monkeypatch.setenv("PE_KIT_PROGRESS", "off")
    p = _yelp(tmp_path / "yelp.json")  # 2,980 lines; 1,700 × 4 kB of texts belong to users nobody keeps
    tracemalloc.start()
    c = load_yelp(p, record_cap=64)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    kept = _kept_bytes(c)
    assert len(c.users) == 20 and c.report()["records"] == 1280 and c.skipped["user_too_few_records"] == 1700
    assert kept < 400_000
    # was ≥ 7 MB (every user's first m texts held until the end of the file); now the kept records, one count per
    # user id and one line at a time
    assert peak <= 2 * kept + 300_000, (peak, kept)


def _reference(rows, cap, lo, hi, max_users):
    """The old in-memory grouping: every user's first ``cap`` non-empty texts, then the user rules."""
    texts, labels, skipped, removed = {}, {}, Counter(), Counter()
    for uid, text, label in rows:
        text = " ".join(text.split())
        if not text:
            skipped["empty_text"] += 1
            removed["empty_text"] += 1
            continue
        b = texts.setdefault(uid, [])
        labels.setdefault(uid, label)
        if len(b) < cap:
            b.append(text)
        else:
            skipped["over_record_cap"] += 1
            removed["over_record_cap"] += 1
    users = []
    for uid, recs in texts.items():
        rule = ("user_beyond_max_users" if max_users is not None and len(users) >= max_users else
                "user_too_few_records" if len(recs) < lo else "user_too_many_records" if len(recs) > hi else None)
        if rule:
            skipped[rule] += 1
            removed[rule] += len(recs)
        else:
            users.append((uid, tuple(recs), labels[uid]))
    return users, +skipped, +removed


@pytest.mark.parametrize("cap,lo,hi,max_users", [(8, 8, None, None), (8, 3, 6, None), (4, 1, None, 5), (16, 2, None, 3)])
def test_two_passes_equal_grouping_everything_in_memory(tmp_path, monkeypatch, cap, lo, hi, max_users):
    monkeypatch.setenv("PE_KIT_PROGRESS", "off")
    rng = np.random.default_rng(7)
    rows = [(f"u{int(rng.integers(40))}", " " if rng.random() < 0.05 else f"t{i}  x", str(int(rng.integers(1, 6))))
            for i in range(1500)]
    p = tmp_path / "yelp.json"
    p.write_text("".join(json.dumps({"user_id": u, "text": t, "stars": s}) + "\n" for u, t, s in rows) + "{bad\n")
    c = load_yelp(p, record_cap=cap, min_records=lo, max_records=hi, max_users=max_users, on_error="skip")
    users, skipped, removed = _reference(rows, cap, lo, hi if hi is not None else cap, max_users)
    assert [(u.user_id, u.texts, u.label) for u in c.users] == users
    assert c.skipped == skipped + Counter(malformed_line=1) and c.removed == removed + Counter(malformed_line=1)
    assert c.report()["records"] + c.report()["records_removed_total"] == 1501


def test_cached_corpus_parses_once_and_is_verified(tmp_path, fresh_cache):
    from pe_kit.data import corpus_cache
    from pe_kit.data.passes import PASSES

    p = _yelp(tmp_path / "yelp.json", heavy=6, light=200)
    key = str(p.resolve())
    first = corpus_cache.cached_corpus(p, "yelp", record_cap=64)
    assert PASSES[key] == 2 and len(_parse_log()) == 2  # pass 1 + pass 2, logged
    again = corpus_cache.cached_corpus(str(p), "auto", record_cap=64, min_records=64)  # same selection, spelled out
    assert PASSES[key] == 2 and len(_parse_log()) == 2  # read from the cache, the file not opened
    direct = load_yelp(p, record_cap=64)
    for c in (first, again):
        assert [(u.user_id, u.texts, u.label) for u in c.users] == [(u.user_id, u.texts, u.label) for u in direct.users]
        assert c.report() == direct.report()
    corpus_cache.cached_corpus(p, "yelp", record_cap=8)  # another cap: pass 1 is reused, only pass 2 runs
    assert PASSES[key] == 5 and "pass 2/2" in _parse_log()[-1]
    stored = sorted((fresh_cache / "corpora").glob("*.corpus.jsonl.gz"))
    for f in stored:  # corrupt every stored selection: detected by its SHA-256, recomputed, same result
        f.write_bytes(f.read_bytes()[:-3] + b"xyz")
    assert corpus_cache.cached_corpus(p, "yelp", record_cap=64).report() == direct.report()
    assert PASSES[key] == 6
    p.write_text(p.read_text().replace("heavy000", "heavyXYZ"))  # new bytes: new key, parsed again
    assert corpus_cache.cached_corpus(p, "yelp", record_cap=64).users[0].user_id in {u.user_id for u in
                                                                                      load_yelp(p).users}
    assert PASSES[key] == 8 + 2  # the direct load_yelp above made two passes


def test_data_profile_reads_counts_only(tmp_path, fresh_cache):
    from pe_kit.data.corpus_cache import run_isolated
    from pe_kit.run.fit import data_profile

    p = _yelp(tmp_path / "yelp.json", heavy=6, light=50)
    prof = data_profile(str(p), "yelp", 64)
    assert sorted(prof.records.tolist()) == [1] * 50 + [64] * 6
    assert np.array_equal(data_profile(str(p), "yelp", 64, isolated=True).records, prof.records)
    with pytest.raises(FileNotFoundError, match="does not exist"):  # the child's error, re-raised by its type
        run_isolated("profile", data=str(tmp_path / "nope.json"), fmt="yelp", record_cap=64)


def test_reproduce_parses_once_before_the_notebooks(tmp_path, fresh_cache):
    """``pe-kit reproduce``'s data step: pass 1 and pass 2 in child processes, logged once each; the selection a
    notebook's build_world asks for is then read from the cache in the notebook's process, the file untouched."""
    from pe_kit.data import corpus_cache
    from pe_kit.data.passes import PASSES
    from pe_kit.run.presets import get_preset
    from pe_kit.run.reproduce import _fit

    data = shutil.copy(TINY_DATA, tmp_path / "own-blogs.jsonl.gz")
    p = get_preset("tiny", data=str(data), fmt="blogs")
    lines: list[str] = []
    p2, _note, _warn = _fit(p, {}, False, lines.append, ["01_mechanism"])
    log = _parse_log()
    assert [x.split()[2:4] for x in log] == [["pass", "1/2"], ["pass", "2/2"]]
    assert any("stored by content" in x for x in lines)
    c = corpus_cache.cached_corpus(p2.data, p2.fmt, record_cap=p2.record_cap, on_error=p2.on_error)  # = build_world's
    assert PASSES[str(data.resolve())] == 0 and _parse_log() == log
    ref = load_corpus(str(data), "blogs", record_cap=p2.record_cap)
    assert [u.texts for u in c.users] == [u.texts for u in ref.users] and len(c.users) == 80


def test_blog_loader_unchanged_on_the_bundled_sample(monkeypatch):
    monkeypatch.setenv("PE_KIT_PROGRESS", "off")
    rep = load_blogs().report()
    assert rep["users"] == 900 and rep["records"] == 57_600 and rep["records_removed_total"] == 0
