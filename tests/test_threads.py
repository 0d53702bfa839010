"""Thread choice from load: leave the cores other processes keep busy, never below 1, overridable."""
import pytest

from pe_kit.text import threads


def test_auto_threads_leaves_busy_cores(monkeypatch):
    monkeypatch.setattr(threads, "cpu_cores", lambda: 2)
    assert threads.auto_threads(busy=0.0) == 2
    assert threads.auto_threads(busy=0.4) == 2
    assert threads.auto_threads(busy=1.0) == 1  # one busy process on the other core
    assert threads.auto_threads(busy=5.0) == 1  # never below one
    assert threads.auto_threads(max_threads=1, busy=0.0) == 1
    with pytest.raises(ValueError, match="max_threads"):
        threads.auto_threads(max_threads=0, busy=0.0)


def test_resolve_threads_and_env_override(monkeypatch):
    assert threads.resolve_threads(None) is None
    assert threads.resolve_threads(3) == 3
    monkeypatch.setenv("PE_KIT_THREADS", "1")
    assert threads.resolve_threads("auto") == 1
    for bad in (0, "many", 1.5, True):
        with pytest.raises(ValueError, match="num_threads"):
            threads.resolve_threads(bad)


def test_busy_cores_is_measured_in_cores():
    assert 0.0 <= threads.busy_cores(interval=0.05) <= threads.cpu_cores() + 1e-9


def test_torch_threads_restores():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    with threads.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_local_lm_thread_setting_validated_without_loading():
    from pe_kit.text.generators.local_lm import LocalLMGenerator

    assert LocalLMGenerator().num_threads == "auto"
    assert LocalLMGenerator(num_threads=2).num_threads == 2 and LocalLMGenerator(num_threads=None).num_threads is None
    with pytest.raises(ValueError, match="num_threads"):
        LocalLMGenerator(num_threads=0)


def _fake_psutil(monkeypatch, *snapshots, ncpu=2, allowed=None):
    """psutil stand-in whose cpu_times(percpu=True) returns the given per-CPU snapshots in turn."""
    import sys
    import types

    calls = iter(snapshots)
    fake_proc = types.SimpleNamespace(cpu_times=lambda: (0.0, 0.0))
    fake = types.SimpleNamespace(Process=lambda: fake_proc, cpu_times=lambda percpu=False: next(calls),
                                 cpu_count=lambda: ncpu, Error=RuntimeError)
    monkeypatch.setitem(sys.modules, "psutil", fake)
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(range(ncpu) if allowed is None else allowed),
                        raising=False)
    return fake


def test_busy_cores_does_not_count_niced_processes(monkeypatch):
    """A niced job yields to a nice-0 process, so its CPU share is not 'busy' for it; at nice > 0 it is."""
    from collections import namedtuple

    t = namedtuple("times", "user nice system idle iowait")
    # two cores over the interval: core 0 fully niced, core 1 half user (40) half idle (but 10 system): 75 % busy
    start = [t(0, 0, 0, 100, 0), t(0, 0, 0, 100, 0)]
    end = [t(0, 100, 0, 100, 0), t(40, 0, 10, 150, 0)]
    monkeypatch.setattr(threads, "_own_nice", lambda: 0)
    monkeypatch.setattr(threads, "_autogroup_enabled", lambda: False)
    _fake_psutil(monkeypatch, start, end)
    # 75 % of 2 cores in use, 50 % of it niced: only (75 − 50) % · 2 = 0.5 cores count as busy
    assert threads.busy_cores(interval=0.01) == pytest.approx(0.5)
    monkeypatch.setattr(threads, "_own_nice", lambda: 10)
    _fake_psutil(monkeypatch, start, end)
    assert threads.busy_cores(interval=0.01) == pytest.approx(1.5)
    # with autogroup scheduling, niced jobs of other sessions do not yield: all 1.5 cores are busy
    monkeypatch.setattr(threads, "_own_nice", lambda: 0)
    monkeypatch.setattr(threads, "_autogroup_enabled", lambda: True)
    _fake_psutil(monkeypatch, start, end)
    assert threads.busy_cores(interval=0.01) == pytest.approx(1.5)


def test_busy_cores_reads_raw_counters_not_their_percentages(monkeypatch):
    """One core busy of two over the interval → 1.0 core, from the raw counter deltas; guest time (already inside
    user) does not shift it. psutil's cpu_times_percent read 1.6 here on the 2-core machine."""
    from collections import namedtuple

    t = namedtuple("times", "user nice system idle iowait irq softirq steal guest")
    start = [t(10.0, 0, 1.0, 50.0, 0, 0, 0, 0, 7.0), t(5.0, 0, 0, 60.0, 0, 0, 0, 0, 0)]
    end = [t(10.2, 0, 1.0, 50.0, 0, 0, 0, 0, 900.0), t(5.0, 0, 0, 60.2, 0, 0, 0, 0, 0)]
    monkeypatch.setattr(threads, "_autogroup_enabled", lambda: True)
    _fake_psutil(monkeypatch, start, end)
    assert threads.busy_cores(interval=0.01) == pytest.approx(1.0)


def test_busy_cores_counts_only_the_cpus_this_process_may_use(monkeypatch):
    """Affinity to cores {2, 3} of 4 while cores 0 and 1 are busy elsewhere: nothing we could use is busy."""
    from collections import namedtuple

    t = namedtuple("times", "user nice system idle iowait")
    start = [t(0, 0, 0, 0, 0)] * 4
    end = [t(1, 0, 0, 0, 0), t(1, 0, 0, 0, 0), t(0, 0, 0, 1, 0), t(0.5, 0, 0, 0.5, 0)]
    monkeypatch.setattr(threads, "_autogroup_enabled", lambda: True)
    _fake_psutil(monkeypatch, start, end, ncpu=4, allowed={2, 3})
    assert threads.busy_cores(interval=0.01) == pytest.approx(0.5)


def test_busy_cores_falls_back_to_load_average_when_counters_are_refused(monkeypatch):
    fake = _fake_psutil(monkeypatch)

    def refuse(percpu=False):
        raise PermissionError("no /proc/stat")

    fake.cpu_times = refuse
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (0.75, 0.5, 0.25))
    assert threads.busy_cores(interval=0.01) == 0.75


def test_threads_env_override_errors_name_the_variable(monkeypatch):
    for bad in ("two", "2.0", "0", "-1"):
        monkeypatch.setenv("PE_KIT_THREADS", bad)
        with pytest.raises(ValueError, match="PE_KIT_THREADS"):
            threads.resolve_threads("auto")
    monkeypatch.setenv("PE_KIT_THREADS", "auto")
    monkeypatch.setattr(threads, "busy_cores", lambda interval=0.2: 0.0)
    assert threads.resolve_threads("auto") == threads.cpu_cores()
