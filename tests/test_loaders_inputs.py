"""Loaders read what real files contain (issue 10, item 3): BOM + CRLF, physical lines, malformed quotes,
per-rule skip counts."""
from __future__ import annotations

import gzip
import json
import warnings

import pytest

from pe_kit.data.loaders import DataError, load_bank_texts, load_blogs, load_sentiment140, load_yelp
from pe_kit.data.splits import make_arm

BOM = b"\xef\xbb\xbf"


def _crlf_jsonl(path, rows, bom=True, gz=False):
    data = (BOM if bom else b"") + b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\r\n" for r in rows)
    if gz:
        with gzip.open(path, "wb") as fh:
            fh.write(data)
    else:
        path.write_bytes(data)
    return path


YELP = [{"review_id": "r0", "user_id": "user_0", "stars": 4.0, "text": "Great café\u2028second line 😀 first"},
        {"review_id": "r1", "user_id": "user_0", "stars": 4.0, "text": "Second review"},
        {"review_id": "r2", "user_id": "user_1", "stars": 2.0, "text": "Third review"}]


@pytest.mark.parametrize("gz", [False, True])
def test_yelp_bom_crlf_loads_every_record(tmp_path, gz):
    p = _crlf_jsonl(tmp_path / ("yelp.json.gz" if gz else "yelp.json"), YELP, gz=gz)
    for on_error in ("raise", "skip"):
        c = load_yelp(p, min_records=1, on_error=on_error)
        assert [len(u.texts) for u in c.users] == [2, 1] and sum(c.skipped.values()) == 0
        assert c.users[0].texts[0] == "Great café second line 😀 first"  # U+2028 is whitespace inside one record
        assert c.users[0].label == "4.0"


def test_blogs_and_bank_with_bom_crlf(tmp_path):
    rows = [{"user_id": "b1", "text": f"post {i}", "industry": "Arts"} for i in range(3)]
    c = load_blogs(_crlf_jsonl(tmp_path / "blogs.jsonl", rows))
    assert len(c) == 1 and c.users[0].texts == ("post 0", "post 1", "post 2") and c.users[0].label == "Arts"
    texts, info = load_bank_texts(_crlf_jsonl(tmp_path / "bank.jsonl.gz", [{"text": "alpha"}, {"text": "beta"}], gz=True))
    assert texts == ["alpha", "beta"] and info["rows"] == 2


@pytest.mark.parametrize("name", ["y.json", "y.json.gz", "s.csv"])
def test_bom_only_at_the_start(tmp_path, name):
    """A BOM that starts a later line (files joined with cat, each with its BOM) is refused whatever on_error says,
    naming the line and how to remove the marks: skipping the line would drop a record whole but for the mark."""
    lines = ([json.dumps(r).encode() + b"\n" for r in YELP] if name.startswith("y") else
             [f'"0","{i}","Mon","NO_QUERY","u1","tweet {i}"\n'.encode() for i in range(3)])
    p = _write(tmp_path / name, BOM + lines[0] + BOM + lines[1] + lines[2])
    load = load_yelp if name.startswith("y") else load_sentiment140
    for on_error in ("raise", "skip"):
        with pytest.raises(DataError, match=rf"{name}: line 2 starts with a UTF-8 byte-order mark \(BOM, bytes EF BB "
                                            r"BF\), which only line 1 may carry: the file looks like files joined by "
                                            r"concatenation, each with its BOM\. Remove the marks \(e\.g\. `sed -i "
                                            r"'2,\$ s/\^\\xEF\\xBB\\xBF//' FILE`"):
            load(p, min_records=1, on_error=on_error)


def _s140(path, lines):
    path.write_bytes("".join(lines).encode("latin-1"))
    return path


def _write(path, data: bytes):
    """``data`` to ``path``, gzip-compressed when the name ends in .gz."""
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as fh:
            fh.write(data)
    else:
        path.write_bytes(data)
    return path


