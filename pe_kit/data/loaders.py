"""User-partitioned text: loaders, record caps, data arms and seeded disjoint user splits.

Formats (../shared/data/README.md): Blog Authorship Corpus JSON Lines (gzip or plain; ``user_id``,
``text``, label field ``industry``), Yelp reviews JSON Lines (``user_id``, ``text``, ``stars``; streamed),
Sentiment140 CSV (no header, Latin-1; columns polarity, id, date, query, user, text).
Paper: §3 and App. D ("Users and record cap"): m = 64 records; long arm (exactly 64 records, like Yelp),
short arm (32–64 records cut to tweet length, like Sentiment140); 500 aux, 500 calibration, 1000 test.

Error policy: a malformed line, a wrong encoding, a missing field or (Sentiment140) a malformed quote
raises ``DataError`` naming the file, the *physical* line and the field (``on_error="skip"`` counts and
reports such lines instead; nothing is silently rewritten); an empty text is a documented, counted skip;
users outside [min_records, max_records] are counted and excluded. ``Corpus.report()`` gives, per skip
rule, both what it counted (lines or users: ``skipped_<rule>``) and the records it removed
(``records_removed_<rule>``). Files may start with a UTF-8 byte-order mark and use CRLF line ends.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

TWEET_LENGTH = 140


class DataError(ValueError):
    """A data file cannot be read as documented; the message names file, line and field."""


@dataclass(frozen=True)
class User:
    """One user's capped records. ``texts``: tuple of str (≤ m); ``label``: str (industry, stars, polarity)."""

    user_id: str
    texts: tuple[str, ...]
    label: str


@dataclass
class Corpus:
    """Users in file order, plus the counted skips of loading.

    Attributes:
        users: list of ``User`` (unique ids, first-appearance order).
        source: file path or description.
        skipped: Counter of skip rules → what each counted: lines for line rules (``malformed_line``,
            ``malformed_quote``, ``bad_encoding``, ``missing_field``, ``bad_label``, ``empty_text``,
            ``over_record_cap``), users for user rules (``user_too_few_records``, ``user_too_many_records``,
            ``user_beyond_max_users``, ``not_in_<arm>_arm``).
        removed: Counter of skip rules → records (lines) each rule removed.
    """

    users: list[User]
    source: str
    skipped: Counter = field(default_factory=Counter)
    removed: Counter = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self.users)

    def by_id(self) -> dict[str, User]:
        return {u.user_id: u for u in self.users}

    def report(self) -> dict:
        """Counts: users, records, records per user (min/median/max); per skip rule, what it counted
        (``skipped_<rule>``: lines or users) and the records it removed (``records_removed_<rule>``), and
        ``records_removed_total``."""
        n = np.array([len(u.texts) for u in self.users]) if self.users else np.zeros(1, int)
        return {"source": self.source, "users": len(self.users), "records": int(n.sum()),
                "records_min": int(n.min()), "records_median": float(np.median(n)), "records_max": int(n.max()),
                **{f"skipped_{k}": v for k, v in sorted(self.skipped.items())},
                **{f"records_removed_{k}": v for k, v in sorted(self.removed.items())},
                "records_removed_total": int(sum(self.removed.values()))}


def default_data_path() -> Path:
    """Path of the bundled Blog sample (900 bloggers × 64 posts, ≤ 600 chars; Schler et al., 2006)."""
    return Path(str(resources.files("pe_kit") / "data_files" / "blogs-900.jsonl.gz"))


def default_bank_path() -> Path:
    """Path of the bundled label-only SmolLM2 bank for the Blog corpus (8,192 texts; "bank A")."""
    return Path(str(resources.files("pe_kit") / "data_files" / "blogs-bankA-smollm2.jsonl.gz"))


def _open_text(path: Path, encoding: str) -> io.TextIOBase:
    """Text stream of a (gzip or plain) file; a leading UTF-8 byte-order mark is skipped."""
    raw = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    if raw.peek(3)[:3] == b"\xef\xbb\xbf":
        raw.read(3)
    return io.TextIOWrapper(raw, encoding=encoding, newline="")


def _iter_json_lines(path: Path, fields: Sequence[str], on_error: str, skipped: Counter) -> Iterator[tuple[int, dict]]:
    """(physical line number, object) per JSON Lines record; a leading UTF-8 BOM is dropped, CRLF is fine
    (bytes are split on LF only, so U+2028 inside a text does not split a record)."""
    raw = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    parsed = 0  # JSON objects read so far: a first line that is not JSON means the file is not JSON Lines at all
    with raw:
        for lineno, data in enumerate(raw, start=1):
            if lineno == 1 and data.startswith(b"\xef\xbb\xbf"):
                data = data[3:]
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


