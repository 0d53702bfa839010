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
