"""Content-addressed on-disk cache: keys from content hashes, atomic writes, verified reads.

Every heavy artefact of the kit (embeddings, generated texts, trial counts) is stored under
``cache_dir()`` by a key derived from *what produced it* (model id, input texts, settings), written
to a temporary file and renamed into place, and stored beside a SHA-256 of its bytes so that a
truncated or corrupt file is detected on read and recomputed rather than trusted.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["cache_dir", "content_hash", "atomic_write_bytes", "read_verified", "write_verified"]


def cache_dir() -> Path:
    """Return the kit's cache directory (env ``PE_KIT_CACHE``, default ``~/.cache/pe_kit``).

    The directory is created if missing. Returns a ``pathlib.Path``.
    """
    path = Path(os.environ.get("PE_KIT_CACHE", Path.home() / ".cache" / "pe_kit")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def content_hash(*parts: Any) -> str:
    """SHA-256 hex digest of a sequence of parts (str, bytes, numbers, or JSON-able objects).

    Strings are hashed as UTF-8 with a length prefix so that ``("ab", "c")`` and ``("a", "bc")``
    differ; iterables of strings are hashed element by element. Returns a 64-character hex string.
    """
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


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file in the same folder, fsync, rename).

    A reader never sees a half-written file; an interrupted write leaves the old file intact.
    Raises ``OSError`` if the folder cannot be written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_verified(path: Path | str, data: bytes) -> None:
    """Atomically write ``data`` to ``path`` and its SHA-256 to ``path + '.sha256'``."""
    path = Path(path)
    atomic_write_bytes(path, data)
    atomic_write_bytes(path.with_name(path.name + ".sha256"), hashlib.sha256(data).hexdigest().encode())


def read_verified(path: Path | str) -> bytes | None:
    """Return the bytes at ``path`` if they match the stored SHA-256, else ``None``.

    ``None`` means "missing or corrupt: recompute"; a corrupt file and its checksum are deleted so
    that the next ``write_verified`` replaces them.
    """
    path = Path(path)
    digest_path = path.with_name(path.name + ".sha256")
    try:
        data = path.read_bytes()
        expected = digest_path.read_text().strip()
    except (FileNotFoundError, OSError):
        return None
    if hashlib.sha256(data).hexdigest() != expected:
        for p in (path, digest_path):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
        return None
    return data

