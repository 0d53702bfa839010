"""How far a ``pe-kit reproduce`` run is and how long is left, and where it ran (``run.json``'s ``machine``).

The run's ETA scales the notebooks still to run by the pace of the ones run so far, each weighed by its share of
a measured run of the same preset (:data:`REFERENCE_SECONDS`). A preset has a cold profile (empty cache: the
encoder dominates the first notebooks) and may have a warm one (embeddings cached); the profile whose seconds are
nearest, in log ratio, to the notebooks finished so far is used, so a warm rerun is not promised the cold run's
shares. A notebook reused from its done-marker costs nothing and is left out of both sides. The
estimate exists from the first finished notebook on; before that the line says so instead of guessing.
"""
from __future__ import annotations

import math
import os
import platform
import time
from typing import Sequence

__all__ = ["REFERENCE_SECONDS", "PROFILES", "RunClock", "machine_info", "format_duration"]

#: seconds per notebook of a measured run of each preset (only their ratios are used; docs/presets.md names the
#: runs): quick from a cold run (empty cache, 2 idle cores, 2,099 s in all), tiny from a cold run on 2 cores shared with
#: other jobs (511 s in all); other presets use quick's
REFERENCE_SECONDS = {
    "quick": {"01_mechanism": 654.0, "02_probe_design": 161.0, "03_llr_checks": 42.0, "04_audit": 860.0,
              "05_ablations": 123.0, "06_multiround_mauve": 64.0, "07_audit_an_implementation": 22.0,
              "08_one_run_audit": 172.0},
    # warm: the same preset with every embedding cached (docs/paper_run/quick: 942 s in all, 2 shared cores)
    "quick-warm": {"01_mechanism": 34.0, "02_probe_design": 42.0, "03_llr_checks": 36.0, "04_audit": 346.0,
                   "05_ablations": 175.0, "06_multiround_mauve": 83.0, "07_audit_an_implementation": 34.0,
                   "08_one_run_audit": 192.0},
    "tiny": {"01_mechanism": 54.0, "02_probe_design": 42.0, "03_llr_checks": 30.0, "04_audit": 136.0,
             "05_ablations": 73.0, "06_multiround_mauve": 95.0, "07_audit_an_implementation": 39.0,
             "08_one_run_audit": 41.0},
}
#: the profiles a preset's ETA chooses among (:meth:`RunClock.profile`); a preset not listed uses its own or quick's
PROFILES = {"quick": ("quick", "quick-warm")}
_DEFAULT_SECONDS = 150.0  # a notebook the reference run does not have


def format_duration(seconds: float) -> str:
    """``"45 s"``, ``"12 min"``, ``"1 h 05 min"`` (rounded; for progress lines). Raises ValueError for < 0 or NaN."""
    if not seconds >= 0:
        raise ValueError(f"seconds={seconds!r} must be a finite number ≥ 0")
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = int(round(seconds / 60))
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


class RunClock:
    """Notebook i of n and the run's ETA.

    Args:
        notebooks: the stems this run will go through, in order (reused ones included).
        preset: the preset's name, choosing the reference shares (:data:`REFERENCE_SECONDS`; quick's for others).
        clock: a zero-argument function returning seconds (default ``time.perf_counter``; tests pass their own).

    Use :meth:`start` before a notebook runs, :meth:`finish` after (``reused=True`` for a notebook skipped by its
    done-marker), and :meth:`line` for the status text.
    """

    def __init__(self, notebooks: Sequence[str], preset: str = "quick", clock=time.perf_counter):
        self.notebooks = list(notebooks)
        names = PROFILES.get(preset, (preset if preset in REFERENCE_SECONDS else "quick",))
        self.profiles = {n: REFERENCE_SECONDS[n] for n in names}
        self.reference = self.profiles[names[0]]
        self.ran: dict[str, float] = {}
        self.clock = clock
        self.t0 = clock()
        self.ran_seconds = 0.0
        self.ran_weight = 0.0
        self.done: set[str] = set()
        self._current: tuple[str, float] | None = None

    def weight(self, notebook: str) -> float:
        """The notebook's seconds in the reference profile in use (:meth:`profile`; 150 s for an unknown one)."""
        return self.reference.get(notebook, _DEFAULT_SECONDS)

    def profile(self) -> str:
        """The name of the reference profile nearest to the notebooks run so far: the smallest sum over them of
        |log(observed seconds / profile seconds)| (ties and no data: the first, cold profile). Sets the weights."""
        best, best_cost = next(iter(self.profiles)), float("inf")
        for name, ref in self.profiles.items():
            cost = sum(abs(math.log(max(sec, 1e-3) / ref.get(nb, _DEFAULT_SECONDS))) for nb, sec in self.ran.items())
            if cost < best_cost - 1e-12:
                best, best_cost = name, cost
        self.reference = self.profiles[best]
        return best

    def start(self, notebook: str) -> None:
        """Mark ``notebook`` as running from now."""
        self._current = (notebook, self.clock())

    def finish(self, notebook: str, reused: bool = False) -> None:
        """Mark ``notebook`` finished (or ``reused``: skipped, not counted in the pace)."""
        if not reused and self._current and self._current[0] == notebook:
            self.ran[notebook] = self.clock() - self._current[1]
            self.profile()
            self.ran_seconds = sum(self.ran.values())
            self.ran_weight = sum(self.weight(nb) for nb in self.ran)
        self._current = None
        self.done.add(notebook)

    def seconds_left(self) -> float | None:
        """Estimated seconds until the run's last notebook ends, or None before any notebook has run.

        Pace = seconds of the notebooks run so far / their reference seconds; left = pace × reference seconds of
        the notebooks not finished, minus the time the current one has already run (never below 0).
        """
        if self.ran_weight <= 0:
            return None
        pace = self.ran_seconds / self.ran_weight
        left = pace * sum(self.weight(nb) for nb in self.notebooks if nb not in self.done)
        if self._current is not None:
            left -= self.clock() - self._current[1]
        return max(0.0, left)

    def line(self) -> str:
        """E.g. ``"run: 3 of 8 notebooks done, 14 min elapsed, about 21 min left"`` (the ETA: pace so far × the
        remaining notebooks' reference shares, :meth:`seconds_left`)."""
        n_done, n = len(self.done), len(self.notebooks)
        head = f"run: {n_done} of {n} notebooks done, {format_duration(self.clock() - self.t0)} elapsed"
        if n_done == n:
            return head
        left = self.seconds_left()
        return head + (f", about {format_duration(left)} left" if left is not None
                       else ", time left estimated once a notebook has run")


def machine_info() -> dict:
    """Where a run ran, for ``run.json``: platform, CPU count and model, the 1-minute load average (other
    processes sharing the cores), and the GPU torch sees (None without one or without torch)."""
    cpu = platform.processor() or None
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - provenance only; a broken torch must not fail a finished run
        gpu = None
    return {"platform": platform.platform(), "cpus": os.cpu_count(), "cpu": cpu,
            "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None, "gpu": gpu}