def test_sentiment140_physical_lines_and_malformed_quotes(tmp_path):
    ok = [f'"0","{i}","Mon","NO_QUERY","u1","tweet {i}"\n' for i in range(3)]
    multi = '"4","10","Mon","NO_QUERY","u2","two\nlines"\n'  # physical lines 4-5
    bad_quote = '"0","11","Mon","NO_QUERY","u2","he said "hi" ok"\n'  # physical line 6
    bad_label = '"7","12","Mon","NO_QUERY","u2","x"\n'  # physical line 7
    p = _s140(tmp_path / "s.csv", ok + [multi, bad_label])
    with pytest.raises(DataError, match=r"s\.csv: line 6: field 'polarity' is '7'"):  # the physical line
        load_sentiment140(p, min_records=1)
    p = _s140(tmp_path / "q.csv", ok + [multi, bad_quote, bad_label])
    with pytest.raises(DataError, match=r"q\.csv: line 6: malformed quoting"):
        load_sentiment140(p, min_records=1)
    c = load_sentiment140(p, min_records=1, on_error="skip")
    assert c.skipped["malformed_quote"] == 1 and c.skipped["bad_label"] == 1
    assert c.by_id()["u2"].texts == ("two lines",)  # the malformed line is counted and dropped, never rewritten
    rep = c.report()
    assert rep["skipped_malformed_quote"] == 1 and rep["records_removed_malformed_quote"] == 1
    # a BOM at the start of the CSV
    p = tmp_path / "bom.csv"
    p.write_bytes(BOM + "".join(ok).encode("latin-1"))
    assert len(load_sentiment140(p, min_records=1).users[0].texts) == 3


