"""Loader failures that must never be silent (issue 32, items 7 and 8): a malformed Sentiment140 quote that
swallowed the next record, a truncated gzip file, and one user id carrying two different label sets."""
from __future__ import annotations

import gzip
import json
import warnings

import pytest

from pe_kit.data.loaders import DataError, load_blogs, load_corpus, load_sentiment140, load_yelp

# --------------------------------------------------------------------------- item 7: Sentiment140 skip mode
SEVEN = ['"0","1","Mon","NO_QUERY","u1","tweet one"\n',
         '"0","2","Mon","NO_QUERY","u1","tweet two"\n',
         '"4","3","Mon","NO_QUERY","u2","tweet three"\n',
         '"4","4","Mon","NO_QUERY","u2","tweet four"\n',
         '"0","5","Mon","NO_QUERY","u3","an unterminated quote\n',  # line 5: the quote never closes
         '"4","6","Mon","NO_QUERY","u6","a valid tweet on line six"\n',  # line 6: valid, was swallowed
         '"0","7","Mon","NO_QUERY","u1","tweet seven"\n']


def test_sentiment140_unterminated_quote_does_not_swallow_the_next_record(tmp_path):
    p = tmp_path / "seven.csv"
    p.write_bytes("".join(SEVEN).encode("latin-1"))
    with pytest.raises(DataError, match=r"seven\.csv: line 5: malformed quoting"):
        load_sentiment140(p, min_records=1)
    c = load_sentiment140(p, min_records=1, on_error="skip")
    rep = c.report()
    # the record on line 6 is recovered; only line 5 is lost, and the report says so
    assert c.by_id()["u6"].texts == ("a valid tweet on line six",)
    assert c.by_id()["u1"].texts == ("tweet one", "tweet two", "tweet seven")
    assert rep["skipped_malformed_quote"] == 1 and rep["records_removed_malformed_quote"] == 1
    assert rep["records"] + rep["records_removed_total"] == 7  # every physical line is kept or counted


def test_sentiment140_quote_error_at_end_of_file_recovers_following_lines(tmp_path):
    lines = SEVEN[:4] + ['"0","5","Mon","NO_QUERY","u3","open "quote" inside\n'] + SEVEN[5:]
    p = tmp_path / "q.csv"
    p.write_bytes("".join(lines).encode("latin-1"))
    c = load_sentiment140(p, min_records=1, on_error="skip")
    assert c.report()["records"] == 6 and c.report()["records_removed_total"] == 1
    # unquoted records after the open quote: the csv reader runs to the end of the file; both are read again
    lines = SEVEN[:5] + ["4,6,Mon,NO_QUERY,u6,plain six\n", "0,7,Mon,NO_QUERY,u1,plain seven\n"]
    p.write_bytes("".join(lines).encode("latin-1"))
    c = load_sentiment140(p, min_records=1, on_error="skip")
    assert c.by_id()["u6"].texts == ("plain six",) and c.by_id()["u1"].texts[-1] == "plain seven"
    assert c.report()["records_removed_malformed_quote"] == 1 and c.report()["records"] == 6


# --------------------------------------------------------------------------- item 8: truncated gzip
def _truncated_gz(path, lines: list[bytes]):
    data = gzip.compress(b"".join(lines))
    path.write_bytes(data[: len(data) // 2])
    return path


def _blog_lines(n=400):
    return [json.dumps({"user_id": f"b{i % 7}", "text": f"post {i} " + "word " * 30, "industry": "Arts",
                        "gender": "male", "age": 30, "sign": "Leo"}).encode() + b"\n" for i in range(n)]


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_truncated_gzip_is_a_clear_error(tmp_path, on_error):
    p = _truncated_gz(tmp_path / "blogs.jsonl.gz", _blog_lines())
    with pytest.raises(DataError, match=r"blogs\.jsonl\.gz.*(truncated|ends before).*gzip -t") as ei:
        load_blogs(p, on_error=on_error)
    assert "re-download" in str(ei.value) or "copy it again" in str(ei.value)
    y = _truncated_gz(tmp_path / "yelp.json.gz", [json.dumps({"user_id": "u", "text": f"r {i} " * 20, "stars": 3})
                                                     .encode() + b"\n" for i in range(400)])
    with pytest.raises(DataError, match=r"yelp\.json\.gz"):
        load_yelp(y, record_cap=4, on_error=on_error)
    s = _truncated_gz(tmp_path / "s.csv.gz", [f'"0","{i}","Mon","NO_QUERY","u1","tweet {i} {"w " * 30}"\n'.encode()
                                              for i in range(400)])
    with pytest.raises(DataError, match=r"s\.csv\.gz"):
        load_sentiment140(s, min_records=1, on_error=on_error)


def test_truncated_gzip_cli_exits_2_without_traceback(tmp_path, capsys):
    from pe_kit.run.cli import main

    p = _truncated_gz(tmp_path / "blogs.jsonl.gz", _blog_lines())
    rc = main(["reproduce", "--preset", "tiny", "--data", str(p), "--format", "blogs", "--notebooks", "01",
               "--results-dir", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert rc == 2
    assert str(p) in err and "gzip -t" in err and "Traceback" not in err and len(err.strip().splitlines()) <= 3


# --------------------------------------------------------------------------- item 8: one id, two label sets
def _merged_ids(path):
    rows = ([{"user_id": "b1", "text": f"arts post {i}", "industry": "Arts", "gender": "female", "age": 24,
              "sign": "Leo"} for i in range(3)]
            + [{"user_id": "b2", "text": f"other {i}", "industry": "Law", "gender": "male", "age": 40,
                "sign": "Aries"} for i in range(3)]
            + [{"user_id": "b1", "text": f"tech post {i}", "industry": "Technology", "gender": "male", "age": 35,
                "sign": "Virgo"} for i in range(2)])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_one_user_id_with_two_label_sets_is_not_merged_silently(tmp_path):
    p = _merged_ids(tmp_path / "blogs.jsonl")
    with pytest.raises(DataError) as ei:
        load_blogs(p)
    msg = str(ei.value)
    assert "line 7" in msg and "'b1'" in msg and "line 1" in msg
    assert "Arts" in msg and "Technology" in msg and "female" in msg and "on_error='skip'" in msg
    with pytest.warns(UserWarning, match=r"'b1'.*Arts.*Technology"):
        c = load_blogs(p, on_error="skip")
    rep = c.report()
    assert c.by_id()["b1"].texts == ("arts post 0", "arts post 1", "arts post 2")  # first label set kept
    assert c.by_id()["b1"].label == "Arts" and c.by_id()["b2"].texts == ("other 0", "other 1", "other 2")
    assert rep["skipped_label_conflict"] == 2 and rep["records_removed_label_conflict"] == 2
    assert rep["records"] + rep["records_removed_total"] == 8
    # per-review labels (Yelp stars, Sentiment140 polarity) vary within a user by nature: no conflict there
    y = tmp_path / "yelp.json"
    y.write_text("".join(json.dumps({"user_id": "u", "text": f"r{i}", "stars": 1 + i % 5}) + "\n" for i in range(4)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_corpus(y, "yelp", record_cap=4).users[0].label == "1"