def _fail(on_error: str, skipped: Counter, reason: str, message: str) -> None:
    if on_error == "skip":
        skipped[reason] += 1
        return
    if on_error != "raise":
        raise ValueError(f"on_error={on_error!r} must be 'raise' or 'skip'")
    hint = "pe-kit reproduce: --set on_error=skip"
    if "on_error=" in message:
        message += f" ({hint})"
    else:
        message += f"; or pass on_error='skip' to count and drop such lines ({hint})"
    raise DataError(message)


_LINE_RULES = ("malformed_line", "malformed_quote", "bad_encoding", "missing_field", "bad_label", "bad_type")


def _collect(rows: Iterable[tuple[str, str, str]], source: str, record_cap: int, min_records: int,
             max_records: int | None, skipped: Counter, max_users: int | None = None) -> Corpus:
    """Group (user, text, label) rows into capped users; empty texts are counted skips."""
    if record_cap < 1:
        raise ValueError(f"record_cap={record_cap} must be ≥ 1")
    if min_records < 1 or (max_records is not None and max_records < min_records):
        raise ValueError(f"need 1 ≤ min_records ≤ max_records; got {min_records}, {max_records}")
    if min_records > record_cap:
        raise ValueError(f"min_records={min_records} exceeds record_cap={record_cap}: every user would be "
                         "dropped (a user keeps at most record_cap records); lower min_records or raise record_cap")
    texts: dict[str, list[str]] = {}
    labels: dict[str, str] = {}
    removed: Counter = Counter()
    for uid, text, label in rows:
        text = " ".join(str(text).split())
        if not text:
            skipped["empty_text"] += 1
            removed["empty_text"] += 1
            continue
        bucket = texts.setdefault(uid, [])
        labels.setdefault(uid, label)
        if len(bucket) < record_cap:
            bucket.append(text)
        else:
            skipped["over_record_cap"] += 1
            removed["over_record_cap"] += 1
    for rule in _LINE_RULES:  # each skipped line held one record
        if skipped[rule]:
            removed[rule] += skipped[rule]
    users = []
    hi = max_records if max_records is not None else record_cap
    for uid, recs in texts.items():
        rule = None
        if max_users is not None and len(users) >= max_users:
            rule = "user_beyond_max_users"
        elif len(recs) < min_records:
            rule = "user_too_few_records"
        elif len(recs) > hi:
            rule = "user_too_many_records"
        if rule is None:
            users.append(User(uid, tuple(recs), labels[uid]))
        else:
            skipped[rule] += 1
            removed[rule] += len(recs)
    skipped = Counter({k: v for k, v in skipped.items() if v})
    return Corpus(users, source, skipped, +removed)


def _typed_rows(path: Path, fields: tuple[str, str, str], on_error: str, skipped: Counter):
    """(user_id, text, label) rows of a JSON Lines file whose ``text`` is a string and ``user_id`` non-empty.

    A number, list, object or boolean in ``text`` (or an empty ``user_id``) is a ``DataError`` naming the file,
    the line and the field — never turned into its Python representation; with ``on_error="skip"`` it is
    counted under ``bad_type``.
    """
    uid_f, text_f, label_f = fields
    for line, o in _iter_json_lines(path, fields, on_error, skipped):
        text, uid = o[text_f], o[uid_f]
        if not isinstance(text, str):
            _fail(on_error, skipped, "bad_type", f"{path}: line {line}: field '{text_f}' is a {type(text).__name__}, "
                  "not a string; fix the record or pass on_error='skip'")
            continue
        if uid is None or isinstance(uid, (bool, list, dict)) or not str(uid).strip():
            _fail(on_error, skipped, "bad_type", f"{path}: line {line}: field '{uid_f}' is empty or not an id "
                  f"({uid!r}); fix the record or pass on_error='skip'")
            continue
        yield str(uid), text, str(o[label_f])


def folder_message(path, flag: str = "--data") -> str:
    """The error text for a folder given where one corpus file is expected: names the formats and lists up to
    five files inside it that have a corpus extension (``.jsonl``, ``.json``, ``.csv``, optionally ``.gz``)."""
    path = Path(path)
    try:
        inside = sorted(str(f) for f in path.iterdir() if f.is_file()
                        and f.name.lower().endswith((".jsonl", ".json", ".csv", ".jsonl.gz", ".json.gz", ".csv.gz")))
    except OSError:
        inside = []
    found = f"; files here that could be one: {', '.join(inside[:5])}" if inside else ""
    return (f"data={str(path)!r} is a folder; {flag} takes one corpus file: Blog Authorship JSON Lines (.jsonl or "
            ".jsonl.gz), Yelp reviews JSON Lines (yelp_academic_dataset_review.json) or Sentiment140 CSV (.csv); "
            f"pass {flag} <folder>/<file>{found}")


