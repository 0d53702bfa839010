"""One content-keyed on-disk cache under ``cache_dir()``: artefacts keyed by what produced them, written atomically
beside a SHA-256 of their bytes and trusted only when they match (a corrupt file is deleted and recomputed).
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tempfile
import threading
import zlib
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator, Sequence

import numpy as np

__all__ = ["cache_dir", "content_hash", "atomic_write_bytes", "write_verified", "open_verified", "read_verified",
           "drop_verified", "hash_file", "write_records", "read_records", "file_digest", "tree_digest", "source_digest",
           "KEY_BYTES", "text_key", "EmbeddingStore"]


def cache_dir() -> Path:
    """The kit's cache directory (env ``PE_KIT_CACHE``, default ``~/.cache/pe_kit``), created if missing."""
    path = Path(os.environ.get("PE_KIT_CACHE", Path.home() / ".cache" / "pe_kit")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def content_hash(*parts: Any) -> str:
    """SHA-256 hex of a sequence of parts (str, bytes, numbers, JSON-able); str parts carry a length prefix."""
    h = hashlib.sha256()
    for part in parts:
        _update(h, part)
    return h.hexdigest()


def _update(h: "hashlib._Hash", part: Any) -> None:
    if isinstance(part, bytes):
        h.update(b"b%d:" % len(part))
        h.update(part)
    elif isinstance(part, str):
        data = part.encode("utf-8")
        h.update(b"s%d:" % len(data))
        h.update(data)
    elif isinstance(part, (list, tuple)) and all(isinstance(x, str) for x in part):
        h.update(b"l%d:" % len(part))
        for x in part:
            _update(h, x)
    else:
        data = json.dumps(part, sort_keys=True, default=str).encode("utf-8")
        h.update(b"j%d:" % len(data))
        h.update(data)


def atomic_write_bytes(path: Path | str, data: bytes | Iterable[bytes]) -> str:
    """Write ``data`` (bytes, or chunks of bytes) to ``path`` atomically (temporary file, fsync, rename); returns the
    SHA-256 hex of what was written. Memory is one chunk. Raises ``OSError`` if the folder cannot be written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in ((data,) if isinstance(data, bytes) else data):
                h.update(chunk)
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return h.hexdigest()


def hash_file(fh: BinaryIO, h: "hashlib._Hash | None" = None) -> "hashlib._Hash":
    """``h`` (default a new SHA-256) updated with the rest of the binary file ``fh``, in 4 MiB blocks (memory: one)."""
    h = hashlib.sha256() if h is None else h
    for block in iter(lambda: fh.read(1 << 22), b""):
        h.update(block)
    return h


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def write_verified(path: Path | str, data: bytes | Iterable[bytes]) -> None:
    """:func:`atomic_write_bytes`, then the SHA-256 of ``data`` to ``path + '.sha256'`` (which commits the entry)."""
    path = Path(path)
    atomic_write_bytes(_sidecar(path), atomic_write_bytes(path, data).encode())


def drop_verified(path: Path | str) -> None:
    """Delete an entry and its checksum (missing ones are fine), so that the next write replaces them."""
    path = Path(path)
    for p in (path, _sidecar(path)):
        p.unlink(missing_ok=True)


def open_verified(path: Path | str) -> BinaryIO | None:
    """The file at ``path`` open (binary, offset 0) when its bytes match its ``.sha256``, else ``None`` (a corrupt file
    and its checksum are deleted). Hashes in 4 MiB blocks; the caller closes the file."""
    path = Path(path)
    try:
        expected = _sidecar(path).read_text().strip()
        fh = open(path, "rb")
    except OSError:
        return None
    if hash_file(fh).hexdigest() == expected:
        fh.seek(0)
        return fh
    fh.close()
    drop_verified(path)
    return None


def read_verified(path: Path | str) -> bytes | None:
    """The bytes at ``path`` if they match the stored SHA-256, else ``None`` (see :func:`open_verified`)."""
    fh = open_verified(path)
    if fh is None:
        return None
    with fh:
        return fh.read()


def write_records(path: Path | str, records: Iterable[Any]) -> None:
    """:func:`write_verified` of JSON records, one a line, gzip (fast level); memory is one record."""
    def lines() -> Iterator[bytes]:
        comp = zlib.compressobj(1, zlib.DEFLATED, 31)  # 31: the gzip container
        for rec in records:
            yield comp.compress(json.dumps(rec, ensure_ascii=False).encode("utf-8") + b"\n")
        yield comp.flush()
    write_verified(path, lines())


def read_records(path: Path | str) -> Iterator[Any] | None:
    """The records of a verified :func:`write_records` file, read lazily; ``None`` when missing or corrupt."""
    fh = open_verified(path)
    if fh is None:
        return None

    def records() -> Iterator[Any]:
        with fh, gzip.GzipFile(fileobj=fh, mode="rb") as gz:
            for raw in gz:
                yield json.loads(raw)
    return records()


_DIGEST_COUNT = {"hashed": 0}  # files actually read and hashed in this process (tests check short-cuts)


def _stat_key(st: os.stat_result) -> list:
    # ctime cannot be set by the user, so an in-place rewrite changes it; inode and device catch a replaced file.
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def file_digest(path: Path | str) -> str:
    """SHA-256 hex digest of a file's bytes; OSError if unreadable. Kept per absolute path in
    ``cache_dir()/digests`` and reused while (size, mtime_ns, ctime_ns, inode, device) are unchanged."""
    path = Path(path).expanduser().resolve()
    st = path.stat()
    side = cache_dir() / "digests" / f"{hashlib.sha256(str(path).encode()).hexdigest()[:32]}.json"
    try:
        info = json.loads(side.read_text())
        if info.get("path") == str(path) and info.get("stat") == _stat_key(st) and len(info.get("sha256", "")) == 64:
            return info["sha256"]
    except (OSError, ValueError, AttributeError):
        pass
    with open(path, "rb") as fh:
        digest = hash_file(fh).hexdigest()
    _DIGEST_COUNT["hashed"] += 1
    if _stat_key(path.stat()) == _stat_key(st):  # unchanged while we read it: safe to remember
        try:
            atomic_write_bytes(side, json.dumps({"path": str(path), "stat": _stat_key(st), "sha256": digest}).encode())
        except OSError:
            pass
    return digest


def tree_digest(folder: Path | str, skip: tuple[str, ...] = (".git", "__pycache__", ".cache", ".locks")) -> str:
    """SHA-256 hex digest of every regular file under ``folder`` (relative path + :func:`file_digest`), less folders
    named in ``skip``; symbolic links are followed. Raises NotADirectoryError if ``folder`` is not a folder."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder} is not a folder")
    parts = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if any(x in skip for x in rel.parts) or not p.is_file():
            continue
        parts.append((rel.as_posix(), file_digest(p)))
    return content_hash("tree/v1", parts)


