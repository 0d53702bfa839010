"""Loaders on small files in each format, broken ones included; arms; seeded disjoint splits."""
import gzip
import json
import warnings

import pytest

from pe_kit.data.loaders import (
    DataError,
    default_data_path,
    load_blogs,
    load_corpus,
    load_sentiment140,
    load_yelp,
)
from pe_kit.data.splits import cut_to_length, make_arm, split_users

from .conftest import TINY_DATA


def _jsonl(path, rows, gz=False):
    text = "".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_bundled_default_is_900_bloggers_times_64():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # its repeats (mostly link stubs like 'urlLink') are 1%: no merge warning
        rep = load_blogs(default_data_path()).report()
    assert rep["users"] == 900 and rep["records"] == 57600 and rep["records_min"] == rep["records_max"] == 64
    assert rep["records_repeated"] == 550 and rep["users_with_repeats"] == 114  # kept, as the authors wrote them


def test_yelp_stream_cap_and_labels(tmp_path):
    rows = [{"user_id": f"u{u}", "text": f"review {u} {i}", "stars": 1 + u} for u in range(3) for i in range(5)]
    rows.append({"user_id": "u0", "text": "   ", "stars": 1})  # empty text: a counted skip
    c = load_yelp(_jsonl(tmp_path / "yelp_reviews.json", rows), record_cap=4, min_records=4)
    assert [u.user_id for u in c.users] == ["u0", "u1", "u2"]
    assert all(len(u.texts) == 4 for u in c.users) and c.users[2].label == "3"
    assert c.skipped["empty_text"] == 1 and c.skipped["over_record_cap"] == 3


def test_malformed_line_names_file_and_line(tmp_path):
    p = _jsonl(tmp_path / "b.jsonl", [{"user_id": "a", "text": "x", "industry": "A"}, "{not json\n"])
    with pytest.raises(DataError, match=r"b\.jsonl: line 2"):
        load_blogs(p)
    c = load_blogs(p, on_error="skip")
    assert c.skipped["malformed_line"] == 1 and len(c) == 1
    with pytest.raises(DataError) as err:  # a later bad line is a bad line, not a wrong file
        load_blogs(p)
    assert "does not start like a JSON Lines corpus" not in str(err.value)


def test_a_file_that_is_not_json_lines_is_named_as_such(tmp_path):
    p = tmp_path / "README.md"
    p.write_text("# A project\n\nSome prose.\n")
    with pytest.raises(DataError, match=r"README\.md: line 1: not valid JSON .*does not start like a JSON Lines "
                                        r"corpus .*Sentiment140 is a \.csv file"):
        load_blogs(p)


def test_missing_field_named(tmp_path):
    p = _jsonl(tmp_path / "y.jsonl", [{"user_id": "a", "text": "x"}])
    with pytest.raises(DataError, match=r"line 1: missing field 'stars'"):
        load_yelp(p, min_records=1)


