"""User-partitioned text: loaders, record caps, data arms and seeded disjoint user splits.

Formats (../shared/data/README.md): Blog Authorship Corpus JSON Lines (gzip or plain; ``user_id``,
``text``, label field ``industry``), Yelp reviews JSON Lines (``user_id``, ``text``, ``stars``; streamed),
Sentiment140 CSV (no header; columns polarity, id, date, query, user, text; UTF-8 when every byte of the file is
valid UTF-8, else Latin-1 as the original dump, a file mixing the two refused; ``Corpus.report()["decoding"]`` says
which).
Paper: §3 and App. D ("Users and record cap"): m = 64 records; long arm (exactly 64 records, like Yelp),
short arm (32–64 records cut to tweet length, like Sentiment140); 500 aux, 500 calibration, 1000 test.

Error policy: a malformed line, a wrong encoding, a missing field or (Sentiment140) a malformed quote
raises ``DataError`` naming the file, the *physical* line and the field (``on_error="skip"`` counts and
reports such lines instead; nothing is silently rewritten); an empty text is a documented, counted skip;
users outside [min_records, max_records] are counted and excluded. ``Corpus.report()`` gives, per skip
rule, both what it counted (lines or users: ``skipped_<rule>``) and the records it removed
(``records_removed_<rule>``), and the records a rewrite changed (``records_changed_whitespace_normalised``: runs of
whitespace made one space), and the exact repeats of a (user_id, text) pair among the records kept
(``records_repeated``, ``users_with_repeats``: kept as records of their own; a UserWarning names them when they are
at least half of the records, as in a file concatenated with itself). Files may start with a UTF-8 byte-order
mark and use CRLF line ends. A gzip file that ends early (a truncated download or copy) is a ``DataError`` naming
the file, whatever ``on_error`` says.
One Blog user id whose records carry two different label sets (gender, age, industry, sign: two bloggers merged
by an id collision) raises ``DataError`` naming the id, both label sets and their lines (``on_error="skip"``: the
records of the later set are dropped, counted as ``label_conflict`` and named in a warning).

Memory: every loader reads its file in two streaming passes (``pe_kit.data.passes``: count the records
of each user, then keep only the admitted users' first m records), so what it holds is the records it returns
plus one count per user id, never every user's texts. ``pe_kit.data.corpus_cache`` keeps a selection on disk,
keyed by the file's content, for the notebooks of a run.
"""
from __future__ import annotations

import json
from collections import Counter
from importlib import resources
from pathlib import Path

from pe_kit.data.formats import FORMAT_TEXT, PROFILE_FIELDS, check_format, format_rows, json_lines, sniff_format
from pe_kit.data.passes import Scan, admitted, scan_corpus, select_corpus
from pe_kit.data.records import Corpus, DataError, User  # noqa: F401  (re-exported)

__all__ = ["TWEET_LENGTH", "PROFILE_FIELDS", "DataError", "User", "Corpus", "default_data_path", "default_bank_path",
           "default_bank_b_path", "bank_b_authors", "has_examples",
           "format_rows", "default_min_records", "folder_message", "load_blogs", "load_yelp", "load_sentiment140",
           "sniff_format", "load_corpus", "resolve_format", "load_bank_texts", "bank_text", "check_path"]

TWEET_LENGTH = 140


def default_data_path() -> Path:
    """Path of the bundled Blog sample (900 bloggers × 64 posts, ≤ 600 chars; Schler et al., 2006)."""
    return Path(str(resources.files("pe_kit") / "data_files" / "blogs-900.jsonl.gz"))


def default_bank_path() -> Path:
    """Path of the bundled label-only SmolLM2 bank for the Blog corpus (8,192 texts; "bank A")."""
    return Path(str(resources.files("pe_kit") / "data_files" / "blogs-bankA-smollm2.jsonl.gz"))


def default_bank_b_path(partial: bool = False) -> Path:
    """Path of the Blog corpus's bank B (label plus three public in-context examples, SmolLM2; paper App. C), or of
    its committed part (``partial=True``) while ``scripts/make_bank_b.py`` has not finished every shard. Either may
    be absent: check ``.is_file()``."""
    name = "blogs-bankB-smollm2.partial.jsonl.gz" if partial else "blogs-bankB-smollm2.jsonl.gz"
    return Path(str(resources.files("pe_kit") / "data_files" / name))


