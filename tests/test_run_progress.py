"""The run's own progress: notebook i of n and an ETA from the pace so far (pe_kit.run.run_progress)."""
from __future__ import annotations

import pytest

from pe_kit.run.run_progress import REFERENCE_SECONDS, RunClock, format_duration, machine_info


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_eta_scales_the_remaining_notebooks_by_the_pace_so_far():
    t = FakeClock()
    nbs = ["01_mechanism", "02_probe_design", "04_audit"]
    clock = RunClock(nbs, "quick", clock=t)
    assert clock.seconds_left() is None and clock.line() == "run: 0 of 3 notebooks done, 0 s elapsed, time left estimated once a notebook has run"
    clock.start("01_mechanism")
    t.t = 327.0  # half the reference run's 654 s: this machine runs at pace 0.5
    clock.finish("01_mechanism")
    left = clock.seconds_left()
    assert left == pytest.approx(0.5 * (REFERENCE_SECONDS["quick"]["02_probe_design"] + REFERENCE_SECONDS["quick"]["04_audit"]))
    clock.start("02_probe_design")
    t.t += 50.0  # the current notebook's elapsed time comes off the estimate
    assert clock.seconds_left() == pytest.approx(left - 50.0)
    assert clock.line() == "run: 1 of 3 notebooks done, 6 min elapsed, about 8 min left"


def test_reused_notebooks_do_not_set_the_pace():
    t = FakeClock()
    clock = RunClock(["01_mechanism", "04_audit"], "quick", clock=t)
    clock.finish("01_mechanism", reused=True)
    assert clock.seconds_left() is None  # nothing ran yet: no pace to scale by
    clock.start("04_audit")
    t.t = 860.0
    clock.finish("04_audit")
    assert clock.seconds_left() == 0.0 and clock.line() == "run: 2 of 2 notebooks done, 14 min elapsed"


def test_format_duration():
    assert [format_duration(s) for s in (0, 45.4, 89, 90, 3599, 3660, 7500)] == [
        "0 s", "45 s", "89 s", "2 min", "1 h 00 min", "1 h 01 min", "2 h 05 min"]
    with pytest.raises(ValueError, match="seconds"):
        format_duration(float("nan"))


def test_machine_info_names_the_cores():
    import os

    info = machine_info()
    assert info["cpus"] == os.cpu_count() and set(info) == {"platform", "cpus", "cpu", "load_average_1min", "gpu"}


def test_the_preset_chooses_the_reference_shares():
    t = FakeClock()
    clock = RunClock(["05_ablations", "06_multiround_mauve"], "tiny", clock=t)
    clock.start("05_ablations")
    t.t = 73.0  # tiny's own reference pace: 06 is expected to take its reference 95 s
    clock.finish("05_ablations")
    assert clock.seconds_left() == pytest.approx(REFERENCE_SECONDS["tiny"]["06_multiround_mauve"])
    assert RunClock(["04_audit"], "paper").reference is REFERENCE_SECONDS["quick"]


def test_a_warm_rerun_is_timed_by_the_warm_profile_not_the_cold_shares():
    """With embeddings cached, notebook 01 takes ~1/20 of its cold time while 04 keeps most of its audits: the cold
    shares would promise a few minutes for the whole run. The profile nearest to what ran (log ratio) is used."""
    t = FakeClock()
    nbs = ["01_mechanism", "04_audit"]
    clock = RunClock(nbs, "quick", clock=t)
    warm = REFERENCE_SECONDS["quick-warm"]
    clock.start("01_mechanism")
    t.t = warm["01_mechanism"]
    clock.finish("01_mechanism")
    assert clock.profile() == "quick-warm"
    assert clock.seconds_left() == pytest.approx(warm["04_audit"])  # pace 1 on the warm profile
    cold = RunClock(nbs, "quick", clock=FakeClock())
    cold.start("01_mechanism")
    cold.clock.t = REFERENCE_SECONDS["quick"]["01_mechanism"]
    cold.finish("01_mechanism")
    assert cold.profile() == "quick" and cold.seconds_left() == pytest.approx(REFERENCE_SECONDS["quick"]["04_audit"])
