"""User-partitioned text loaders (paper §3, App. D: m = 64 records per user) for the formats of ``data.formats``,
gzip or plain, and bank files. A bad line raises ``DataError`` naming file, physical line and field
(``on_error="skip"`` counts it: ``Corpus.report()``).
"""
from __future__ import annotations

import json
from collections import Counter
from importlib import resources
from pathlib import Path

from pe_kit.data.formats import PROFILE_FIELDS, check_format, format_rows, json_lines, known_format, sniff_format
from pe_kit.data.passes import Scan, admitted, scan_corpus, select_corpus
from pe_kit.data.records import Corpus, DataError, User  # noqa: F401  (re-exported)

__all__ = ["TWEET_LENGTH", "PROFILE_FIELDS", "DataError", "User", "Corpus", "default_data_path", "default_bank_path",
           "default_bank_b_path", "bank_b_authors", "has_examples",
           "format_rows", "default_min_records", "folder_message", "load_blogs", "load_yelp", "load_sentiment140",
           "sniff_format", "load_corpus", "guess_format", "resolve_format", "load_bank_texts", "bank_text", "check_path"]

TWEET_LENGTH = 140


def _bundled(name: str) -> Path:
    return Path(str(resources.files("pe_kit") / "data_files" / name))


def default_data_path() -> Path:
    """Path of the bundled Blog sample (900 bloggers × 64 posts, ≤ 600 chars; Schler et al., 2006)."""
    return _bundled("blogs-900.jsonl.gz")


def default_bank_path() -> Path:
    """Path of the bundled label-only SmolLM2 bank for the Blog corpus (8,192 texts; "bank A")."""
    return _bundled("blogs-bankA-smollm2.jsonl.gz")


def default_bank_b_path(partial: bool = False) -> Path:
    """Path of the Blog corpus's bank B (label plus three public in-context examples, SmolLM2; paper App. C), or of
    its committed part (``partial=True``); either may be absent."""
    return _bundled("blogs-bankB-smollm2.partial.jsonl.gz" if partial else "blogs-bankB-smollm2.jsonl.gz")


def bank_b_authors(path=None) -> frozenset[str]:
    """User ids a bank-B file (default :func:`default_bank_b_path`) shows as in-context examples (``examples``:
    [[user id, record index], ...]). Raises FileNotFoundError, IsADirectoryError; DataError for a malformed line or
    example, a row without ``examples`` or a file with no rows."""
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
    """Whether a bank file's first object carries ``examples`` (bank B); False for a missing file."""
    path = Path(path)
    first = next(json_lines(path, ("text",), "skip", Counter()), None) if path.is_file() else None
    return first is not None and "examples" in first[1]


def _example_authors(examples, path: Path, lineno: int) -> list[str]:
    """The user ids of one bank-B row's ``examples``, checked (DataError)."""
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
    min_records = default_min_records(fmt, record_cap) if min_records is None else min_records
    admitted(Scan(str(path), fmt, {}, Counter(), Counter()), record_cap, min_records, max_records)  # check caps
    rows = format_rows(path, fmt, label_field, on_error)
    scan = scan_corpus(path, rows, fmt, on_error)
    return select_corpus(path, rows, scan, record_cap, min_records, max_records, max_users)


def folder_message(path, flag: str = "--data") -> str:
    """The error text for a folder given where one corpus file is expected, naming up to five corpus files in it."""
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


def check_path(path, flag: str = "path") -> Path:
    """``path`` as a Path if it is a file, else IsADirectoryError or FileNotFoundError naming ``flag``."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(folder_message(path, flag))
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} does not exist; pass an existing file as {flag} (default: "
                                "pe_kit.data.loaders.default_data_path())")
    return path


def load_blogs(path=None, record_cap: int = 64, min_records: int = 1, max_records: int | None = None,
               label_field: str = "industry", on_error: str = "raise") -> Corpus:
    """Load Blog Authorship Corpus JSON Lines (``user_id``, ``text``, label field) as a ``Corpus``.

    ``path``: default the bundled sample; ``record_cap``: m, the first m records per user in file order are kept
    (App. D); ``min_records``, ``max_records``: admissible records per user after the cap (default max = m);
    ``label_field``: ``industry``, ``gender`` or ``age``; ``on_error``: ``"raise"`` or ``"skip"``. Raises
    FileNotFoundError, IsADirectoryError, DataError (a bad line; one user id with two label sets)."""
    path = check_path(path or default_data_path())
    return _load(path, "blogs", record_cap, min_records, max_records, on_error, label_field)


def load_yelp(path, record_cap: int = 64, min_records: int | None = None, max_records: int | None = None,
              on_error: str = "raise", max_users: int | None = None) -> Corpus:
    """Load Yelp reviews JSON Lines (``user_id``, ``text``, ``stars`` of the user's first review as label).
    ``min_records=None``: ``record_cap``; ``max_users`` keeps the first that many admissible users. Otherwise as
    ``load_blogs``."""
    path = check_path(path)
    return _load(path, "yelp", record_cap, min_records, max_records, on_error, max_users=max_users)


def load_sentiment140(path, record_cap: int = 64, min_records: int | None = None, max_records: int | None = None,
                      on_error: str = "raise") -> Corpus:
    """Load Sentiment140 CSV (no header; polarity, id, date, query, user, text; UTF-8 else Latin-1), the polarity of
    the user's first tweet as label; ``min_records=None``: ``max(1, record_cap // 2)``. Otherwise as ``load_blogs``."""
    path = check_path(path)
    return _load(path, "sentiment140", record_cap, min_records, max_records, on_error)


def guess_format(path) -> str:
    """The format a file's name suggests: ``.csv`` → sentiment140, ``yelp`` in it → yelp, else blogs."""
    name = Path(path).name.lower()
    return "sentiment140" if name.endswith((".csv", ".csv.gz")) else "yelp" if "yelp" in name else "blogs"


def resolve_format(path=None, fmt: str = "auto", label_field: str = "industry") -> tuple[Path, str]:
    """(file, format) :func:`load_corpus` reads (None: the bundled Blogs sample; ``auto``: :func:`guess_format`).
    Raises ValueError (unknown ``fmt``), FileNotFoundError / IsADirectoryError, DataError (:func:`check_format`)."""
    if path is None:
        return check_path(default_data_path()), "blogs"
    fmt = known_format(guess_format(path) if fmt == "auto" else fmt)
    path = check_path(path)
    check_format(path, fmt, label_field)
    return path, fmt


def load_corpus(path=None, fmt: str = "auto", **kwargs) -> Corpus:
    """A loader by ``fmt`` or the file name (:func:`resolve_format`), given ``kwargs``; raises as both."""
    if path is None:
        return load_blogs(**kwargs)
    path, fmt = resolve_format(path, fmt, kwargs.get("label_field", "industry"))
    return {"blogs": load_blogs, "yelp": load_yelp, "sentiment140": load_sentiment140}[fmt](path, **kwargs)


def bank_text(text) -> str:
    """A bank entry as :func:`load_bank_texts` keeps and dedupes it: whitespace runs collapsed, stripped."""
    return " ".join(str(text).split())


def load_bank_texts(path=None, limit: int | None = None, dedupe: bool = True) -> tuple[list[str], dict]:
    """Bank texts from a JSON Lines ``text`` field (default: bundled bank A) and info counting ``rows``,
    ``duplicates_removed``, ``empty_removed``. Raises DataError on a malformed line."""
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
