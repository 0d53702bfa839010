"""A corpus selection kept on disk by content, so that a run parses its data file once.

``cached_scan`` stores pass 1 (``pe_kit.data.passes``) and ``cached_corpus`` pass 2 under ``cache_dir()/corpora/``
as verified JSON records, keyed by the file's bytes, every loader setting and the loader's source. Every pass over
a data file (a cache miss) is logged to stderr and to ``cache_dir()/corpora/parses.log``.
"""
from __future__ import annotations

import json
import os
import sys
import time
import warnings
from collections import Counter
from itertools import chain
from pathlib import Path

from pe_kit.cache import cache_dir, content_hash, file_digest, read_records, source_digest, write_records
from pe_kit.data.loaders import default_min_records, format_rows, resolve_format
from pe_kit.data.passes import Scan, file_stat, scan_corpus, select_corpus
from pe_kit.data.records import Corpus, DataError, User

__all__ = ["cached_scan", "cached_corpus", "scan_key", "corpus_key", "run_isolated"]

_CODE = ("data/loaders.py", "data/formats.py", "data/passes.py", "data/records.py", "data/corpus_cache.py")


def _folder() -> Path:
    return cache_dir() / "corpora"


def _log(what: str, path: Path, key: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    line = f"{stamp} pid={os.getpid()} {what} {path} key={key[:16]}"
    print(f"pe_kit.data: {line}", file=sys.stderr, flush=True)
    try:
        _folder().mkdir(parents=True, exist_ok=True)
        with open(_folder() / "parses.log", "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except OSError:
        pass


def scan_key(path: Path, fmt: str, label_field: str = "industry", on_error: str = "raise") -> str:
    """Key of pass 1: the file's SHA-256, the format, the Blog label field, ``on_error`` and the loader code."""
    return content_hash("corpus-scan/v1", file_digest(path), fmt, label_field if fmt == "blogs" else None,
                        on_error, source_digest(*_CODE))


def corpus_key(skey: str, record_cap: int, min_records: int, max_records: int | None, max_users: int | None) -> str:
    """Key of one selection: the scan's key and the user rules (``min_records`` already resolved)."""
    return content_hash("corpus/v1", skey, record_cap, min_records, max_records, max_users)


def _noting(fn):
    """(fn(), its warnings' text): stored with the result, so that a cache hit repeats them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    for w in caught:
        warnings.warn(w.message, w.category, stacklevel=3)
    return out, "; ".join(str(w.message) for w in caught)


def cached_scan(data=None, fmt: str = "auto", label_field: str = "industry", on_error: str = "raise") -> Scan:
    """Pass 1 of ``data`` (None: the bundled Blogs sample) as ``Scan``, cached. Raises what ``load_corpus`` raises."""
    path, fmt = resolve_format(data, fmt, label_field)
    key = scan_key(path, fmt, label_field, on_error)
    target = _folder() / f"{key[:32]}.scan.jsonl.gz"
    lines = read_records(target)
    if lines is not None:
        head = next(lines)
        counts: dict[str, int] = {}
        for chunk in lines:
            counts.update(zip(chunk["ids"], chunk["counts"]))
        if head.get("warning"):
            warnings.warn(head["warning"], UserWarning, stacklevel=2)
        return Scan(str(path), fmt, counts, Counter(head["skipped"]), Counter(head["removed"]), file_stat(path),
                    head["decoding"])
    rows = format_rows(path, fmt, label_field, on_error)
    scan, note = _noting(lambda: scan_corpus(path, rows, fmt, on_error))
    _log("pass 1/2 (records per user)", path, key)
    ids = list(scan.counts)
    head = {"v": 1, "source": str(path), "fmt": fmt, "users": len(ids), "skipped": dict(scan.skipped),
            "removed": dict(scan.removed), "decoding": scan.decoding, "warning": note}
    parts = (ids[i:i + 20000] for i in range(0, len(ids), 20000))
    write_records(target, chain([head], ({"ids": part, "counts": [scan.counts[u] for u in part]} for part in parts)))
    return scan


def cached_corpus(data=None, fmt: str = "auto", *, record_cap: int = 64, min_records: int | None = None,
                  max_records: int | None = None, on_error: str = "raise", label_field: str = "industry",
                  max_users: int | None = None) -> Corpus:
    """``load_corpus(data, fmt, …)``, cached (``min_records=None``: ``default_min_records``). Raises what the loaders
    raise."""
    path, fmt = resolve_format(data, fmt, label_field)
    min_records = default_min_records(fmt, record_cap) if min_records is None else min_records
    skey = scan_key(path, fmt, label_field, on_error)
    key = corpus_key(skey, record_cap, min_records, max_records, max_users)
    target = _folder() / f"{key[:32]}.corpus.jsonl.gz"
    lines = read_records(target)
    if lines is not None:
        head = next(lines)
        users = [User(u, tuple(texts), label) for u, label, texts in lines]
        if head.get("warning"):
            warnings.warn(head["warning"], UserWarning, stacklevel=2)
        return Corpus(users, str(path), Counter(head["skipped"]), Counter(head["removed"]), Counter(head["changed"]),
                      head["decoding"])
    scan, note = _noting(lambda: cached_scan(path, fmt, label_field, on_error))
    corpus, note2 = _noting(lambda: select_corpus(path, format_rows(path, fmt, label_field, on_error), scan,
                                                  record_cap, min_records, max_records, max_users))
    note = "; ".join(filter(None, (note, note2)))
    del scan
    _log("pass 2/2 (keep admitted users)", path, key)
    head = {"v": 1, "source": str(path), "users": len(corpus.users), "skipped": dict(corpus.skipped),
            "removed": dict(corpus.removed), "changed": dict(corpus.changed), "decoding": corpus.decoding,
            "warning": note}
    write_records(target, chain([head], ([u.user_id, u.label, list(u.texts)] for u in corpus.users)))
    return corpus


_ERRORS = {"DataError": DataError, "ValueError": ValueError, "FileNotFoundError": FileNotFoundError,
           "IsADirectoryError": IsADirectoryError}


def _task(task: str, kw: dict) -> dict:
    if task == "profile":
        scan = cached_scan(kw.get("data"), kw.get("fmt", "auto"), kw.get("label_field", "industry"),
                           kw.get("on_error", "raise"))
        cap = int(kw["record_cap"])
        return {"records": scan.records_per_user(cap).tolist(),
                "reserved": scan.reserved_records(kw.get("reserved", ()), cap).tolist()}
    if task == "select":
        c = cached_corpus(kw.get("data"), kw.get("fmt", "auto"), record_cap=int(kw["record_cap"]),
                          on_error=kw.get("on_error", "raise"), label_field=kw.get("label_field", "industry"))
        rep = c.report()
        return {"users": rep["users"], "records": rep["records"]}
    raise ValueError(f"task={task!r} must be 'profile' or 'select'")


def run_isolated(task: str, **kwargs) -> dict:
    """Run :func:`cached_scan` (``task="profile"``: ``{"records": [...], "reserved": [...]}``, records per user capped
    at record_cap) or :func:`cached_corpus` (``task="select"``: ``{"users", "records"}``) in a child Python process,
    so the caller never holds the parsed file. The child's stderr goes to this process's stderr.

    Raises: the child's DataError / ValueError / FileNotFoundError / IsADirectoryError with its message;
        RuntimeError naming the exit status when the child died without one."""
    import subprocess

    kw = {k: (str(v) if isinstance(v, Path) else v) for k, v in kwargs.items()}
    proc = subprocess.run([sys.executable, "-m", "pe_kit.data.corpus_cache", task, json.dumps(kw)],
                          stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    lines = proc.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        out = {}
    if "error" in out:
        raise _ERRORS.get(out["error"], RuntimeError)(out["message"])
    if proc.returncode or "result" not in out:
        raise RuntimeError(f"reading {kw.get('data')} in a child process failed (exit status {proc.returncode}; "
                           "-9 means it was killed, e.g. for memory); its messages are above")
    return out["result"]


def _main(argv: list[str]) -> int:
    task, kw = argv[0], json.loads(argv[1])
    try:
        out = {"result": _task(task, kw)}
    except (DataError, ValueError, FileNotFoundError, IsADirectoryError) as exc:
        out = {"error": type(exc).__name__ if type(exc).__name__ in _ERRORS else "ValueError", "message": str(exc)}
    print(json.dumps(out), flush=True)
    return 0 if "result" in out else 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