def _check_path(path) -> Path:
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(folder_message(path, "path"))
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} does not exist; pass an existing file (default: "
                                f"pe_kit.data.loaders.default_data_path())")
    return path


def load_blogs(path=None, record_cap: int = 64, min_records: int = 1, max_records: int | None = None,
               label_field: str = "industry", on_error: str = "raise") -> Corpus:
    """Load Blog Authorship Corpus JSON Lines (``user_id``, ``text``, label field), gzip or plain.

    Args:
        path: file (default: the bundled 900-blogger sample).
        record_cap: m, first m records per user in file order are kept (App. D).
        min_records, max_records: admissible records per user after the cap (default max = m).
        label_field: field used as the user's label (``industry``, ``gender``, ``age``).
        on_error: ``"raise"`` (default) or ``"skip"`` (count malformed lines / missing fields).

    Returns:
        ``Corpus``.

    Raises:
        FileNotFoundError, IsADirectoryError (a folder: names the formats), DataError (file, line, field named).
    """
    path = _check_path(path or default_data_path())
    skipped: Counter = Counter()
    rows = _typed_rows(path, ("user_id", "text", label_field), on_error, skipped)
    return _collect(rows, str(path), record_cap, min_records, max_records, skipped)


def load_yelp(path, record_cap: int = 64, min_records: int | None = None, max_records: int | None = None,
              on_error: str = "raise", max_users: int | None = None) -> Corpus:
    """Stream Yelp Open Dataset reviews JSON Lines (``user_id``, ``text``, ``stars``; label = stars).

    Defaults follow the paper's Yelp arm: exactly m records per user (``min_records=None`` means
    ``record_cap``, so a smaller cap admits users with that many reviews). Arguments, returns and
    errors as ``load_blogs``; ``max_users`` stops after that many admissible users (handy on the 5 GB file;
    note users are grouped only after the whole file is read).
    """
    path = _check_path(path)
    min_records = record_cap if min_records is None else min_records
    skipped: Counter = Counter()
    rows = _typed_rows(path, ("user_id", "text", "stars"), on_error, skipped)
    return _collect(rows, str(path), record_cap, min_records, max_records, skipped, max_users)


