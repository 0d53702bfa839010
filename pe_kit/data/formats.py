"""The three corpus formats, read as rows: Blog Authorship JSON Lines, Yelp reviews JSON Lines and Sentiment140 CSV.

:func:`format_rows` gives one format's row reader (one streaming pass, physical line numbers kept);
:func:`sniff_format` and :func:`check_format` tell the formats apart from a file's first line.
"""
from __future__ import annotations

import csv
import gzip
import json
import zlib
from collections import Counter, deque
from pathlib import Path
from typing import Iterator, Sequence

from pe_kit.data.passes import Row, Rows
from pe_kit.data.records import DataError, fail as _fail

__all__ = ["PROFILE_FIELDS", "FORMAT_TEXT", "json_lines", "format_rows", "sniff_format", "check_format", "known_format"]


def _open(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _raw_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(physical line number, bytes) of a gzip or plain file, split on LF only, a leading UTF-8 BOM dropped. Raises
    DataError, whatever ``on_error`` says, for a truncated or corrupt gzip stream or a BOM starting a later line."""
    lineno = 0
    try:
        with _open(path) as raw:
            for lineno, data in enumerate(raw, start=1):
                if data.startswith(b"\xef\xbb\xbf"):
                    if lineno > 1:
                        raise DataError(f"{path}: line {lineno} starts with a UTF-8 byte-order mark (BOM, bytes EF BB "
                                        "BF), which only line 1 may carry: the file looks like files joined by "
                                        "concatenation, each with its BOM. Remove the marks (e.g. `sed -i "
                                        "'2,$ s/^\\xEF\\xBB\\xBF//' FILE`; a .gz file through zcat and gzip) and "
                                        "load it again")
                    data = data[3:]
                yield lineno, data
    except gzip.BadGzipFile as exc:
        if lineno == 0 and "Not a gzipped file" in str(exc):
            raise DataError(f"{path}: not gzip data although its name ends in .gz ({exc}); if it is plain JSON Lines "
                            "or CSV, rename it without .gz, else copy it again") from None
        raise DataError(f"{path}: the gzip data is corrupt after line {lineno} ({type(exc).__name__}: {exc}): the "
                        f"file is truncated or damaged. Download or copy it again and check it with `gzip -t {path}`; "
                        "no record of it was used") from None
    except (EOFError, zlib.error) as exc:
        raise DataError(f"{path}: the gzip data ends early or is corrupt after line {lineno} ({type(exc).__name__}: "
                        f"{exc}): the file is truncated (an interrupted download or copy). Download or copy it "
                        f"again and check it with `gzip -t {path}`; no record of it was used") from None


def json_lines(path: Path, fields: Sequence[str], on_error: str, skipped: Counter) -> Iterator[tuple[int, dict]]:
    """(physical line number, object) per JSON Lines record that has every one of ``fields``."""
    parsed = 0  # JSON objects read so far: a first line that is not JSON means the file is not JSON Lines at all
    for lineno, data in _raw_lines(path):
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            _fail(on_error, skipped, "bad_encoding",
                  f"{path}: line {lineno}: not UTF-8 ({exc.reason} at byte {exc.start}); re-save the file "
                  "as UTF-8 or pass on_error='skip'")
            continue
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            first = ("" if parsed else "; the file does not start like a JSON Lines corpus (one JSON object "
                     "per line: the Blog corpus or Yelp reviews; Sentiment140 is a .csv file, --format names "
                     "the format)")
            _fail(on_error, skipped, "malformed_line",
                  f"{path}: line {lineno}: not valid JSON ({exc.msg}){first}")
            continue
        parsed += 1
        if not isinstance(obj, dict):
            _fail(on_error, skipped, "malformed_line", f"{path}: line {lineno}: expected a JSON object")
            continue
        missing = [f for f in fields if f not in obj or obj[f] is None]
        if missing:
            _fail(on_error, skipped, "missing_field",
                  f"{path}: line {lineno}: missing field {missing[0]!r} (needs {', '.join(fields)})")
            continue
        yield lineno, obj


#: Blog fields that describe the blogger, not the post: one user id must carry one set of them.
PROFILE_FIELDS = ("gender", "age", "industry", "sign")


def _typed_rows(path: Path, fields: tuple[str, str, str], on_error: str, skipped: Counter,
                profile: Sequence[str] = ()) -> Iterator[Row]:
    """Rows of a JSON Lines file (``fields``: user id, text, label); the label set is the ``(field, value)`` tuple of
    the ``profile`` fields (None when empty). A non-string text or an empty user id is ``bad_type``."""
    uid_f, text_f, label_f = fields
    for line, o in json_lines(path, fields, on_error, skipped):
        text, uid = o[text_f], o[uid_f]
        if not isinstance(text, str):
            _fail(on_error, skipped, "bad_type", f"{path}: line {line}: field '{text_f}' is a {type(text).__name__}, "
                  "not a string; fix the record or pass on_error='skip'")
            continue
        if uid is None or isinstance(uid, (bool, list, dict)) or not str(uid).strip():
            _fail(on_error, skipped, "bad_type", f"{path}: line {line}: field '{uid_f}' is empty or not an id "
                  f"({uid!r}); fix the record or pass on_error='skip'")
            continue
        prof = tuple((k, None if o.get(k) is None else str(o[k])) for k in profile) if profile else None
        yield line, str(uid), text, str(o[label_f]), prof


def _csv_decoding(path) -> str:
    """``"utf-8"`` when every line is UTF-8, ``"latin-1"`` when some line is not and no line holds UTF-8 beyond ASCII
    (U+FFFD aside). Raises DataError for a file mixing encodings."""
    first_bad, utf8_text = None, 0
    for lineno, data in _raw_lines(Path(path)):
        if data.isascii():
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            first_bad = first_bad or lineno
            continue
        utf8_text += not text.replace("\ufffd", "").isascii()
    if first_bad and utf8_text:
        raise DataError(f"{path}: mixes encodings: line {first_bad} is not UTF-8 while {utf8_text} line(s) hold "
                        "UTF-8 text beyond ASCII, so no one decoding reads every line right. Re-encode the file as "
                        f"UTF-8 (e.g. `iconv`, after fixing line {first_bad} by hand) and load it again")
    return "latin-1" if first_bad else "utf-8"


class _Feed:
    """Physical lines for ``csv.reader``; after a malformed record that spanned several lines, every line but its
    first is read again (an unterminated quote must not swallow the next records)."""

    def __init__(self, lines: Iterator[tuple[int, bytes]], decoding: str):
        self.lines, self.decoding, self.back, self.taken = lines, decoding, deque(), []

    def __iter__(self):
        return self

    def __next__(self) -> str:
        n, data = self.back.popleft() if self.back else next(self.lines)
        self.taken.append((n, data))
        return data.decode(self.decoding)

    def start(self) -> None:
        self.taken = []

    def put_back_tail(self) -> None:
        self.back.extendleft(reversed(self.taken[1:]))


def _s140_rows(path: Path, on_error: str) -> Rows:
    decoding = _csv_decoding(path)

    def rows(skipped: Counter) -> Iterator[Row]:
        feed = _Feed(_raw_lines(path), decoding)
        reader = csv.reader(feed, strict=True)  # a malformed quote is an error, never silently rewritten
        while True:
            feed.start()
            try:
                rec = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                lineno = feed.taken[0][0] if feed.taken else 0
                feed.put_back_tail()  # the lines after its first are read again: a valid record there is kept
                _fail(on_error, skipped, "malformed_quote",
                      f"{path}: line {lineno}: malformed quoting ({exc}); fix the quotes (a quote inside a "
                      "quoted field is written twice) or pass on_error='skip' to count and drop the line")
                continue
            if not rec:
                continue
            lineno = feed.taken[0][0]
            if len(rec) != 6:
                if len(feed.taken) > 1:
                    feed.put_back_tail()
                _fail(on_error, skipped, "malformed_line",
                      f"{path}: line {lineno}: expected 6 columns (polarity, id, date, query, user, text), "
                      f"got {len(rec)}")
                continue
            if rec[0].strip() not in ("0", "2", "4"):
                _fail(on_error, skipped, "bad_label",
                      f"{path}: line {lineno}: field 'polarity' is {rec[0]!r}, expected 0, 2 or 4")
                continue
            yield lineno, rec[4], rec[5], rec[0].strip(), None
    return Rows(rows, decoding)


def format_rows(path, fmt: str, label_field: str = "industry", on_error: str = "raise") -> Rows:
    """The ``Rows`` reader of one format. Raises ValueError for an unknown ``fmt`` or ``on_error``."""
    known_format(fmt)
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error={on_error!r} must be 'raise' or 'skip'")
    path = Path(path)
    if fmt == "blogs":
        profile = tuple(dict.fromkeys(PROFILE_FIELDS + (label_field,)))
        return Rows(lambda skipped: _typed_rows(path, ("user_id", "text", label_field), on_error, skipped, profile))
    if fmt == "yelp":
        return Rows(lambda skipped: _typed_rows(path, ("user_id", "text", "stars"), on_error, skipped))
    return _s140_rows(path, on_error)


#: What each format's file looks like (for the errors that name a format).
FORMAT_TEXT = {"blogs": "Blog Authorship JSON Lines (user_id, text, industry)",
                "yelp": "Yelp reviews JSON Lines (user_id, text, stars)",
                "sentiment140": "Sentiment140 CSV (6 columns: polarity, id, date, query, user, text)"}


def known_format(fmt: str) -> str:
    """``fmt`` if :data:`FORMAT_TEXT` has it, else ValueError naming the formats."""
    if fmt not in FORMAT_TEXT:
        raise ValueError(f"fmt={fmt!r} is unknown; use one of {sorted(FORMAT_TEXT)} or 'auto'")
    return fmt


def sniff_format(path) -> str | None:
    """A file's format from its first non-empty line: a JSON object with ``stars`` → ``"yelp"``, with ``user_id``
    and ``text`` → ``"blogs"``; a 6-column CSV row with polarity 0/2/4 → ``"sentiment140"``; else None."""
    return _sniff_line(_head_line(path))[0]


def _head_line(path) -> bytes:
    """The first non-empty line in a file's first 1 MiB (BOM dropped); b"" if none or unreadable."""
    try:
        with _open(Path(path)) as fh:
            head = fh.read(1 << 20)
    except (OSError, EOFError):
        return b""
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    return next((x for x in head.splitlines() if x.strip()), b"")


def _sniff_line(line: bytes) -> tuple[str | None, dict | None]:
    """(format guess, the line's JSON object or None)."""
    if line.lstrip().startswith(b"{"):
        try:
            obj = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None, None
        if not isinstance(obj, dict):
            return None, None
        return ("yelp" if "stars" in obj else "blogs" if "user_id" in obj and "text" in obj else None), obj
    try:
        rec = next(csv.reader([line.decode("latin-1")]))
    except (csv.Error, StopIteration):
        return None, None
    return ("sentiment140" if len(rec) == 6 and rec[0].strip() in ("0", "2", "4") else None), None


def check_format(path, fmt: str, label_field: str = "industry") -> None:
    """Raise DataError (naming the ``--format`` to pass) when the first line is clearly another format than ``fmt``;
    ``blogs`` and ``yelp`` conflict only when the first record lacks the loader's ``stars`` / ``label_field``."""
    guess, first = _sniff_line(_head_line(path))
    if guess is None or guess == fmt:
        return
    if {guess, fmt} == {"blogs", "yelp"} and (("stars" if fmt == "yelp" else label_field) in first):
        return
    raise DataError(f"{path}: the file looks like {FORMAT_TEXT[guess]}, not format {fmt!r} "
                    f"({FORMAT_TEXT.get(fmt, fmt)}); pass --format {guess} (pe-kit reproduce; fmt={guess!r} in "
                    f"Python, --set fmt={guess})")