def bank_b_authors(path=None) -> frozenset[str]:
    """User ids whose records a bank-B file shows as in-context examples (each row's ``examples``: [[user id,
    record index], ...]); a world built on that bank keeps them out of every private split
    (``splits.split_users(reserved=)``).

    Args:
        path: a bank-B JSON Lines file (default: :func:`default_bank_b_path`).

    Raises:
        FileNotFoundError: no such file (bank B is built by ``scripts/make_bank_b.py``). IsADirectoryError: a folder.
        DataError: a malformed line, a row without ``examples``, an example that is not ``[user id, record index]``
            (a non-empty string or integer id, an integer index), or a file with no rows: each would reserve the
            wrong users, or none, and let an example author into a private split.
    """
    path = Path(path or default_bank_b_path())
    if path.is_dir():
        raise IsADirectoryError(f"bank-B path {path} is a folder; pass the bank-B file itself "
                                f"({default_bank_b_path().name}, built by scripts/make_bank_b.py)")
    if not path.is_file():
        raise FileNotFoundError(f"bank-B file {path} does not exist; build it with scripts/make_bank_b.py "
                                "(docs/banks.md) or pass the path of one")
    authors: set[str] = set()
    rows = 0
    for lineno, obj in json_lines(path, ("text", "examples"), "strict", Counter()):
        rows += 1
        authors.update(_example_authors(obj["examples"], path, lineno))
    if rows == 0:
        raise DataError(f"{path}: no rows; a bank-B file has one JSON object per line with 'text' and 'examples' "
                        "(rebuild it with scripts/make_bank_b.py)")
    return frozenset(authors)


def has_examples(path) -> bool:
    """Whether a bank file's first JSON object carries ``examples`` (a bank-B file, whatever its name or place).

    Args:
        path: a JSON Lines bank file (``.jsonl`` or ``.jsonl.gz``).

    Returns:
        False for a missing file, a folder, or a file whose first row has no ``examples`` (a plain bank).
    """
    path = Path(path)
    if not path.is_file():
        return False
    for _, obj in json_lines(path, ("text",), "skip", Counter()):
        return "examples" in obj
    return False


def _example_authors(examples, path: Path, lineno: int) -> list[str]:
    """The user ids of one bank-B row's ``examples`` ([[user id, record index], ...]), checked (DataError)."""
    def bad(what: str):
        return DataError(f"{path}: line {lineno}: 'examples' {what}; each row lists its in-context examples as "
                         "[[user id, record index], ...] (rebuild the file with scripts/make_bank_b.py)")
    if not isinstance(examples, list) or not examples:
        raise bad(f"is {json.dumps(examples)[:60]}, not a non-empty list")
    ids = []
    for ex in examples:
        if not (isinstance(ex, list) and len(ex) == 2):
            raise bad(f"holds {json.dumps(ex)[:60]}, not a [user id, record index] pair")
        uid, idx = ex
        ok_id = (isinstance(uid, str) and uid.strip()) or (isinstance(uid, int) and not isinstance(uid, bool))
        if not ok_id or not isinstance(idx, int) or isinstance(idx, bool):
            raise bad(f"holds {json.dumps(ex)[:60]}: the user id must be a non-empty string or integer and the "
                      "record index an integer")
        ids.append(str(uid))
    return ids


