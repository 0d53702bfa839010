"""Thread choice: the cores this process may run on, never below 1, overridable."""
import pytest

from pe_kit.text import threads


def test_auto_threads_is_the_allowed_cores(monkeypatch):
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {2, 3}, raising=False)
    assert threads.cpu_cores() == 2 and threads.auto_threads() == 2
    assert threads.auto_threads(max_threads=1) == 1
    with pytest.raises(ValueError, match="max_threads"):
        threads.auto_threads(max_threads=0)


def test_resolve_threads_and_env_override(monkeypatch):
    assert threads.resolve_threads(None) is None
    assert threads.resolve_threads(3) == 3
    monkeypatch.setenv("PE_KIT_THREADS", "1")
    assert threads.resolve_threads("auto") == 1
    for bad in (0, "many", 1.5, True):
        with pytest.raises(ValueError, match="num_threads"):
            threads.resolve_threads(bad)


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


def test_threads_env_override_errors_name_the_variable(monkeypatch):
    for bad in ("two", "2.0", "0", "-1"):
        monkeypatch.setenv("PE_KIT_THREADS", bad)
        with pytest.raises(ValueError, match="PE_KIT_THREADS"):
            threads.resolve_threads("auto")
    monkeypatch.setenv("PE_KIT_THREADS", "auto")
    assert threads.resolve_threads("auto") == threads.cpu_cores()
