"""How far a ``pe-kit reproduce`` run is and how long is left (:func:`run_estimate`, :class:`RunClock`), and where
it ran (:func:`machine_info`, ``run.json``'s ``machine``). A notebook reused from its done-marker counts on neither
side.
"""
from __future__ import annotations

import math
import os
import platform
import time
from typing import Mapping, Sequence

__all__ = ["REFERENCE_SECONDS", "PROFILES", "RunClock", "machine_info", "format_duration", "run_estimate",
           "PROFILE_LOAD", "load_factor"]

#: seconds per notebook of a measured run of each preset (docs/presets.md names the runs): the ETA's reference
#: shares (:class:`RunClock`); a warm profile is the estimate before the first notebook (:func:`run_estimate`)
REFERENCE_SECONDS = {
    "quick": {"01_mechanism": 654.0, "02_probe_design": 161.0, "03_llr_checks": 42.0, "04_audit": 860.0,
              "05_ablations": 123.0, "06_multiround_mauve": 64.0, "07_audit_an_implementation": 22.0,
              "08_one_run_audit": 172.0},
    "quick-warm": {"01_mechanism": 34.0, "02_probe_design": 42.0, "03_llr_checks": 36.0, "04_audit": 346.0,
                   "05_ablations": 175.0, "06_multiround_mauve": 83.0, "07_audit_an_implementation": 34.0,
                   "08_one_run_audit": 192.0},
    "tiny-warm": {"01_mechanism": 36.0, "02_probe_design": 46.0, "03_llr_checks": 41.0, "04_audit": 137.0,
                  "05_ablations": 92.0, "06_multiround_mauve": 43.0, "07_audit_an_implementation": 63.0,
                  "08_one_run_audit": 54.0},
    "tiny": {"01_mechanism": 54.0, "02_probe_design": 42.0, "03_llr_checks": 30.0, "04_audit": 136.0,
             "05_ablations": 73.0, "06_multiround_mauve": 95.0, "07_audit_an_implementation": 39.0,
             "08_one_run_audit": 41.0},
}
#: the 1-minute load average (the run's own work included) and the cores each warm profile was measured at
#: (:func:`load_factor`)
PROFILE_LOAD = {"quick-warm": (2.4, 2), "tiny-warm": (9.0, 2)}
#: the profiles a preset's ETA chooses among besides the estimate (:meth:`RunClock.profile`); a preset not listed uses
#: its own or quick's
PROFILES = {"quick": ("quick", "quick-warm")}
_DEFAULT_SECONDS = 150.0  # a notebook the reference run does not have