def default_min_records(fmt: str, record_cap: int) -> int:
    """Each format's default ``min_records`` (the paper's arms): blogs 1, yelp m, sentiment140 max(1, m // 2)."""
    return {"yelp": record_cap, "sentiment140": max(1, record_cap // 2)}.get(fmt, 1)


def _load(path: Path, fmt: str, record_cap: int, min_records: int | None, max_records: int | None,
          on_error: str, label_field: str = "industry", max_users: int | None = None) -> Corpus:
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error={on_error!r} must be 'raise' or 'skip'")
    min_records = default_min_records(fmt, record_cap) if min_records is None else min_records
    admitted(Scan(str(path), fmt, {}, Counter(), Counter()), record_cap, min_records, max_records)  # check caps
    rows = format_rows(path, fmt, label_field, on_error)
    scan = scan_corpus(path, rows, fmt, on_error)
    return select_corpus(path, rows, scan, record_cap, min_records, max_records, max_users)


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


def check_path(path) -> Path:
    """``path`` as a Path when it is an existing file. Raises IsADirectoryError (:func:`folder_message`) or
    FileNotFoundError naming it."""
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
        FileNotFoundError, IsADirectoryError (a folder: names the formats), DataError (file, line, field named;
        a truncated gzip file; one user id with two label sets, :data:`PROFILE_FIELDS`).
    """
    path = check_path(path or default_data_path())
    return _load(path, "blogs", record_cap, min_records, max_records, on_error, label_field)


def load_yelp(path, record_cap: int = 64, min_records: int | None = None, max_records: int | None = None,
              on_error: str = "raise", max_users: int | None = None) -> Corpus:
    """Stream Yelp Open Dataset reviews JSON Lines (``user_id``, ``text``, ``stars``; label = the stars of the
    user's first review).

    Defaults follow the paper's Yelp arm: exactly m records per user (``min_records=None`` means
    ``record_cap``, so a smaller cap admits users with that many reviews). Arguments, returns and
    errors as ``load_blogs``; ``max_users`` keeps the first that many admissible users (first-appearance
    order). Two streaming passes (module docstring): memory is the kept records plus one count per user id.
    """
    path = check_path(path)
    return _load(path, "yelp", record_cap, min_records, max_records, on_error, max_users=max_users)


def load_sentiment140(path, record_cap: int = 64, min_records: int | None = None, max_records: int | None = None,
                      on_error: str = "raise") -> Corpus:
    """Load Sentiment140 CSV: no header, columns polarity, id, date, query, user, text.

    Decoding: UTF-8 when every byte of the file is valid UTF-8 (a user's own export, emoji and all), else Latin-1
    (the original dump, which is not); ``report()["decoding"]`` names the one used.

    Label = polarity ("0", "2", "4") of the user's first tweet. Defaults follow the paper's arm: m/2 … m
    tweets per user (32–64 at m = 64; ``min_records=None`` means ``max(1, record_cap // 2)``, so a smaller cap
    still admits users). Raises DataError naming file, *physical* line (the first line of a record whose quoted
    text spans lines) and column for rows without 6 columns, a bad polarity, or a malformed quote (``csv``
    strict mode; with ``on_error="skip"`` counted as ``malformed_quote``). A malformed record that spans several
    lines (an unterminated quote) costs only its first line: the lines after it are read again, so a valid
    record there is kept, and the report counts exactly the lines lost.
    """
    path = check_path(path)
    return _load(path, "sentiment140", record_cap, min_records, max_records, on_error)


def resolve_format(path=None, fmt: str = "auto", label_field: str = "industry") -> tuple[Path, str]:
    """The file and format :func:`load_corpus` reads: ``fmt``, or when ``auto`` one guessed from the file name
    (``.csv`` → sentiment140, ``yelp`` in the name → yelp, else blogs); None = the bundled Blogs sample.

    Raises:
        ValueError: unknown ``fmt``. FileNotFoundError / IsADirectoryError: no such file (a folder is named).
        DataError: the file's first line is clearly another format (:func:`sniff_format`; names the ``--format``).
    """
    if path is None:
        return check_path(default_data_path()), "blogs"
    name = Path(path).name.lower()
    if fmt == "auto":
        fmt = "sentiment140" if name.endswith((".csv", ".csv.gz")) else "yelp" if "yelp" in name else "blogs"
    if fmt not in FORMAT_TEXT:
        raise ValueError(f"fmt={fmt!r} is unknown; use one of {sorted(FORMAT_TEXT)} or 'auto'")
    path = check_path(path)
    check_format(path, fmt, label_field)
    return path, fmt


def load_corpus(path=None, fmt: str = "auto", **kwargs) -> Corpus:
    """Dispatch to a loader by ``fmt`` (``blogs``, ``yelp``, ``sentiment140``) or by the file name when ``auto``
    (:func:`resolve_format`); ``kwargs`` go to the loader. ``pe_kit.data.corpus_cache.cached_corpus`` is the
    same selection, stored on disk by content.

    Raises:
        ValueError: unknown ``fmt``. FileNotFoundError: no such file (a folder is named as one).
        DataError: the file's first line is clearly another format (:func:`sniff_format`; the message names the
            ``--format`` to pass), or what the loader raises (file, line, field).
    """
    if path is None:
        return load_blogs(**kwargs)
    path, fmt = resolve_format(path, fmt, kwargs.get("label_field", "industry"))
    return {"blogs": load_blogs, "yelp": load_yelp, "sentiment140": load_sentiment140}[fmt](path, **kwargs)


def bank_text(text) -> str:
    """A bank entry as :func:`load_bank_texts` keeps it, and the key under which two entries are one: the text with
    its whitespace runs collapsed to single spaces and stripped (str; "" for an entry with no words)."""
    return " ".join(str(text).split())


def load_bank_texts(path=None, limit: int | None = None, dedupe: bool = True) -> tuple[list[str], dict]:
    """Candidate bank texts from a JSON Lines file with a ``text`` field (default: the bundled bank A).

    Returns (texts, info) where info counts ``rows``, ``duplicates_removed`` and ``empty_removed``.
    Raises DataError on a malformed line (file and line named).
    """
    path = check_path(path or default_bank_path())
    skipped: Counter = Counter()
    texts, seen = [], set()
    rows = 0
    for _, obj in json_lines(path, ("text",), "raise", skipped):
        rows += 1
        t = bank_text(obj["text"])
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
