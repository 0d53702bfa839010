"""Two streaming passes over a corpus file, memory bounded by what is kept (paper App. D): pass 1
(:func:`scan_corpus`) counts each user's valid records and skips, :func:`admitted` picks the users, pass 2
(:func:`select_corpus`) keeps their first m records in file order.
"""
from __future__ import annotations

import os
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from pe_kit.data.records import LINE_RULES, Corpus, DataError, User, fail, reserved_ids

__all__ = ["PASSES", "Scan", "scan_corpus", "admitted", "select_corpus", "file_stat", "Row", "Rows"]

#: Full passes over each data file in this process (resolved path → passes): the "parsed once" counter.
PASSES: Counter = Counter()

Row = tuple  # (physical line, user_id str, text str, label str, label set tuple or None)


@dataclass(frozen=True)
class Rows:
    """A format's row reader: ``read(skipped)`` makes one streaming pass (``Row`` iterator, skips counted in
    ``skipped``); ``decoding``: ``utf-8`` or ``latin-1``."""

    read: Callable[[Counter], Iterator[Row]]
    decoding: str = "utf-8"


@dataclass
class Scan:
    """Pass 1: ``counts`` (user id → valid records, uncapped, first-appearance order), ``skipped`` / ``removed`` (as
    ``Corpus``), ``stat`` (:func:`file_stat` at read) and ``decoding``."""

    source: str
    fmt: str
    counts: dict
    skipped: Counter
    removed: Counter
    stat: tuple = ()
    decoding: str = "utf-8"

    def records_per_user(self, record_cap: int) -> np.ndarray:
        """int64 array (U,): each user's records capped at ``record_cap``, in first-appearance order."""
        return np.minimum(np.fromiter(self.counts.values(), np.int64, len(self.counts)), record_cap)

    def reserved_records(self, reserved, record_cap: int) -> np.ndarray:
        """int64 array (R,): capped records of the ``reserved`` users in the file, in sorted id order. Raises
        TypeError as ``records.reserved_ids``."""
        ids = sorted(u for u in reserved_ids(reserved) if u in self.counts)
        return np.minimum(np.asarray([self.counts[u] for u in ids], dtype=np.int64), record_cap)


def file_stat(path: Path) -> tuple:
    """(size, mtime_ns) of a file: what pass 2 compares with pass 1's to refuse a file that changed."""
    st = os.stat(path)
    return (st.st_size, st.st_mtime_ns)


def _read(path: Path, rows: Iterator[Row], what: str) -> Iterator[Row]:
    """``rows``, the pass counted in :data:`PASSES` and shown as a ``pe_kit.progress`` step."""
    from pe_kit.progress import progress

    PASSES[str(Path(path).resolve())] += 1
    with progress(desc=f"read {Path(path).name} ({what})", unit="row") as bar:
        n = 0
        try:
            for row in rows:
                n += 1
                if n == 65536:
                    bar.update(n)
                    n = 0
                yield row
        finally:
            bar.update(n)


def _conflict(path, on_error, skipped, notes, line, uid, first, prof) -> None:
    msg = (f"{path}: line {line}: user_id {uid!r} carries two label sets: {_label_set(first[1])} from line "
           f"{first[0]} on, {_label_set(prof)} here (two users merged by an id collision?)")
    if on_error == "skip":
        skipped["label_conflict"] += 1
        notes.setdefault(uid, msg)
        return
    fail(on_error, skipped, "label_conflict", msg + "; give them distinct user_id values, or pass on_error='skip' "
          "to keep the first label set's records and count the others as label_conflict")


def _label_set(prof: tuple) -> str:
    return "{" + ", ".join(f"{k}={v!r}" for k, v in prof) + "}"


def scan_corpus(path: Path, rows: Rows, fmt: str, on_error: str = "raise") -> Scan:
    """Pass 1 (``Scan``): users' valid records and skips, no text kept; raises DataError (file, line, field)."""
    skipped: Counter = Counter()
    counts: dict[str, int] = {}
    profiles: dict[str, tuple] = {}
    canon: dict[tuple, tuple] = {}
    notes: dict[str, str] = {}
    stat = file_stat(path)
    for line, uid, text, _label, prof in _read(path, rows.read(skipped), "pass 1/2: records per user"):
        if not text or text.isspace():
            skipped["empty_text"] += 1
            continue
        if prof is not None:
            first = profiles.setdefault(uid, (line, canon.setdefault(prof, prof)))
            if first[1] != prof:
                _conflict(path, on_error, skipped, notes, line, uid, first, prof)
                continue
        counts[uid] = counts.get(uid, 0) + 1
    if notes:
        shown = "; ".join(list(notes.values())[:3])
        warnings.warn(f"{len(notes)} user id(s) carry two label sets; only each one's first set was kept, "
                      f"{skipped['label_conflict']} records of the others are counted as label_conflict: {shown}",
                      UserWarning, stacklevel=3)
    removed = Counter({rule: skipped[rule] for rule in ("empty_text", *LINE_RULES)})  # each line held one record
    return Scan(str(path), fmt, counts, +skipped, +removed, stat, rows.decoding)


