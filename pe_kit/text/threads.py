"""CPU threads for the local models (encoder, local language model, MAUVE): the cores this process may run on,
unless env ``PE_KIT_THREADS`` or an explicit ``num_threads`` says otherwise."""
from __future__ import annotations

import os
from contextlib import contextmanager

__all__ = ["cpu_cores", "auto_threads", "resolve_threads", "torch_threads"]


def cpu_cores() -> int:
    """Cores this process may run on (``os.sched_getaffinity`` where available, else ``os.cpu_count``); int ≥ 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def auto_threads(max_threads: int | None = None) -> int:
    """Threads for one compute-bound job: ``cpu_cores()``, at most ``max_threads``. Raises ValueError if
    ``max_threads`` < 1."""
    if max_threads is not None and int(max_threads) < 1:
        raise ValueError(f"max_threads={max_threads!r} must be an int ≥ 1 (or None for all cores)")
    return cpu_cores() if max_threads is None else min(cpu_cores(), int(max_threads))


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
                raise ValueError(f"PE_KIT_THREADS={env!r} must be an int ≥ 1 or 'auto' (unset it to use every "
                                 "core this process may run on)") from None
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