def _loadavg(default: float | None = math.nan) -> float | None:
    """The 1-minute load average, or ``default`` where the platform has none."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else default


def format_duration(seconds: float) -> str:
    """``"45 s"``, ``"12 min"``, ``"1 h 05 min"`` (rounded; for progress lines). Raises ValueError for < 0 or NaN."""
    if not seconds >= 0:
        raise ValueError(f"seconds={seconds!r} must be a finite number ≥ 0")
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = int(round(seconds / 60))
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def load_factor(profile: str, cpus: int | None = None, load: float | None = None) -> tuple[float, str]:
    """How many times its seconds the work of warm ``profile`` is expected to take now, and what that assumes:
    max(1, (load + 1) / cpus) / max(1, load_ref / cpus_ref) (``load``: the 1-minute load average, + 1 for this run;
    the reference from :data:`PROFILE_LOAD`)."""
    cpus = cpus or os.cpu_count() or 1
    if load is None:
        load = _loadavg()
    ref, ref_cpus = PROFILE_LOAD[profile]
    known = not math.isnan(load)
    factor = (max(1.0, (load + 1) / cpus) if known else 1.0) / max(1.0, ref / ref_cpus)
    now = f"load {load:.1f} now + this run" if known else "an unknown load (taken as idle)"
    return factor, f"measured at load {ref:.1f} on {ref_cpus} cores; × {factor:.2f} for {now} on {cpus} cores"


def run_estimate(notebooks: Sequence[str], preset: str, cpus: int | None = None,
                 load: float | None = None) -> tuple[dict, str]:
    """The estimate before the first notebook: each notebook's seconds in the preset's warm profile (else quick's)
    scaled by :func:`load_factor`. Returns (notebook → planned seconds, the line the runner prints)."""
    name = f"{preset}-warm" if f"{preset}-warm" in REFERENCE_SECONDS else "quick-warm"
    factor, assumes = load_factor(name, cpus, load)
    planned = {nb: factor * REFERENCE_SECONDS[name].get(nb, _DEFAULT_SECONDS) for nb in notebooks}
    own = "" if name == f"{preset}-warm" else f"; preset {preset} has none of its own, quick's sizes may be smaller"
    return planned, (f"estimate: about {format_duration(sum(planned.values()))} for {len(planned)} notebooks with "
                     f"their texts' embeddings cached (profile {name}, {assumes}{own}); texts the cache lacks add "
                     "the time to embed them; the notebooks' pace corrects it as they run")


class RunClock:
    """Notebook i of n and the run's ETA: :meth:`start` before a notebook runs, :meth:`finish` after. ``notebooks``:
    every stem of the run, reused ones included; ``preset`` chooses the reference profiles; ``planned``
    (:func:`run_estimate`) is the first profile, checked against the time taken (:meth:`checks`)."""

    def __init__(self, notebooks: Sequence[str], preset: str = "quick", clock=time.perf_counter,
                 planned: Mapping[str, float] | None = None):
        self.notebooks = list(notebooks)
        names = PROFILES.get(preset, (preset if preset in REFERENCE_SECONDS else "quick",))
        self.plan = dict(planned) if planned is not None else None
        self.profiles = {**({"plan": self.plan} if self.plan is not None else {}),
                         **{n: REFERENCE_SECONDS[n] for n in names}}
        self.reference = next(iter(self.profiles.values()))
        self.ran: dict[str, float] = {}
        self.clock = clock
        self.t0 = clock()
        self.done: set[str] = set()
        self._current: tuple[str, float] | None = None
        self.first_estimate = sum(self.plan.values()) if self.plan is not None else None
        self.reported: dict[str, dict] = {}

    def weight(self, notebook: str) -> float:
        """The notebook's seconds in the reference profile in use (:meth:`profile`; 150 s for an unknown one)."""
        return self.reference.get(notebook, _DEFAULT_SECONDS)

    def profile(self) -> str:
        """Set the weights to, and return the name of, the profile nearest to the notebooks run so far (smallest
        sum of |log(observed / profile seconds)|; ties and no data: the first)."""
        best, best_cost = next(iter(self.profiles)), float("inf")
        for name, ref in self.profiles.items():
            cost = sum(abs(math.log(max(sec, 1e-3) / ref.get(nb, _DEFAULT_SECONDS))) for nb, sec in self.ran.items())
            if cost < best_cost - 1e-12:
                best, best_cost = name, cost
        self.reference = self.profiles[best]
        return best

    def start(self, notebook: str) -> None:
        self._current = (notebook, self.clock())

    def finish(self, notebook: str, reused: bool = False) -> None:
        """Mark ``notebook`` finished (or ``reused``: skipped, not counted in the pace)."""
        if not reused and self._current and self._current[0] == notebook:
            self.ran[notebook] = self.clock() - self._current[1]
            self.profile()
        self._current = None
        self.done.add(notebook)

    def seconds_left(self) -> float | None:
        """Seconds until the last notebook ends: pace so far (1 with a plan and none run) × profile seconds of those
        not finished, less the current one's time so far; None before any notebook has run without a plan."""
        ran_weight = sum(self.weight(nb) for nb in self.ran)
        if ran_weight <= 0 and self.plan is None:
            return None
        pace = sum(self.ran.values()) / ran_weight if ran_weight > 0 else 1.0
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

    def checks(self) -> list[str]:
        """The first estimate against the time taken, once at ``halfway`` (of the plan) and once at the ``end``, also
        recorded in :attr:`reported` (``run.json``); empty without a plan or with nothing new to say."""
        if not self.first_estimate or not self.ran:
            return []
        out = []
        planned = sum(self.plan.get(nb, _DEFAULT_SECONDS) for nb in self.ran)
        for name, due in (("halfway", planned >= self.first_estimate / 2),
                          ("end", len(self.done) == len(self.notebooks))):
            if due and name not in self.reported:
                actual = self.clock() - self.t0
                self.reported[name] = {"estimate_s": planned, "actual_s": actual, "notebooks": list(self.ran),
                                       "first_estimate_s": self.first_estimate}
                what = "at the halfway point" if name == "halfway" else "at the end"
                out.append(f"estimate vs actual {what}: the notebooks run so far ({', '.join(self.ran)}) were "
                           f"estimated at {format_duration(planned)} of {format_duration(self.first_estimate)}; they "
                           f"took {format_duration(actual)} ({actual / planned - 1:+.0%})")
        return out


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
            "load_average_1min": _loadavg(None), "gpu": gpu}