def admitted(scan: Scan, record_cap: int, min_records: int, max_records: int | None,
             max_users: int | None = None) -> tuple[set, Counter, Counter]:
    """(ids, skipped, removed): the users a selection keeps from pass-1 counts under the user rules. Raises
    ValueError for inconsistent caps."""
    if record_cap < 1:
        raise ValueError(f"record_cap={record_cap} must be ≥ 1")
    if min_records < 1 or (max_records is not None and max_records < min_records):
        raise ValueError(f"need 1 ≤ min_records ≤ max_records; got {min_records}, {max_records}")
    if min_records > record_cap:
        raise ValueError(f"min_records={min_records} exceeds record_cap={record_cap}: every user would be "
                         "dropped (a user keeps at most record_cap records); lower min_records or raise record_cap")
    skipped, removed = Counter(scan.skipped), Counter(scan.removed)
    hi = max_records if max_records is not None else record_cap
    keep: set = set()
    for uid, n in scan.counts.items():
        kept = min(n, record_cap)
        if n > kept:
            skipped["over_record_cap"] += n - kept
            removed["over_record_cap"] += n - kept
        rule = None
        if max_users is not None and len(keep) >= max_users:
            rule = "user_beyond_max_users"
        elif kept < min_records:
            rule = "user_too_few_records"
        elif kept > hi:
            rule = "user_too_many_records"
        if rule is None:
            keep.add(uid)
        else:
            skipped[rule] += 1
            removed[rule] += kept
    return keep, +skipped, +removed


def select_corpus(path: Path, rows: Rows, scan: Scan, record_cap: int, min_records: int,
                  max_records: int | None = None, max_users: int | None = None) -> Corpus:
    """Pass 2: the first ``record_cap`` records of the users :func:`admitted` admits, whitespace normalised. Exact
    (user_id, text) repeats are kept; a UserWarning names them when they reach what a file concatenated with itself
    holds. Raises DataError when the file changed since pass 1; ValueError for inconsistent caps."""
    keep, skipped, removed = admitted(scan, record_cap, min_records, max_records, max_users)
    want = {uid: min(scan.counts[uid], record_cap) for uid in keep}
    texts: dict[str, list[str]] = {}
    labels: dict[str, str] = {}
    first: dict[str, tuple] = {}
    rewritten = 0  # kept records whose whitespace was normalised
    changed = scan.stat and file_stat(path) != scan.stat
    left = len(want)
    if left and not changed:
        for _line, uid, text, label, prof in _read(path, rows.read(Counter()), "pass 2/2: keep admitted users"):
            if uid not in want:
                continue
            norm = " ".join(text.split())
            if not norm or (prof is not None and first.setdefault(uid, prof) != prof):
                continue
            bucket = texts.setdefault(uid, [])
            labels.setdefault(uid, label)
            if len(bucket) < record_cap:
                bucket.append(norm)
                rewritten += norm != text
                if len(bucket) == want[uid]:
                    left -= 1
                    if not left:
                        break
    if changed or left or any(len(texts.get(u, ())) != n for u, n in want.items()):
        raise DataError(f"{path}: the file changed while it was read (pass 1 counted other records than pass 2 "
                        "found); let the copy or download finish, then load it again")
    users = [User(uid, tuple(texts[uid]), labels[uid]) for uid in scan.counts if uid in want]
    corpus = Corpus(users, str(path), skipped, removed, +Counter(whitespace_normalised=rewritten), scan.decoding)
    repeated, users_with = corpus.repeats()
    kept = sum(want.values())
    doubled = sum(n - min(-(-scan.counts[uid] // 2), n) for uid, n in want.items())
    if doubled and repeated >= doubled:  # doubled = 0: a copy would add no repeat, those held are the file's own
        warnings.warn(f"{path}: {repeated} of the {kept} records kept ({repeated / kept:.0%}, in {users_with} "
                      "users) repeat an earlier record of the same user (same user_id and text), "
                      "as in a file concatenated with itself (half of the records, less where the record cap cuts "
                      "a user's second copy); they are kept as records of their own, "
                      "so users hold extra records: if the file was merged from copies, deduplicate it (keep each "
                      "(user_id, text) pair once) and load it again", UserWarning, stacklevel=3)
    return corpus
