"""Progress of long steps: :func:`progress` returns a ``tqdm`` bar. Interactive: a ``tqdm.auto`` bar. Headless
(``PE_KIT_HEADLESS=1``, the kernels of ``pe-kit reproduce``): plain lines on stderr at most every
``PE_KIT_PROGRESS_INTERVAL`` seconds, a nested step's only once it has run that long. ``PE_KIT_PROGRESS=off`` hides
everything.
"""
from __future__ import annotations

import os
import sys
from typing import Iterable

from tqdm import std

__all__ = ["progress", "headless", "progress_interval"]

#: a headless bar's lines (``bar_format``), by whether the total is known: while it runs, and its last line
_LINE = {True: "{desc}: {n_fmt}/{total_fmt} {unit} ({percentage:.0f}%) [{elapsed} elapsed, ETA {remaining}, "
               "{rate_fmt}]",
         False: "{desc}: {n_fmt} {unit} [{elapsed} elapsed, {rate_fmt}]"}
_END = {True: "{desc}: {n_fmt}/{total_fmt} {unit} in {elapsed}, {rate_fmt}",
        False: "{desc}: {n_fmt} {unit} in {elapsed}, {rate_fmt}"}


def headless() -> bool:
    """True when ``PE_KIT_HEADLESS`` is set to anything but ``""`` / ``"0"`` (a ``pe-kit reproduce`` kernel)."""
    return os.environ.get("PE_KIT_HEADLESS", "") not in ("", "0")


def progress_interval() -> float:
    """Seconds between headless lines: ``PE_KIT_PROGRESS_INTERVAL`` (default 10); ValueError unless a number ≥ 0."""
    raw = os.environ.get("PE_KIT_PROGRESS_INTERVAL", "10")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"PE_KIT_PROGRESS_INTERVAL={raw!r} must be a number of seconds ≥ 0, e.g. 10")
    return value


class _Stderr:
    """The file of a headless bar: each status tqdm draws becomes one line on the current ``sys.stderr``."""

    def write(self, s: str) -> None:
        line = s.replace("\r", "").rstrip()  # tqdm redraws in place: a carriage return, the status, blank padding
        if line:
            sys.stderr.write(line + "\n")

    def flush(self) -> None:
        sys.stderr.flush()


class _Lines(std.tqdm):
    """A headless bar (:func:`progress`): its last line says how long the step took."""

    def close(self) -> None:
        self.bar_format = _END[self.total is not None]
        super().close()


def progress(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
             unit: str = "it") -> std.tqdm:
    """A progress bar over ``iterable``, or over ``total`` units (None = unknown) counted with ``update(n)``;
    ``describe(desc)`` renames it. Raises ValueError for a ``total`` not an integer ≥ 0 or a bad interval."""
    if total is not None and (int(total) != total or total < 0):
        raise ValueError(f"total={total!r} must be an integer ≥ 0 (or None when unknown)")
    total = len(iterable) if total is None and hasattr(iterable, "__len__") else total  # type: ignore[arg-type]
    total = None if total is None else int(total)
    off = os.environ.get("PE_KIT_PROGRESS", "").lower() in ("off", "0", "none", "false")
    nested = any(getattr(b, "describe", None) for b in std.tqdm._instances)  # inside another pe_kit step's bar
    if headless():
        interval = progress_interval()
        bar = _Lines(iterable, total=total, desc=desc, unit=unit, disable=off, file=_Stderr(), position=0,
                     leave=True, mininterval=interval, miniters=1, delay=interval if nested else 0,
                     bar_format=_LINE[total is not None])
    elif off:
        bar = std.tqdm(iterable, total=total, disable=True)  # no front end to load for a hidden bar
    else:
        from tqdm.auto import tqdm

        bar = tqdm(iterable, total=total, desc=desc, unit=unit, leave=not nested)
    bar.describe = bar.set_description_str
    return bar
