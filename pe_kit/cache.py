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
from typing import Any, BinaryIO, Iterable

__all__ = ["cache_dir", "content_hash", "atomic_write_bytes", "read_verified", "write_verified", "file_digest",
           "tree_digest", "source_digest", "write_verified_stream", "open_verified"]


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


def _atomic_write_chunks(path: Path, chunks: Iterable[bytes]) -> str:
    """Write ``chunks`` to a temporary file beside ``path``, fsync, rename onto ``path``; return their SHA-256 hex.
    An interrupted write removes the temporary file and leaves ``path`` as it was. Raises ``OSError``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in chunks:
                h.update(chunk)
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return h.hexdigest()


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file in the same folder, fsync, rename).

    A reader never sees a half-written file; an interrupted write leaves the old file intact.
    Raises ``OSError`` if the folder cannot be written.
    """
    _atomic_write_chunks(Path(path), (data,))


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
        _drop(path, digest_path)
        return None
    return data


def _drop(*paths: Path) -> None:
    """Delete a corrupt file and its checksum (missing ones are fine), so that the next write replaces them."""
    for p in paths:
        try:
            p.unlink()
        except FileNotFoundError:
            pass



def write_verified_stream(path: Path | str, chunks: Iterable[bytes]) -> None:
    """:func:`write_verified` for data made piece by piece: ``chunks`` are hashed while they are written to a
    temporary file in the same folder (fsync, rename), then the SHA-256 goes to ``path + '.sha256'``.

    Memory is one chunk, not the whole file. An interrupted write leaves no file at ``path`` (or the old one).
    Raises ``OSError`` if the folder cannot be written, or what iterating ``chunks`` raises.
    """
    path = Path(path)
    digest = _atomic_write_chunks(path, chunks)
    atomic_write_bytes(path.with_name(path.name + ".sha256"), digest.encode())


def open_verified(path: Path | str) -> BinaryIO | None:
    """:func:`read_verified` without reading the file into memory: hash it in 4 MiB blocks, and return it open
    (binary, at offset 0) when it matches its ``.sha256``; else ``None`` (missing or corrupt: recompute; a
    corrupt file and its checksum are deleted). The caller closes the returned file. The open handle keeps the
    verified bytes even if an atomic write replaces the path meanwhile.
    """
    path = Path(path)
    digest_path = path.with_name(path.name + ".sha256")
    try:
        expected = digest_path.read_text().strip()
        fh = open(path, "rb")
    except OSError:
        return None
    h = hashlib.sha256()
    for block in iter(lambda: fh.read(1 << 22), b""):
        h.update(block)
    if h.hexdigest() == expected:
        fh.seek(0)
        return fh
    fh.close()
    _drop(path, digest_path)
    return None


# ------------------------------------------------------------------------------------------ file digests
_DIGEST_COUNT = {"hashed": 0}  # files actually read and hashed in this process (tests check short-cuts)


def _stat_key(st: os.stat_result) -> list:
    # ctime cannot be set by the user (``touch -d`` / ``os.utime`` set mtime only), so an in-place rewrite that
    # keeps size and mtime still changes it; inode and device catch a replaced file.
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def file_digest(path: Path | str) -> str:
    """SHA-256 hex digest of a file's bytes, with a stat short-cut that never replaces the digest.

    The digest is what keys depend on; recomputing it for a large file on every call would be slow, so
    the last digest of each absolute path is kept in a small sidecar ``cache_dir()/digests/<hash>.json``
    with the file's (size, mtime_ns, ctime_ns, inode, device). When all five are unchanged the stored
    digest is returned; any change (an in-place rewrite changes ctime even when size and mtime are
    forced back) re-hashes the bytes. A missing or unreadable sidecar is simply recomputed.

    Args:
        path: a regular file.

    Returns:
        64-character hex str.

    Raises:
        FileNotFoundError / OSError: if the file cannot be read.
    """
    path = Path(path).expanduser().resolve()
    st = path.stat()
    side = cache_dir() / "digests" / f"{hashlib.sha256(str(path).encode()).hexdigest()[:32]}.json"
    try:
        info = json.loads(side.read_text())
        if info.get("path") == str(path) and info.get("stat") == _stat_key(st) and len(info.get("sha256", "")) == 64:
            return info["sha256"]
    except (OSError, ValueError, AttributeError):
        pass
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    _DIGEST_COUNT["hashed"] += 1
    digest = h.hexdigest()
    if _stat_key(path.stat()) == _stat_key(st):  # unchanged while we read it: safe to remember
        try:
            atomic_write_bytes(side, json.dumps({"path": str(path), "stat": _stat_key(st), "sha256": digest}).encode())
        except OSError:
            pass
    return digest


def tree_digest(folder: Path | str, skip: tuple[str, ...] = (".git", "__pycache__", ".cache", ".locks")) -> str:
    """SHA-256 hex digest of every regular file under ``folder`` (relative path + :func:`file_digest`).

    Folders named in ``skip`` are ignored (VCS metadata, bytecode, download locks). Symbolic links are
    followed (Hugging Face snapshots link into a blob store). Two folders with equal files give equal
    digests wherever they live; any changed, added or removed file changes it.

    Raises:
        NotADirectoryError: if ``folder`` is not a folder.
    """
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
    """SHA-256 (16 hex) of the source files of pe_kit modules given as paths relative to the package
    (``"pe/multiround.py"``, or a folder such as ``"text/generators"`` for all its ``.py`` files).

    Part of cache keys whose results the named code determines. Raises FileNotFoundError for a missing path.
    """
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
