"""CPU thread choice for the local models (encoder, local language model) from the machine's load.

A compute-bound process asking for every core while another process keeps one busy is descheduled at each
parallel barrier, so ``auto_threads`` leaves the cores other processes keep busy alone (load from ``psutil``
when installed, else ``os.getloadavg``).
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path

__all__ = ["cpu_cores", "busy_cores", "auto_threads", "resolve_threads", "torch_threads"]


def cpu_cores() -> int:
    """Cores this process may run on (``os.sched_getaffinity`` where available, else ``os.cpu_count``); int ≥ 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# the /proc/stat fields that partition CPU time (guest time is inside user and nice)
_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def busy_cores(interval: float = 0.2) -> float:
    """Cores kept busy by other processes now (float ≥ 0).

    With ``psutil``: 1 − (Δidle + Δiowait) / Σ Δfields of the raw per-CPU counters of the allowed CPUs over
    ``interval`` seconds, times their number, less this process's own use; niced time is left out when this process
    runs at nice ≤ 0 without autogroup scheduling. Otherwise the 1-minute load average. Raises ValueError for
    ``interval`` ≤ 0.
    """
    if not interval > 0:
        raise ValueError(f"interval={interval!r} must be > 0 seconds")
    try:
        import psutil

        return _busy_from_counters(psutil, interval)
    except ImportError:
        pass
    except (OSError, psutil.Error):  # counters refused (some sandboxes): fall back to the load average
        pass
    try:
        return max(0.0, float(os.getloadavg()[0]))
    except (AttributeError, OSError):
        return 0.0


def _allowed_cpus(ncpu: int) -> list[int]:
    """Indices of the CPUs this process may run on (affinity mask), within [0, ncpu)."""
    try:
        allowed = sorted(c for c in os.sched_getaffinity(0) if 0 <= c < ncpu)
    except (AttributeError, OSError):
        allowed = []
    return allowed or list(range(ncpu))


def _busy_from_counters(psutil, interval: float) -> float:
    """``busy_cores`` from psutil's raw per-CPU counters, over the CPUs this process may use only."""
    me = psutil.Process()
    t0 = sum(me.cpu_times()[:2])
    before = psutil.cpu_times(percpu=True)
    time.sleep(interval)
    after = psutil.cpu_times(percpu=True)
    cpus = _allowed_cpus(min(len(before), len(after)))
    delta = {f: sum(max(0.0, float(getattr(after[c], f, 0.0)) - float(getattr(before[c], f, 0.0))) for c in cpus)
             for f in _CPU_FIELDS}
    span = sum(delta.values())  # CPU-seconds that passed on the allowed cores together (≈ interval · len(cpus))
    if span <= 0:
        return 0.0
    total = (span - delta["idle"] - delta["iowait"]) / span * len(cpus)
    own = (sum(me.cpu_times()[:2]) - t0) / interval
    yields = _own_nice() <= 0 and not _autogroup_enabled()
    yielding = delta["nice"] / span * len(cpus) if yields else 0.0
    return float(min(len(cpus), max(0.0, total - own - yielding)))


def _own_nice() -> int:
    """This process's nice value (0 where the platform has none)."""
    try:
        return os.nice(0)
    except (AttributeError, OSError):
        return 0


def _autogroup_enabled() -> bool:
    """Whether Linux schedules by session autogroup (then nice does not shield a job from other sessions)."""
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return False


def auto_threads(max_threads: int | None = None, busy: float | None = None) -> int:
    """Threads for one compute-bound job: clip(cores − round(busy), 1, max_threads), ``busy`` measured by
    ``busy_cores`` unless given. Raises ValueError if ``max_threads`` < 1 or ``busy`` < 0."""
    cores = cpu_cores()
    cap = cores if max_threads is None else int(max_threads)
    if cap < 1:
        raise ValueError(f"max_threads={max_threads!r} must be an int ≥ 1 (or None for all cores)")
    if busy is None:
        busy = busy_cores()
    if busy < 0:
        raise ValueError(f"busy={busy!r} must be ≥ 0 cores")
    free = cores - int(busy + 0.5)
    return int(max(1, min(cap, free)))


def resolve_threads(num_threads, field: str = "num_threads") -> int | None:
    """Validate a thread setting: ``"auto"`` → ``auto_threads`` (env ``PE_KIT_THREADS`` overrides), None → None,
    int ≥ 1 → itself. Raises ValueError naming ``field`` otherwise."""
    if num_threads is None:
        return None
    if isinstance(num_threads, str):
        if num_threads != "auto":
            raise ValueError(f"{field}={num_threads!r} must be 'auto', None or an int ≥ 1")
        env = os.environ.get("PE_KIT_THREADS", "").strip()
        if env and env != "auto":
            try:
                value = int(env)
            except ValueError:
                raise ValueError(f"PE_KIT_THREADS={env!r} must be an int ≥ 1 or 'auto' (unset it to choose from "
                                 "the load)") from None
            return resolve_threads(value, "PE_KIT_THREADS")
        return auto_threads()
    if isinstance(num_threads, bool) or int(num_threads) != num_threads or int(num_threads) < 1:
        raise ValueError(f"{field}={num_threads!r} must be 'auto', None or an int ≥ 1")
    return int(num_threads)


@contextmanager
def torch_threads(n: int | None):
    """Context manager: ``torch.set_num_threads(n)`` inside, the previous value restored after (None: no change)."""
    if n is None:
        yield
        return
    import torch
    old = torch.get_num_threads()
    if old != n:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        if old != n:
            torch.set_num_threads(old)