def test_report_counts_records_removed_per_rule(tmp_path):
    rows = ([{"user_id": "big", "text": f"t{i}", "stars": 5} for i in range(6)]  # 2 over the cap of 4
            + [{"user_id": "small", "text": f"s{i}", "stars": 1} for i in range(2)]  # too few records (< 3)
            + [{"user_id": "ok", "text": f"o{i}", "stars": 3} for i in range(3)]
            + [{"user_id": "ok", "text": "   ", "stars": 3}])  # empty text
    p = tmp_path / "y.json"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{broken\n")
    c = load_yelp(p, record_cap=4, min_records=3, on_error="skip")
    rep = c.report()
    assert [u.user_id for u in c.users] == ["big", "ok"]
    assert rep["skipped_over_record_cap"] == 2 and rep["records_removed_over_record_cap"] == 2
    assert rep["skipped_user_too_few_records"] == 1 and rep["records_removed_user_too_few_records"] == 2
    assert rep["skipped_empty_text"] == 1 and rep["records_removed_empty_text"] == 1
    assert rep["skipped_malformed_line"] == 1 and rep["records_removed_malformed_line"] == 1
    assert rep["records_removed_total"] == 6 and rep["records"] == 7  # 13 lines = 7 kept + 6 removed
    arm = make_arm(c, "long", record_cap=4)  # 'ok' has 3 < 4 records: not in the long arm
    assert arm.report()["skipped_not_in_long_arm"] == 1 and arm.report()["records_removed_not_in_long_arm"] == 3
    capped = load_yelp(p, record_cap=4, min_records=3, on_error="skip", max_users=1)
    assert capped.report()["records_removed_user_beyond_max_users"] == 5  # small (2) and ok (3) after the first user


S140_UTF8 = ["مرحبا بالعالم 😀", "naïve café ☕ — “quotes”", "日本語のツイート 🎉"]


@pytest.mark.parametrize("gz", [False, True])
def test_sentiment140_utf8_export_round_trips(tmp_path, monkeypatch, gz):
    """A user's own UTF-8 export (emoji, Arabic) keeps its text exactly; Latin-1 would give 'Ù\x85Ø±Ø\xad…'."""
    from pe_kit.data.corpus_cache import cached_corpus

    data = "".join(f'"4","{i}","Mon","NO_QUERY","u1","{t}"\n' for i, t in enumerate(S140_UTF8)).encode("utf-8")
    p = _write(tmp_path / ("s.csv.gz" if gz else "s.csv"), data)
    c = load_sentiment140(p, min_records=1)
    assert c.users[0].texts == tuple(S140_UTF8) and c.report()["decoding"] == "utf-8"
    assert make_arm(c, "short", record_cap=4).report()["decoding"] == "utf-8"
    monkeypatch.setenv("PE_KIT_CACHE", str(tmp_path / "cache"))
    for _ in range(2):  # computed and stored, then read back: the same texts and decoding
        cached = cached_corpus(p, "sentiment140", min_records=1)
        assert cached.users == c.users and cached.report() == c.report()


def test_sentiment140_latin1_dump_decodes_as_before(tmp_path):
    """The original dump is Latin-1 and not valid UTF-8: every line is read as Latin-1, the user id too, even a
    line whose bytes alone are valid UTF-8 for U+FFFD only (the dump's 'ï¿½' stays 'ï¿½')."""
    texts = ["café crème", "ï¿½ is three Latin-1 characters", "£5 ½ price"]
    users = ["josé", "josé", "zoë"]
    p = _s140(tmp_path / "latin.csv", [f'"0","{i}","Mon","NO_QUERY","{u}","{t}"\n'
                                       for i, (u, t) in enumerate(zip(users, texts))])
    c = load_sentiment140(p, min_records=1)
    assert {u.user_id: u.texts for u in c.users} == {"josé": tuple(texts[:2]), "zoë": (texts[2],)}
    assert c.report()["decoding"] == "latin-1"


@pytest.mark.parametrize("gz", [False, True])
def test_sentiment140_mixed_encodings_refused(tmp_path, gz):
    """UTF-8 lines with Arabic/emoji plus one appended Latin-1 line: no one decoding is right, so the file is
    refused naming the Latin-1 line, the UTF-8 lines beyond ASCII and the fix — never read wholly as Latin-1."""
    data = ("".join(f'"4","{i}","Mon","NO_QUERY","u1","{t}"\n' for i, t in enumerate(S140_UTF8)).encode("utf-8")
            + b'"4","9","Mon","NO_QUERY","u1","plain ascii"\n' + '"0","8","Mon","NO_QUERY","u2","café"\n'.encode("latin-1"))
    p = _write(tmp_path / ("m.csv.gz" if gz else "m.csv"), data)
    with pytest.raises(DataError, match=r"mixes encodings: line 5 is not UTF-8 while 3 line\(s\) hold UTF-8 text "
                                        r"beyond ASCII.*Re-encode the file as UTF-8 \(e.g. `iconv`, after fixing line 5 by hand\)"):
        load_sentiment140(p, min_records=1)


def test_json_lines_report_utf8(tmp_path):
    c = load_yelp(_crlf_jsonl(tmp_path / "y.json", YELP), min_records=1)
    assert c.report()["decoding"] == "utf-8"


def test_report_counts_records_changed(tmp_path):
    """Kept, changed and dropped records are all in the report: whitespace runs made one space at load, the short
    arm's 140-character cut in make_arm."""
    rows = ([{"user_id": "u", "text": t, "stars": 5} for t in ("two  spaces", "tab\there", "plain", "x " * 100)]
            + [{"user_id": "v", "text": "ok", "stars": 1}])
    c = load_yelp(_crlf_jsonl(tmp_path / "y.json", rows), record_cap=4, min_records=1)
    assert c.by_id()["u"].texts[:3] == ("two spaces", "tab here", "plain")
    assert c.report()["records_changed_whitespace_normalised"] == 3 and c.report()["records"] == 5
    short = make_arm(c, "short", record_cap=4)  # u: 4 records (one of 199 characters, cut); v: 1 < 2, dropped
    rep = short.report()
    assert rep["records_changed_cut_to_140_chars"] == 1 and len(short.by_id()["u"].texts[3]) == 139
    assert rep["records_removed_not_in_short_arm"] == 1 and rep["records"] == 4
    assert make_arm(c, "long", record_cap=4).report()["records_changed_whitespace_normalised"] == 3


def test_doubled_file_counts_its_repeats_and_warns(tmp_path, monkeypatch):
    """A file concatenated with itself keeps every record twice: the users are the same, the records double, half
    of them are counted as exact repeats of a (user_id, text) pair, and a warning names them and the fix; the count
    follows make_arm (the arm's users only) and the corpus cache (the warning too)."""
    from pe_kit.data.corpus_cache import cached_corpus

    a = [{"user_id": u, "text": f"{u} review {i}", "stars": 3} for u, n in (("u0", 4), ("u1", 2)) for i in range(n)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the original: no repeat, no warning
        once = load_yelp(_crlf_jsonl(tmp_path / "a.json", a), record_cap=8, min_records=1)
    assert once.report()["records_repeated"] == once.report()["users_with_repeats"] == 0
    doubled = _crlf_jsonl(tmp_path / "aa.json", a + a)
    msg = (f"{doubled}: 6 of the 12 records kept (50%, in 2 users) repeat an earlier record of the same user (same "
           "user_id and text), as in a file concatenated with itself (half of the records, less where the record "
           "cap cuts a user's second copy); they are kept as records of their own, so users hold extra records: if "
           "the file was merged from copies, deduplicate it (keep each (user_id, text) pair once) and load it again")
    with pytest.warns(UserWarning) as caught:
        twice = load_yelp(doubled, record_cap=8, min_records=1)
    assert [str(w.message) for w in caught] == [msg]
    rep = twice.report()
    assert [u.user_id for u in twice.users] == [u.user_id for u in once.users]
    assert rep["records"] == 2 * once.report()["records"] == 12
    assert rep["records_repeated"] == once.report()["records"] == 6 and rep["users_with_repeats"] == 2
    long = make_arm(twice, "long", record_cap=8).report()  # u0 only: 8 records, 4 of them repeats
    assert long["records"] == 8 and long["records_repeated"] == 4 and long["users_with_repeats"] == 1
    monkeypatch.setenv("PE_KIT_CACHE", str(tmp_path / "cache"))
    for _ in range(2):  # computed and stored, then read back: the same counts and the same warning
        with pytest.warns(UserWarning) as caught:
            cached = cached_corpus(doubled, "yelp", record_cap=8, min_records=1)
        assert [str(w.message) for w in caught] == [msg] and cached.report() == rep


def test_doubled_file_cut_by_the_record_cap_warns(tmp_path):
    """Under the record cap a doubled file keeps less than half repeats (a user's second copy is cut), yet users
    cross min_records on repeats alone: u0 (4 records) is admitted at min_records = 6 only doubled, with 2 repeats
    among its 6; u1 (2 records) keeps 4, 2 repeats: 4 of 10 (40%), exactly as many as a copy adds, so it warns."""
    a = [{"user_id": u, "text": f"{u} review {i}", "stars": 3} for u, n in (("u0", 4), ("u1", 2)) for i in range(n)]
    assert len(load_yelp(_crlf_jsonl(tmp_path / "a.json", a), record_cap=6, min_records=6)) == 0
    doubled = _crlf_jsonl(tmp_path / "aa.json", a + a)
    with pytest.warns(UserWarning, match=r"aa\.json: 2 of the 6 records kept \(33%, in 1 users\) repeat an earlier"):
        c = load_yelp(doubled, record_cap=6, min_records=6)
    assert [(u.user_id, len(u.texts), len(set(u.texts))) for u in c.users] == [("u0", 6, 4)]
    assert c.report()["records_repeated"] == 2
    with pytest.warns(UserWarning, match=r"4 of the 10 records kept \(40%, in 2 users\)"):
        assert len(load_yelp(doubled, record_cap=6, min_records=1)) == 2
    with warnings.catch_warnings():  # u0's first copy fills a cap of 4: no repeat is kept, a copy adds none
        warnings.simplefilter("error")
        u0 = _crlf_jsonl(tmp_path / "u0.json", a[:4] + a[:4])
        assert load_yelp(u0, record_cap=4, min_records=4).report()["records_repeated"] == 0