def source_digest(*modules: str) -> str:
    """SHA-256 (16 hex) of pe_kit source files given relative to the package (``"pe/multiround.py"``, or a folder such
    as ``"text/generators"``). Raises FileNotFoundError for a missing path."""
    pkg = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for rel in modules:
        target = pkg / rel
        files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
        if not files or not all(f.is_file() for f in files):
            raise FileNotFoundError(f"pe_kit/{rel} does not exist")
        for f in files:
            h.update(f.relative_to(pkg).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


KEY_BYTES = 16
SMALL_SEGMENT = 2048
MAX_SMALL_SEGMENTS = 16


def text_key(text: str) -> bytes:
    """Content key of one text: the first 16 bytes of SHA-256 of its UTF-8 (collision odds ~n²/2¹²⁹)."""
    return hashlib.sha256(text.encode("utf-8")).digest()[:KEY_BYTES]


class EmbeddingStore:
    """Append-only float32 rows keyed per text (:func:`text_key`) in one folder, with an in-memory index.

    A *segment* is two verified files written once: ``<seg>.npy`` (rows, first) and ``<seg>.keys`` (n × 16 key bytes,
    last: it commits the segment), so concurrent writers never lose rows; a corrupt segment is dropped and its texts
    count as missing. One instance per folder and process (:meth:`open`); thread-safe."""

    _open: dict[str, "EmbeddingStore"] = {}
    _open_lock = threading.Lock()

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._index: dict[bytes, tuple[str, int]] = {}
        self._sizes: dict[str, int] = {}
        self._lock = threading.RLock()

    @classmethod
    def open(cls, folder: str | Path) -> "EmbeddingStore":
        """The process-wide store for ``folder`` (its index is built once and kept up to date)."""
        key = str(Path(folder).resolve())
        with cls._open_lock:
            return cls._open.setdefault(key, cls(folder))

    def refresh(self) -> None:
        """Index segments written since the last scan (by any process); forget removed ones."""
        with self._lock:
            present = {p.name[:-5] for p in self.folder.glob("*.keys")} if self.folder.is_dir() else set()
            for seg in set(self._sizes) - present:
                self._forget(seg)
            for seg in sorted(present - set(self._sizes)):
                raw = read_verified(self.folder / f"{seg}.keys")
                if raw is None or len(raw) % KEY_BYTES:
                    continue
                self._sizes[seg] = len(raw) // KEY_BYTES
                for row in range(self._sizes[seg]):
                    self._index.setdefault(raw[row * KEY_BYTES:(row + 1) * KEY_BYTES], (seg, row))

    def _forget(self, seg: str) -> None:
        self._sizes.pop(seg, None)
        for k in [k for k, (s, _) in self._index.items() if s == seg]:
            del self._index[k]

    def _read_segment(self, seg: str) -> np.ndarray | None:
        data = read_verified(self.folder / f"{seg}.npy")
        arr = np.load(io.BytesIO(data), allow_pickle=False) if data is not None else None
        ok = arr is not None and arr.dtype == np.float32 and arr.ndim == 2 and arr.shape[0] == self._sizes.get(seg)
        return arr if ok else None

    def get(self, keys: Iterable[bytes]) -> dict[bytes, np.ndarray]:
        """Rows stored for ``keys`` → dict key → float32 (d,) (absent keys are simply not in the dict)."""
        keys = list(keys)
        out: dict[bytes, np.ndarray] = {}
        with self._lock:
            for _ in range(2):
                self.refresh()
                by_seg: dict[str, list[tuple[bytes, int]]] = {}
                for k in keys:
                    hit = self._index.get(k) if k not in out else None
                    if hit is not None:
                        by_seg.setdefault(hit[0], []).append((k, hit[1]))
                failed = False
                for seg, items in by_seg.items():
                    arr = self._read_segment(seg)
                    if arr is None:
                        failed = True
                        self._drop(seg)
                        continue
                    out.update((k, arr[row]) for k, row in items)
                if not failed:
                    break
        return out

    def _drop(self, seg: str) -> None:
        self._forget(seg)
        for suffix in (".keys", ".npy"):
            drop_verified(self.folder / f"{seg}{suffix}")

    def put(self, keys: Sequence[bytes], rows: np.ndarray) -> str:
        """Store ``rows`` (float32 (n, d)) under ``keys`` (n distinct 16-byte keys) as one new segment; returns its
        name. Raises ValueError if the lengths or the key size disagree."""
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[0] != len(keys) or any(len(k) != KEY_BYTES for k in keys):
            raise ValueError(f"put needs n keys of {KEY_BYTES} bytes and rows (n, d); got {len(keys)} keys, "
                             f"rows {rows.shape}")
        with self._lock:
            seg = self._write(keys, rows)
            self._sizes[seg] = len(keys)
            for row, k in enumerate(keys):
                self._index.setdefault(k, (seg, row))
        if len(keys) < SMALL_SEGMENT:
            self.compact()
        return seg

    def compact(self, max_small: int = MAX_SMALL_SEGMENTS) -> bool:
        """Merge the segments under 2,048 rows into one when there are more than ``max_small``; True if merged."""
        with self._lock:
            small = sorted(s for s, n in self._sizes.items() if n < SMALL_SEGMENT)
            if len(small) <= max_small:
                return False
            merged: dict[bytes, np.ndarray] = {}
            for seg in small:
                arr, raw = self._read_segment(seg), read_verified(self.folder / f"{seg}.keys")
                if arr is None or raw is None:
                    self._drop(seg)
                    continue
                for row in range(arr.shape[0]):
                    merged.setdefault(raw[row * KEY_BYTES:(row + 1) * KEY_BYTES], arr[row])
            if not merged:
                return False
            new = self._write(list(merged), np.stack(list(merged.values())))
            for seg in small:
                if seg != new:
                    self._drop(seg)
            self._index.clear()
            self._sizes.clear()
            self.refresh()
            return True

    def _write(self, keys: Sequence[bytes], rows: np.ndarray) -> str:
        raw = b"".join(keys)
        seg = content_hash("segment", raw)[:20]
        buf = io.BytesIO()
        np.save(buf, rows, allow_pickle=False)
        write_verified(self.folder / f"{seg}.npy", buf.getvalue())  # rows first ...
        write_verified(self.folder / f"{seg}.keys", raw)  # ... then the keys, which commit the segment
        return seg
