"""The run's own progress: notebook i of n and an ETA from the pace so far (pe_kit.run.run_progress)."""
from __future__ import annotations

import re

import pytest

from pe_kit.run.run_progress import REFERENCE_SECONDS, RunClock, format_duration, machine_info, run_estimate


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


def test_a_planned_run_has_its_estimate_from_the_start_and_checks_it_at_halfway_and_end():
    """With an estimate (:func:`run_estimate`), the first line already says how long; the pace then compares each
    notebook with the profile nearest to what ran, and the estimate is set against the time taken at halfway and end."""
    t = FakeClock()
    planned = {"01_mechanism": 100.0, "03_llr_checks": 100.0, "04_audit": 1000.0}
    clock = RunClock(list(planned), "quick", clock=t, planned=planned)
    assert clock.first_estimate == 1200.0 and clock.seconds_left() == 1200.0
    assert clock.line() == "run: 0 of 3 notebooks done, 0 s elapsed, about 20 min left"
    assert clock.checks() == []
    clock.start("01_mechanism")
    t.t = 150.0  # 1.5 × its plan (nearer than quick's 654 s or quick-warm's 34 s): the rest 1.5 × slower too
    clock.finish("01_mechanism")
    assert clock.profile() == "plan" and clock.seconds_left() == pytest.approx(1.5 * 1100.0)
    assert clock.checks() == []  # not yet halfway
    for nb, dt in (("03_llr_checks", 150.0), ("04_audit", 1500.0)):
        clock.start(nb)
        t.t += dt
        clock.finish(nb)
    assert clock.checks() == [
        "estimate vs actual at the halfway point: the notebooks run so far (01_mechanism, 03_llr_checks, 04_audit) "
        "were estimated at 20 min of 20 min; they took 30 min (+50%)",
        "estimate vs actual at the end: the notebooks run so far (01_mechanism, 03_llr_checks, 04_audit) were "
        "estimated at 20 min of 20 min; they took 30 min (+50%)"]
    assert clock.checks() == []  # said once
    assert clock.reported["end"] == {"estimate_s": 1200.0, "actual_s": 1800.0,
                                     "notebooks": ["01_mechanism", "03_llr_checks", "04_audit"],
                                     "first_estimate_s": 1200.0}


def test_a_cold_run_switches_from_the_warm_estimate_to_the_cold_profile():
    """The estimate assumes cached embeddings; a notebook 01 that embeds from an empty cache takes its cold time,
    and the ETA then follows the cold profile instead of scaling the warm estimate by 19."""
    t = FakeClock()
    planned, _ = run_estimate(["01_mechanism", "04_audit"], "quick", cpus=2, load=1.0)
    clock = RunClock(list(planned), "quick", clock=t, planned=planned)
    clock.start("01_mechanism")
    t.t = REFERENCE_SECONDS["quick"]["01_mechanism"]
    clock.finish("01_mechanism")
    assert clock.profile() == "quick" and clock.seconds_left() == pytest.approx(REFERENCE_SECONDS["quick"]["04_audit"])


@pytest.mark.notebooks
def test_reproduce_prints_the_estimate_before_the_first_notebook_and_checks_it(tmp_path):
    """The estimate is the first line after the run's header; estimate vs actual is printed (halfway, end) and kept
    in run.json; a rerun that reuses every notebook has nothing to estimate."""
    import json

    from pe_kit.run.reproduce import run_reproduction
    from tests.user_notebooks import one_cell_notebook

    nbs = tmp_path / "nbs"
    one_cell_notebook(nbs, "from pe_kit.report import results\n_ = results.write_rows(results.tidy([{'value': 1.0}], "
                           "'01_mechanism', 'x', {'preset': preset, 'seed': seed}), output_dir, '01_mechanism')")
    lines: list[str] = []
    summary = run_reproduction("tiny", results_dir=tmp_path / "res", notebooks_folder=nbs, echo=lines.append)
    assert summary.ok, lines
    head = next(i for i, x in enumerate(lines) if x.startswith("pe-kit reproduce: preset tiny"))
    assert re.match(r"pe-kit reproduce: estimate: about \d+ s for 1 notebooks with their texts' embeddings cached "
                    r"\(profile tiny-warm, measured at load 9.0 on 2 cores; × ", lines[head + 1])
    assert lines[head + 2].startswith("[1/1] 01_mechanism: running …; run: 0 of 1 notebooks done, 0 s elapsed, about ")
    checks = [x for x in lines if x.startswith("pe-kit reproduce: estimate vs actual")]
    assert [x.split(":")[1] for x in checks] == [" estimate vs actual at the halfway point",
                                                 " estimate vs actual at the end"]
    est = json.loads((summary.run_dir / "run.json").read_text())["estimate"]
    assert list(est["planned"]) == ["01_mechanism"] and set(est["checks"]) == {"halfway", "end"}
    rerun: list[str] = []  # everything reused: no estimate to make, no check to print
    assert run_reproduction("tiny", results_dir=tmp_path / "res", notebooks_folder=nbs, echo=rerun.append).ok
    assert not any("estimate" in x for x in rerun)


def test_the_estimate_is_the_warm_profile_scaled_from_the_load_it_was_measured_at_to_the_load_now():
    """tiny's warm profile (512 s on 2 cores at load 9.0) told a fresh user at low load "about 11 min" for a tiny
    run that took 191 s cold; the notebooks' time goes as the load over the cores, + 1 for the run itself."""
    from pe_kit.run.run_progress import PROFILE_LOAD, load_factor

    assert PROFILE_LOAD["tiny-warm"] == (9.0, 2) and sum(REFERENCE_SECONDS["tiny-warm"].values()) == 512.0
    assert load_factor("tiny-warm", 2, 1.0) == (1 / 4.5, "measured at load 9.0 on 2 cores; × 0.22 for load 1.0 now + "
                                                         "this run on 2 cores")
    assert load_factor("tiny-warm", 2, 0.1)[0] == load_factor("tiny-warm", 16, 8.0)[0] == 1 / 4.5  # cores to spare
    assert load_factor("tiny-warm", 2, 8.0)[0] == 1.0 and load_factor("tiny-warm", 2, 12.0)[0] == 6.5 / 4.5
    assert load_factor("tiny-warm", 2, float("nan")) == (1 / 4.5, "measured at load 9.0 on 2 cores; × 0.22 for an "
                                                                  "unknown load (taken as idle) on 2 cores")
    planned, line = run_estimate(list(REFERENCE_SECONDS["tiny-warm"]), "tiny", cpus=2, load=1.0)
    assert planned == pytest.approx({nb: s / 4.5 for nb, s in REFERENCE_SECONDS["tiny-warm"].items()})
    assert line == ("estimate: about 2 min for 8 notebooks with their texts' embeddings cached (profile tiny-warm, "
                    "measured at load 9.0 on 2 cores; × 0.22 for load 1.0 now + this run on 2 cores); texts the cache "
                    "lacks add the time to embed them; the notebooks' pace corrects it as they run")
    assert "preset paper has none of its own" in run_estimate(["04_audit"], "paper", cpus=2, load=1.0)[1]