def load_sentiment140(path, record_cap: int = 64, min_records: int | None = None, max_records: int | None = None,
                      on_error: str = "raise") -> Corpus:
    """Load Sentiment140 CSV: no header, Latin-1, columns polarity, id, date, query, user, text.

    Label = polarity ("0", "2", "4"). Defaults follow the paper's arm: m/2 … m tweets per user (32–64 at
    m = 64; ``min_records=None`` means ``max(1, record_cap // 2)``, so a smaller cap still admits users).
    Raises DataError naming file, *physical* line (the first line of a record whose quoted text spans
    lines) and column for rows without 6 columns, a bad polarity, or a malformed quote (``csv`` strict
    mode; with ``on_error="skip"`` counted as ``malformed_quote``).
    """
    path = _check_path(path)
    min_records = max(1, record_cap // 2) if min_records is None else min_records
    skipped: Counter = Counter()

    def rows():
        with _open_text(path, "latin-1") as fh:
            reader = csv.reader(fh, strict=True)  # a malformed quote is an error, never silently rewritten
            end = 0  # physical line where the previous record ended
            while True:
                lineno = end + 1  # physical line where this record starts (quoted fields may span lines)
                try:
                    rec = next(reader)
                except StopIteration:
                    break
                except csv.Error as exc:
                    end = reader.line_num
                    _fail(on_error, skipped, "malformed_quote",
                          f"{path}: line {lineno}: malformed quoting ({exc}); fix the quotes (a quote inside a "
                          "quoted field is written twice) or pass on_error='skip' to count and drop the line")
                    continue
                end = reader.line_num
                if not rec:
                    continue
                if len(rec) != 6:
                    _fail(on_error, skipped, "malformed_line",
                          f"{path}: line {lineno}: expected 6 columns (polarity, id, date, query, user, text), "
                          f"got {len(rec)}")
                    continue
                if rec[0].strip() not in ("0", "2", "4"):
                    _fail(on_error, skipped, "bad_label",
                          f"{path}: line {lineno}: field 'polarity' is {rec[0]!r}, expected 0, 2 or 4")
                    continue
                yield rec[4], rec[5], rec[0].strip()

    return _collect(rows(), str(path), record_cap, min_records, max_records, skipped)


_FORMAT_TEXT = {"blogs": "Blog Authorship JSON Lines (user_id, text, industry)",
                "yelp": "Yelp reviews JSON Lines (user_id, text, stars)",
                "sentiment140": "Sentiment140 CSV (6 columns: polarity, id, date, query, user, text)"}


def sniff_format(path) -> str | None:
    """Guess a corpus file's format from its first non-empty line (not from its name).

    A JSON object with ``stars`` → ``yelp``; with ``user_id`` and ``text`` (no ``stars``) → ``blogs``; a CSV row
    of 6 columns whose first is a polarity 0, 2 or 4 → ``sentiment140``; anything else → None (no guess). Reads
    at most the first 1 MiB (gzip or plain; a UTF-8 byte-order mark is skipped).

    Args: path: the file. Returns: ``"blogs"`` | ``"yelp"`` | ``"sentiment140"`` | None.
    """
    return _sniff_line(_head_line(path))[0]


def _head_line(path) -> bytes:
    """The first non-empty line within the first 1 MiB of a (gzip or plain) file, UTF-8 BOM dropped; b"" if none
    or unreadable."""
    path = Path(path)
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as fh:
            head = fh.read(1 << 20)
    except (OSError, EOFError):
        return b""
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    return next((x for x in head.splitlines() if x.strip()), b"")


def _sniff_line(line: bytes) -> tuple[str | None, dict | None]:
    """(format guess, the line's JSON object or None) for one first line (see :func:`sniff_format`)."""
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


def _check_format(path, fmt: str, label_field: str = "industry") -> None:
    """Refuse a file whose first line is clearly another format than ``fmt`` (:func:`sniff_format`).

    JSON Lines against CSV always conflict; ``blogs`` against ``yelp`` only when the first record lacks the
    field the requested loader needs (``stars`` for yelp, ``label_field`` for blogs).

    Raises:
        DataError: naming the file, what it looks like, the format asked for and the ``--format`` to pass.
    """
    guess, first = _sniff_line(_head_line(path))
    if guess is None or guess == fmt:
        return
    if {guess, fmt} == {"blogs", "yelp"} and (("stars" if fmt == "yelp" else label_field) in first):
        return
    raise DataError(f"{path}: the file looks like {_FORMAT_TEXT[guess]}, not format {fmt!r} "
                    f"({_FORMAT_TEXT.get(fmt, fmt)}); pass --format {guess} (pe-kit reproduce; fmt={guess!r} in "
                    f"Python, --set fmt={guess})")


def load_corpus(path=None, fmt: str = "auto", **kwargs) -> Corpus:
    """Dispatch to a loader by ``fmt`` (``blogs``, ``yelp``, ``sentiment140``) or by the file name when ``auto``.

    Raises:
        ValueError: unknown ``fmt``. FileNotFoundError: no such file (a folder is named as one).
        DataError: the file's first line is clearly another format (:func:`sniff_format`; the message names the
            ``--format`` to pass), or what the loader raises (file, line, field).
    """
    if path is None:
        return load_blogs(**kwargs)
    name = Path(path).name.lower()
    if fmt == "auto":
        fmt = "sentiment140" if name.endswith((".csv", ".csv.gz")) else "yelp" if "yelp" in name else "blogs"
    loaders = {"blogs": load_blogs, "yelp": load_yelp, "sentiment140": load_sentiment140}
    if fmt not in loaders:
        raise ValueError(f"fmt={fmt!r} is unknown; use one of {sorted(loaders)} or 'auto'")
    _check_format(_check_path(path), fmt, kwargs.get("label_field", "industry"))
    return loaders[fmt](path, **kwargs)


def load_bank_texts(path=None, limit: int | None = None, dedupe: bool = True) -> tuple[list[str], dict]:
    """Candidate bank texts from a JSON Lines file with a ``text`` field (default: the bundled bank A).

    Returns (texts, info) where info counts ``rows``, ``duplicates_removed`` and ``empty_removed``.
    Raises DataError on a malformed line (file and line named).
    """
    path = _check_path(path or default_bank_path())
    skipped: Counter = Counter()
    texts, seen = [], set()
    rows = 0
    for _, obj in _iter_json_lines(path, ("text",), "raise", skipped):
        rows += 1
        t = " ".join(str(obj["text"]).split())
        if not t:
            skipped["empty_removed"] += 1
            continue
        if dedupe and t in seen:
            skipped["duplicates_removed"] += 1
            continue
        seen.add(t)
        texts.append(t)
        if limit is not None and len(texts) >= limit:
            break
    return texts, {"source": str(path), "rows": rows, **skipped}
