"""Per-text embedding cache: an append-only store of verified segments with an in-memory index.

Design. The unit of caching is one *text* (key: the first 16 bytes of SHA-256 of its UTF-8),
not a chunk of texts, so repeats inside a call and texts that land in differently aligned chunks are
encoded once. One folder per embedding identity (model, max_seq_length, backend; see
``pe_kit.text.encoder.embedding_store_key``) holds *segments*; a segment is two files written once and
never modified:

* ``<seg>.npy`` — float32 (n, d) rows, written first;
* ``<seg>.keys`` — n × 16 key bytes, written last (its presence commits the segment);

each written atomically (temporary file + fsync + rename) with a SHA-256 sidecar (``pe_kit.cache``), so
a reader never trusts a torn or corrupt file: it drops the segment and the texts are re-encoded.

Why segments and not one file per key prefix: an encode of b new texts writes O(b) bytes and two files
(prefix shards would rewrite every touched shard, i.e. the whole store per block), concurrent writers
never lose each other's rows (distinct segment names, no read-modify-write), and a lookup reads the
small key files plus only the segments that hold wanted rows. Many small segments (small calls) are
merged into one when they pile up (:meth:`EmbeddingStore.compact`); a reader that meets a segment
removed by a concurrent merge rescans the folder once and re-encodes whatever is still missing.

Source: the kit's own engineering; integrity from ``pe_kit.cache.write_verified`` / ``read_verified``.
"""
from __future__ import annotations

import hashlib
import io
import threading
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from pe_kit.cache import content_hash, read_verified, write_verified

__all__ = ["KEY_BYTES", "text_key", "EmbeddingStore"]

KEY_BYTES = 16
SMALL_SEGMENT = 2048
MAX_SMALL_SEGMENTS = 16


def text_key(text: str) -> bytes:
    """Content key of one text: the first 16 bytes of SHA-256 of its UTF-8 (collision odds ~n²/2¹²⁹)."""
    return hashlib.sha256(text.encode("utf-8")).digest()[:KEY_BYTES]


class EmbeddingStore:
    """Append-only, content-keyed float32 rows in one folder (see the module docstring).

    Args:
        folder: the store's folder (created on first write).

    One instance per folder and process is shared through :meth:`open`; methods are thread-safe.
    """

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
            if key not in cls._open:
                cls._open[key] = cls(folder)
            return cls._open[key]

    # ---------------------------------------------------------------- index
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
                keys = [raw[i:i + KEY_BYTES] for i in range(0, len(raw), KEY_BYTES)]
                self._sizes[seg] = len(keys)
                for row, k in enumerate(keys):
                    self._index.setdefault(k, (seg, row))

    def _forget(self, seg: str) -> None:
        self._sizes.pop(seg, None)
        for k in [k for k, (s, _) in self._index.items() if s == seg]:
            del self._index[k]

    def __len__(self) -> int:
        with self._lock:
            return len(self._index)

    def missing(self, keys: Iterable[bytes]) -> list[bytes]:
        """The keys among ``keys`` the store holds no row for, in order (from the index; no row is read)."""
        with self._lock:
            self.refresh()
            return [k for k in keys if k not in self._index]

    # ---------------------------------------------------------------- read
    def _read_segment(self, seg: str) -> np.ndarray | None:
        data = read_verified(self.folder / f"{seg}.npy")
        if data is None:
            return None
        arr = np.load(io.BytesIO(data), allow_pickle=False)
        if arr.dtype != np.float32 or arr.ndim != 2 or arr.shape[0] != self._sizes.get(seg, -1):
            return None
        return arr

    def get(self, keys: Iterable[bytes]) -> dict[bytes, np.ndarray]:
        """Rows stored for ``keys`` → dict key → float32 (d,) (absent keys are simply not in the dict).

        A segment that is missing or fails its checksum is dropped (its files deleted) and its keys
        reported absent, after one rescan of the folder.
        """
        keys = list(keys)
        out: dict[bytes, np.ndarray] = {}
        with self._lock:
            for attempt in range(2):
                self.refresh()
                by_seg: dict[str, list[tuple[bytes, int]]] = {}
                for k in keys:
                    if k in out:
                        continue
                    hit = self._index.get(k)
                    if hit is not None:
                        by_seg.setdefault(hit[0], []).append((k, hit[1]))
                failed = False
                for seg, items in by_seg.items():
                    arr = self._read_segment(seg)
                    if arr is None:
                        failed = True
                        self._drop(seg)
                        continue
                    for k, row in items:
                        out[k] = arr[row]
                if not failed:
                    break
        return out

    def _drop(self, seg: str) -> None:
        self._forget(seg)
        for suffix in (".keys", ".keys.sha256", ".npy", ".npy.sha256"):
            try:
                (self.folder / f"{seg}{suffix}").unlink()
            except FileNotFoundError:
                pass

    # ---------------------------------------------------------------- write
    def put(self, keys: Sequence[bytes], rows: np.ndarray) -> str:
        """Store ``rows`` (float32 (n, d)) under ``keys`` (n distinct 16-byte keys) as one new segment.

        Returns the segment name. Raises ValueError if the lengths or the key size disagree.
        """
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[0] != len(keys) or any(len(k) != KEY_BYTES for k in keys):
            raise ValueError(f"put needs n keys of {KEY_BYTES} bytes and rows (n, d); got {len(keys)} keys, rows {rows.shape}")
        with self._lock:
            seg = self._write(keys, rows)
            self._sizes[seg] = len(keys)
            for row, k in enumerate(keys):
                self._index.setdefault(k, (seg, row))
        if len(keys) < SMALL_SEGMENT:
            self.compact()
        return seg

    def compact(self, max_small: int = MAX_SMALL_SEGMENTS) -> bool:
        """Merge the segments under 2,048 rows into one when there are more than ``max_small`` of them.

        Returns True if a merge happened. The merged segment is committed before the old ones are removed.
        """
        with self._lock:
            small = sorted(s for s, n in self._sizes.items() if n < SMALL_SEGMENT)
            if len(small) <= max_small:
                return False
            keys: list[bytes] = []
            rows: list[np.ndarray] = []
            seen: set[bytes] = set()
            for seg in small:
                arr = self._read_segment(seg)
                raw = read_verified(self.folder / f"{seg}.keys")
                if arr is None or raw is None:
                    self._drop(seg)
                    continue
                for row in range(arr.shape[0]):
                    k = raw[row * KEY_BYTES:(row + 1) * KEY_BYTES]
                    if k not in seen:
                        seen.add(k)
                        keys.append(k)
                        rows.append(arr[row])
            if not keys:
                return False
            merged = self._write(keys, np.stack(rows))
            for seg in small:
                if seg != merged:
                    self._drop(seg)
            self._index.clear()
            self._sizes.clear()
            self.refresh()
            return True

    def _write(self, keys: Sequence[bytes], rows: np.ndarray) -> str:
        raw = b"".join(keys)
        seg = content_hash("segment", raw)[:20]
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(rows, dtype=np.float32), allow_pickle=False)
        write_verified(self.folder / f"{seg}.npy", buf.getvalue())  # rows first ...
        write_verified(self.folder / f"{seg}.keys", raw)  # ... then the keys, which commit the segment
        return seg