def test_wrong_encoding_named(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(json.dumps({"user_id": "a", "text": "ok", "industry": "A"}).encode() + b"\n" +
                  '{"user_id": "b", "text": "caf\xe9", "industry": "A"}\n'.encode("latin-1"))
    with pytest.raises(DataError, match=r"bad\.jsonl: line 2: not UTF-8"):
        load_blogs(p)


def test_sentiment140_latin1_and_bad_rows(tmp_path):
    lines = [f'"{4 if i % 2 else 0}","{i}","Mon Apr 06","NO_QUERY","alice","tweet {i} caf\xe9"' for i in range(3)]
    p = tmp_path / "s140.csv"
    p.write_bytes(("\n".join(lines) + "\n").encode("latin-1"))
    c = load_sentiment140(p, min_records=3)
    assert len(c) == 1 and c.users[0].texts[0] == "tweet 0 café" and c.users[0].label == "0"
    p.write_bytes(p.read_bytes() + b'"9","1","d","q","bob","x"\n')
    with pytest.raises(DataError, match=r"line 4: field 'polarity'"):
        load_sentiment140(p, min_records=1)
    p.write_bytes(b'"0","1","d"\n')
    with pytest.raises(DataError, match="expected 6 columns"):
        load_sentiment140(p, min_records=1)
    assert load_corpus(p, on_error="skip", min_records=1).skipped["malformed_line"] == 1


def test_arms():
    c = load_blogs(TINY_DATA, record_cap=16)
    long_arm = make_arm(c, "long", 16)
    short_arm = make_arm(c, "short", 16)
    assert all(len(u.texts) == 16 for u in long_arm.users)
    assert all(len(t) <= 140 for u in short_arm.users for t in u.texts)
    assert cut_to_length("alpha beta gamma", 11) == "alpha beta"
    with pytest.raises(ValueError, match="arm"):
        make_arm(c, "medium")


def test_splits_disjoint_seeded_and_too_few_users():
    c = load_blogs(TINY_DATA, record_cap=16)
    s = split_users(c, 5, 20, 20, 30, seed=3)
    groups = [set(getattr(s, g)) for g in ("canary", "aux", "calibration", "test", "public")]
    assert sum(map(len, groups)) == len(c) == len(set().union(*groups))
    assert s.report() == {"canary": 5, "aux": 20, "calibration": 20, "test": 30, "public": 5}
    assert split_users(c, 5, 20, 20, 30, seed=3) == s and split_users(c, 5, 20, 20, 30, seed=4) != s
    with pytest.raises(ValueError, match="80 users.*needed"):
        split_users(c, 5, 500, 500, 1000)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_blogs("/nonexistent/file.jsonl")


def test_reserved_users_stay_public_and_unreserved_splits_do_not_move():
    """split_users(reserved=): bank-B example authors never enter a private split; reserving users who would have
    been public changes nothing; reserving an aux user gives its place to the next user of the permutation."""
    c = load_blogs(TINY_DATA, record_cap=16)
    s = split_users(c, 5, 20, 20, 30, seed=3)
    assert split_users(c, 5, 20, 20, 30, seed=3, reserved=s.public[:3]) == s
    held = {s.aux[0], s.test[4], s.canary[1]}
    r = split_users(c, 5, 20, 20, 30, seed=3, reserved=held)
    private = set(r.canary) | set(r.aux) | set(r.calibration) | set(r.test)
    assert not held & private and held <= set(r.public)
    assert r.report() == s.report()
    one = split_users(c, 5, 20, 20, 30, seed=3, reserved={s.aux[0]})
    assert one.canary == s.canary and one.aux == s.aux[1:] + s.calibration[:1]   # the next user takes the place
    assert one.calibration == s.calibration[1:] + s.test[:1] and s.aux[0] in one.public
    with pytest.raises(ValueError, match="80 users, 3 of them reserved as bank-B example authors.*77 can be split"
                                         ".*sum to at most 77"):
        split_users(c, 5, 20, 20, 34, seed=3, reserved=s.public[:3])
    # ids are compared as strings (the corpus's ids are); a single string or None is refused, not split into chars
    assert split_users(c, 5, 20, 20, 30, seed=3, reserved=[s.aux[0]]) == one
    for bad in (s.aux[0], None):
        with pytest.raises(TypeError, match="reserved=.*collection of user ids"):
            split_users(c, 5, 20, 20, 30, seed=3, reserved=bad)
    fits = [u.user_id for u in c.users if len(u.texts) == 16]
    with pytest.raises(ValueError, match=f"only {len(fits) - 3} users have exactly 16 records \\(3 more are reserved"):
        split_users(c, len(fits), 5, 5, 5, seed=3, canary_records=16, reserved=fits[:3])


def test_bank_b_authors_read_from_the_examples(tmp_path):
    from pe_kit.data.loaders import bank_b_authors

    path = tmp_path / "b.jsonl"
    _jsonl(path, [{"text": "a post", "label": "Arts", "examples": [["u1", 0], ["u2", 5], ["u1", 3]]},
                  {"text": "another", "label": "Arts", "examples": [["u7", 1]]}])
    assert bank_b_authors(path) == {"u1", "u2", "u7"}
    with pytest.raises(FileNotFoundError, match="does not exist"):
        bank_b_authors(tmp_path / "missing.jsonl")


def test_reserved_users_are_kept_out_when_the_corpus_has_int_ids():
    """A hand-built Corpus with int user ids: the reserved ids (text, as bank B lists them) still match, so no
    reserved user enters a private split; with every fitting user reserved the error does not suggest n_canary=0."""
    import pytest as _pytest

    from pe_kit.data.records import Corpus, User
    from pe_kit.data.splits import split_users

    corpus = Corpus([User(i, tuple(f"post {i}.{j}" for j in range(4)), "x") for i in range(40)], "hand-built")
    reserved = {str(i) for i in range(0, 40, 2)}
    s = split_users(corpus, 2, 4, 4, 4, seed=0, reserved=reserved)
    private = set(s.canary) | set(s.aux) | set(s.calibration) | set(s.test)
    assert len(private) == 14 and not {str(i) for i in private} & reserved
    with _pytest.raises(ValueError, match="choose another bank or corpus") as err:
        split_users(corpus, 2, 4, 4, 4, seed=0, reserved={str(i) for i in range(40)})
    assert "n_canary=0" not in str(err.value)
