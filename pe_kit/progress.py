"""Progress of long steps: ``progress(total=n, desc=..., unit=...)`` returns a :class:`Progress` (``update``,
``close``, context manager, iterator).

Interactive: a ``tqdm.auto`` bar (``leave=False`` for a nested step). Headless (``PE_KIT_HEADLESS=1``): plain
lines only — stderr gets one line per outermost step when it ends (``audit long/bankA: 25/25 canary in 00:41
(0.61 canary/s)``); ``PE_KIT_PROGRESS_FILE`` gets start lines, k-of-n updates with ETA at most every
``PE_KIT_PROGRESS_INTERVAL`` seconds (default 10) and end lines of long steps (outermost ones always, unless
``PE_KIT_PROGRESS_STREAMED=1``). ``PE_KIT_PROGRESS=off`` hides everything. Lines use ``tqdm.std.tqdm.format_meter``.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Iterable, Iterator

__all__ = ["Progress", "progress", "headless", "progress_interval", "streamed"]

_LOCK = threading.Lock()
_ACTIVE: list["Progress"] = []  # open steps, outermost first
_LAST_UPDATE = [0.0]  # time of the last update line written to the progress file (all steps share it)


def headless() -> bool:
    """True when ``PE_KIT_HEADLESS`` is set to anything but ``""`` / ``"0"`` (a ``pe-kit reproduce`` kernel)."""
    return os.environ.get("PE_KIT_HEADLESS", "") not in ("", "0")


def streamed() -> bool:
    """Like :func:`headless` for ``PE_KIT_PROGRESS_STREAMED``: end lines go to stderr only."""
    return os.environ.get("PE_KIT_PROGRESS_STREAMED", "") not in ("", "0")


def progress_interval() -> float:
    """Seconds between update lines: ``PE_KIT_PROGRESS_INTERVAL`` (default 10); ValueError unless a number ≥ 0."""
    raw = os.environ.get("PE_KIT_PROGRESS_INTERVAL", "10")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"PE_KIT_PROGRESS_INTERVAL={raw!r} must be a number of seconds ≥ 0, e.g. 10")
    return value


def _append(path: str, line: str) -> None:
    """Append one line to the progress file (opened per line: a reader sees whole lines; errors ignored)."""
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except OSError:
        pass


class Progress:
    """One step's progress (:func:`progress`): ``n`` done, ``total``, ``desc``, ``unit``, ``depth`` (0 = outermost)."""

    def __init__(self, iterable: Iterable | None = None, total: int | None = None, desc: str = "",
                 unit: str = "it") -> None:
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        if total is not None and (int(total) != total or total < 0):
            raise ValueError(f"total={total!r} must be an integer ≥ 0 (or None when unknown)")
        self.iterable, self.total, self.desc, self.unit = iterable, None if total is None else int(total), desc, unit
        self.n = 0
        self.closed = False
        self._t0 = time.monotonic()
        mode = os.environ.get("PE_KIT_PROGRESS", "").lower()
        self._off = mode in ("off", "0", "none", "false")
        self._headless = headless()
        self._file = os.environ.get("PE_KIT_PROGRESS_FILE") or None
        self._interval = progress_interval() if self._headless and not self._off else 0.0
        with _LOCK:
            self.depth = len(_ACTIVE)
            _ACTIVE.append(self)
        self._bar = None
        if self._off:
            return
        if not self._headless:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, desc=desc, unit=unit, leave=self.depth == 0)
        elif self._file and self.depth == 0:
            _append(self._file, f"{self.desc}: started" + (f" ({self.total:,} {self.unit})" if self.total else ""))

    def line(self, final: bool = False) -> str:
        """The plain-text status: ``desc: k/n unit (p%) [elapsed<ETA, rate]``, or the final ``… in elapsed``."""
        from tqdm.std import tqdm

        elapsed = time.monotonic() - self._t0
        if final:
            rate = self.n / elapsed if elapsed > 0 else None
            total = f"/{self.total:,}" if self.total is not None else ""
            speed = ""
            if rate:
                speed = f", {tqdm.format_sizeof(rate) if rate >= 1000 else f'{rate:.3g}'} {self.unit}/s"
            return f"{self.desc}: {self.n:,}{total} {self.unit} in {tqdm.format_interval(elapsed)}{speed}"
        fmt = ("{desc}: {n_fmt}/{total_fmt} {unit} ({percentage:.0f}%) [{elapsed} elapsed, ETA {remaining}, {rate_fmt}]"
               if self.total else "{desc}: {n_fmt} {unit} [{elapsed} elapsed, {rate_fmt}]")
        return tqdm.format_meter(self.n, self.total, elapsed, prefix=self.desc, unit=self.unit, bar_format=fmt)

    def update(self, n: int = 1) -> None:
        """Count ``n`` more units done (an update line in headless mode at most every ``progress_interval()``)."""
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
        elif self._headless and self._file and not self._off and (self.total is None or self.n < self.total):
            # (a finished step gets its end line from close(), not a "100%" update)
            now = time.monotonic()
            with _LOCK:
                due = now - _LAST_UPDATE[0] >= self._interval and now - self._t0 >= self._interval
                if due:
                    _LAST_UPDATE[0] = now
            if due:
                _append(self._file, ("  " * self.depth) + self.line())

    def describe(self, desc: str) -> None:
        """Rename the step (the bar's label, and the lines headless mode writes from now on)."""
        self.desc = desc
        if self._bar is not None:
            self._bar.set_description_str(desc)

    def close(self) -> None:
        """End the step: closes the bar, or writes the end line (cell output for an outermost step)."""
        if self.closed:
            return
        self.closed = True
        with _LOCK:
            if self in _ACTIVE:
                _ACTIVE.remove(self)
        if self._bar is not None:
            self._bar.close()
            return
        if self._off or not self._headless:
            return
        line = self.line(final=True)
        if self.depth == 0:
            print(line, file=sys.stderr, flush=True)
        # an outermost end line goes to the file too, unless the runner streams stderr (it would print twice)
        to_file = time.monotonic() - self._t0 >= self._interval if self.depth else not streamed()
        if self._file and to_file:
            _append(self._file, ("  " * self.depth) + line)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __iter__(self) -> Iterator:
        if self.iterable is None:
            raise TypeError("this Progress has no iterable; call update() instead")
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()


def progress(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
             unit: str = "it") -> Progress:
    """Progress of one long step (module docstring): iterate ``iterable`` or call ``update(n)`` / ``close()``.
    ``total``: units (int ≥ 0; None = unknown); ``desc``: what the step does; ``unit``: the unit's name. Raises
    ValueError for a negative or non-integer ``total`` or a bad ``PE_KIT_PROGRESS_INTERVAL``."""
    return Progress(iterable, total=total, desc=desc, unit=unit)
