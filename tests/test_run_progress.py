"""The run's own progress: notebook i of n and an ETA from the pace so far (pe_kit.run.run_progress)."""
from __future__ import annotations

import json
import os

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


def test_a_planned_run_has_its_estimate_from_the_start_and_checks_it_at_halfway_and_end():
    """With a plan (texts to embed × measured rate + warm profile), the first line already says how long; the pace
    then compares each notebook with its plan, and the estimate is set against the time taken at halfway and end."""
    t = FakeClock()
    planned = {"01_mechanism": 600.0, "03_llr_checks": 100.0, "04_audit": 500.0}
    clock = RunClock(list(planned), "quick", clock=t, planned=planned)
    assert clock.first_estimate == 1200.0 and clock.seconds_left() == 1200.0
    assert clock.line() == "run: 0 of 3 notebooks done, 0 s elapsed, about 20 min left"
    assert clock.checks() == []
    clock.start("01_mechanism")
    t.t = 900.0  # 1.5 × its plan: the rest is expected 1.5 × slower too
    clock.finish("01_mechanism")
    assert clock.seconds_left() == pytest.approx(1.5 * 600.0)
    assert clock.checks() == ["estimate vs actual at the halfway point: the notebooks run so far (01_mechanism) were "
                              "estimated at 10 min of 20 min; they took 15 min (+50%)"]
    assert clock.checks() == []  # said once
    for nb, dt in (("03_llr_checks", 150.0), ("04_audit", 750.0)):
        clock.start(nb)
        t.t += dt
        clock.finish(nb)
    assert clock.checks() == ["estimate vs actual at the end: the notebooks run so far (01_mechanism, 03_llr_checks, "
                              "04_audit) were estimated at 20 min of 20 min; they took 30 min (+50%)"]
    assert clock.reported["halfway"] == {"estimate_s": 600.0, "actual_s": 900.0, "notebooks": ["01_mechanism"],
                                         "first_estimate_s": 1200.0}


def test_the_embedding_plan_counts_each_uncached_text_once_for_the_first_notebook_that_embeds_it(tmp_path, monkeypatch):
    """Notebook 04's second world (public bank, short arm) brings texts of its own: they are announced for 04, texts
    shared with 01's world count for 01 only, and texts already in the cache for none. The rate is timed on a batch
    of the texts themselves (after 16 untimed ones), which stay cached."""
    import numpy as np

    import pe_kit.study.world as world
    import pe_kit.text.encoder as encoder
    from pe_kit.run.run_progress import embedding_plan, notebook_worlds
    from pe_kit.cache import EmbeddingStore, text_key

    monkeypatch.setenv("PE_KIT_CACHE", str(tmp_path))
    t = FakeClock()

    class FakeEncoder:
        calls: list = []

        def __init__(self, model, max_seq_length=None, progress=True):
            self.model_id, self.store_key = f"{model}|maxlen={max_seq_length}", "store"

        def encode(self, texts):
            FakeEncoder.calls.append(len(texts))
            t.t += len(texts) / 40.0  # 40 texts per second

    shared = [f"record {i}" for i in range(300)]
    texts = {("long", "bankA"): shared, ("short", "bankA"): shared[:100],
             ("long", "public"): shared + [f"public {i}" for i in range(50)], ("short", "public"): ["cached text"]}
    monkeypatch.setattr(world, "world_texts", lambda config: (texts[(config.arm, config.bank)], 0))
    monkeypatch.setattr(encoder, "Encoder", FakeEncoder)
    EmbeddingStore.open(tmp_path / "embeddings" / "store").put([text_key("cached text")], np.zeros((1, 2), np.float32))
    params = {"n_canary": 2, "n_aux": 2, "n_calibration": 2, "n_test": 2, "bank_size": 16, "max_probes": 4,
              "record_cap": 4, "seed": 0, "arm": "long", "bank": "bankA", "arms": ["long", "short"],
              "banks": ["bankA", "public"], "max_seq_length": 32}
    assert [(c.arm, c.bank) for c in notebook_worlds("04_audit", params)] == [
        ("long", "bankA"), ("long", "public"), ("short", "bankA"), ("short", "public")]
    assert notebook_worlds("07_audit_an_implementation", params) == []
    listed = []
    plan = embedding_plan({"01_mechanism": params, "04_audit": params}, sample=100, clock=t, listed=listed.append)
    assert listed == [{"01_mechanism": 300, "04_audit": 51}]  # before the cache is asked: 'cached text' counts
    assert FakeEncoder.calls == [16, 32, 32, 20]  # 100 of the 350 new texts: 16 untimed, 84 timed in 2.1 s
    assert embedding_plan({"01_mechanism": params}, sample=100, seconds=1.0, clock=t)["rates"]  # 32 + 32 in 1.6 s
    assert FakeEncoder.calls[4:] == [16, 32, 32]
    assert plan["rates"] == {"all-MiniLM-L6-v2|maxlen=32": pytest.approx(40.0)}
    # 350 new texts (300 for 01, 50 public ones for 04) less the 100 embedded while timing (every 3rd: all 01's)
    assert plan["texts"] == {"01_mechanism": 200, "04_audit": 50}
    assert plan["seconds"]["01_mechanism"] == pytest.approx(plan["texts"]["01_mechanism"] / 40.0)
    assert plan["measure_seconds"] == pytest.approx(100 / 40.0)


@pytest.mark.parametrize("bank", ["bankA", "public"])
def test_world_texts_are_the_texts_build_world_embeds(bank):
    """The plan lists a world's texts without embedding them (study.world.world_texts): exactly what build_world
    hands its encoder, on the tiny preset's data."""
    import numpy as np

    from pe_kit.run.presets import get_preset
    from pe_kit.study.setup import study_config
    from pe_kit.study.world import build_world, world_texts

    class RecordingEncoder:
        model, max_seq_length, model_id = "all-MiniLM-L6-v2", 32, "recording"

        def __init__(self):
            self.seen = []

        def encode(self, texts, desc=""):
            self.seen += list(texts)
            return np.random.default_rng(len(self.seen)).standard_normal((len(texts), 8)).astype(np.float32)

    config = study_config({**get_preset("tiny").view("01_mechanism"), "seed": 0}, bank=bank)
    enc = RecordingEncoder()
    build_world(config, encoder=enc)
    texts, generated = world_texts(config)
    assert generated == 0 and len(texts) > config.bank_size and sorted(texts) == sorted(enc.seen)


@pytest.mark.notebooks
def test_reproduce_prints_the_estimate_before_the_first_notebook_and_checks_it(tmp_path, monkeypatch):
    """The estimate is the first line after the run's header; each notebook's start line says how many texts it
    embeds that the cache lacks; estimate vs actual is printed (halfway, end) and kept in run.json."""
    import json

    import pe_kit.run.reproduce as reproduce
    from tests.user_notebooks import one_cell_notebook

    seen = {}

    def fake_plan(params_by_notebook, preset, early):
        seen.update(params_by_notebook)
        early("rough estimate: at most 1,500 texts …")
        return {"texts": {"01_mechanism": 1200}, "seconds": {"01_mechanism": 40.0}, "rates": {"m": 30.0},
                "measure_seconds": 9.0, "planned": {"01_mechanism": 70.0}, "profile": "tiny-warm",
                "line": "estimate: 1,200 texts … → about 70 s in all",
                "notes": {"01_mechanism": "; embeds 1,200 texts the cache lacks (≈ 40 s)"}}

    monkeypatch.setattr(reproduce, "run_plan", fake_plan)
    nbs = tmp_path / "nbs"
    one_cell_notebook(nbs, "from pe_kit.report import results\n_ = results.write_rows(results.tidy([{'value': 1.0}], "
                           "'01_mechanism', 'x', {'preset': preset, 'seed': seed}), output_dir, '01_mechanism')")
    lines: list[str] = []
    summary = reproduce.run_reproduction("tiny", results_dir=tmp_path / "res", notebooks_folder=nbs, echo=lines.append)
    assert summary.ok, lines
    assert list(seen) == ["01_mechanism"] and seen["01_mechanism"]["seed"] == 0
    head = next(i for i, x in enumerate(lines) if x.startswith("pe-kit reproduce: preset tiny"))
    assert lines[head + 1] == "pe-kit reproduce: rough estimate: at most 1,500 texts …"
    assert lines[head + 2] == "pe-kit reproduce: estimate: 1,200 texts … → about 70 s in all"
    assert lines[head + 3].startswith("[1/1] 01_mechanism: running …; embeds 1,200 texts the cache lacks (≈ 40 s); run: 0 "
                               "of 1 notebooks done, 0 s elapsed, about 70 s left")
    checks = [x for x in lines if x.startswith("pe-kit reproduce: estimate vs actual")]
    assert [x.split(":")[1] for x in checks] == [" estimate vs actual at the halfway point", " estimate vs actual at the end"]
    assert all("(01_mechanism) were estimated at 70 s of 70 s; they took " in x for x in checks)
    est = json.loads((summary.run_dir / "run.json").read_text())["estimate"]
    assert est["planned"] == {"01_mechanism": 70.0} and set(est["checks"]) == {"halfway", "end"}
    rerun: list[str] = []  # everything reused: no estimate to make, no check to print
    assert reproduce.run_reproduction("tiny", results_dir=tmp_path / "res", notebooks_folder=nbs, echo=rerun.append).ok
    assert not any("estimate" in x for x in rerun) and len(seen) == 1


class FakeChild:
    """A ``subprocess.Popen`` stand-in: ``out`` on stdout, ``err`` to the stderr file, exit status ``rc``."""

    def __init__(self, out: str, err: str = "", rc: int = 0):
        self.out, self.err, self.returncode = out, err, rc

    def __call__(self, args, stdout, stderr, text, env):
        import io

        stderr.write(self.err)
        self.stdout = io.StringIO(self.out)
        return self

    def wait(self):
        return self.returncode


def test_run_plan_adds_the_warm_profile_and_says_what_it_used(monkeypatch):
    """The child's texts and seconds plus the preset's warm profile make each notebook's plan; the printed line
    names the texts per notebook, the measured rate and the profile; the rough line reaches ``early`` as soon as
    the child has listed the texts; a failed child is an error naming its status."""
    import subprocess

    from pe_kit.run.run_progress import run_plan, warm_profile

    child = {"texts": {"01_mechanism": 9000, "04_audit": 3345}, "seconds": {"01_mechanism": 300.0, "04_audit": 111.5},
             "rates": {"m": 30.0}, "measure_seconds": 20.0}
    listed = json.dumps({"listed": {"01_mechanism": 9000, "04_audit": 4000}})
    monkeypatch.setattr(subprocess, "Popen", FakeChild(f"noise\n{listed}\n{json.dumps(child)}\n"))
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 3.0, 3.0))  # (3 + 1) / 2 cores over quick-warm's 2.4 / 2
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    early = []
    plan = run_plan({"01_mechanism": {}, "04_audit": {}}, "quick", early.append)
    assert len(early) == 1 and early[0].startswith("rough estimate: at most 13,000 texts to embed (01_mechanism 9,000; "
                                                   "04_audit 4,000) at ≈ ")
    warm = REFERENCE_SECONDS["quick-warm"]
    assert warm_profile("quick") == ("quick-warm", warm) and warm_profile("paper")[0] == "quick-warm"
    factor = 2.0 / 1.2
    assert plan["planned"] == pytest.approx({"01_mechanism": 300.0 + factor * warm["01_mechanism"],
                                             "04_audit": 111.5 + factor * warm["04_audit"]})
    assert plan["line"] == ("estimate: 12,345 texts to embed that the cache lacks (01_mechanism 9,000; 04_audit 3,345) "
                            "at 30 text/s (timed just now) ≈ 7 min, plus 11 min of the other work (profile quick-warm, "
                            "measured at load 2.4 on 2 cores; × 1.67 for load 3.0 now + this run on 2 cores) → about "
                            "17 min in all")
    assert plan["notes"]["04_audit"] == "; embeds 3,345 texts the cache lacks (≈ 2 min)"
    assert "preset paper has none of its own" in run_plan({"04_audit": {}}, "paper")["line"]
    monkeypatch.setattr(subprocess, "Popen", FakeChild("", "x\nDataError: bad", 2))
    with pytest.raises(RuntimeError, match=r"child process failed \(exit status 2\): DataError: bad"):
        run_plan({"01_mechanism": {}}, "quick")


def test_the_rough_estimate_is_the_texts_at_the_reference_rate_scaled_to_the_free_cores():
    """Before the encoder is ready: the texts listed at REFERENCE_RATE (88 text/s: the quick cold run's notebook 01,
    54,341 texts in 654 − 34 s), × cores / load when the load exceeds the cores, plus the warm profile."""
    from pe_kit.run.run_progress import REFERENCE_RATE, listed_line

    warm = REFERENCE_SECONDS["quick-warm"]
    assert REFERENCE_RATE == pytest.approx(54_341 / (REFERENCE_SECONDS["quick"]["01_mechanism"] - warm["01_mechanism"]),
                                           rel=0.01)
    idle = listed_line({"01_mechanism": 52_800, "04_audit": 0}, "quick", cpus=2, load=1.0)
    other = format_duration((warm["01_mechanism"] + warm["04_audit"]) / 1.2)  # 380 s measured at load 2.4 on 2 cores
    assert idle == ("rough estimate: at most 52,800 texts to embed (01_mechanism 52,800) at ≈ 88 text/s (the "
                    f"reference run's 88 × 2 cores / load 1.0) ≈ 10 min, plus {other} of the other work (profile "
                    "quick-warm, measured at load 2.4 on 2 cores; × 0.83 for load 1.0 now + this run on 2 cores) → at "
                    "most about 15 min in all; the cache is asked and the rate timed once the encoder is ready")
    busy = listed_line({"01_mechanism": 52_800}, "quick", cpus=2, load=11.0)  # 16 text/s: 3,300 s of embedding
    assert ("at ≈ 16 text/s (the reference run's 88 × 2 cores / load 11.0) ≈ 55 min, plus 3 min of the other work "
            "(profile quick-warm, measured at load 2.4 on 2 cores; × 5.00 for load 11.0 now + this run") in busy


def test_the_warm_profile_is_scaled_from_the_load_it_was_measured_at_to_the_load_now():
    """tiny's warm profile (512 s on 2 cores at load 9.0) told a fresh user at low load "about 11 min" for a tiny
    run that took 191 s cold; the notebooks' time goes as the load over the cores, + 1 for the run itself."""
    from pe_kit.run.run_progress import PROFILE_LOAD, listed_line, load_factor

    assert PROFILE_LOAD["tiny-warm"] == (9.0, 2) and sum(REFERENCE_SECONDS["tiny-warm"].values()) == 512.0
    assert load_factor("tiny-warm", 2, 1.0) == (1 / 4.5, "measured at load 9.0 on 2 cores; × 0.22 for load 1.0 now + "
                                                         "this run on 2 cores")
    assert load_factor("tiny-warm", 2, 0.1)[0] == load_factor("tiny-warm", 16, 8.0)[0] == 1 / 4.5  # cores to spare
    assert load_factor("tiny-warm", 2, 8.0)[0] == 1.0 and load_factor("tiny-warm", 2, 12.0)[0] == 6.5 / 4.5
    assert load_factor("tiny-warm", 2, float("nan")) == (1 / 4.5, "measured at load 9.0 on 2 cores; × 0.22 for an "
                                                                  "unknown load (taken as idle) on 2 cores")
    texts = dict.fromkeys(REFERENCE_SECONDS["tiny-warm"], 0) | {"01_mechanism": 1_213, "04_audit": 1_325}
    low = listed_line(texts, "tiny", cpus=2, load=1.0)  # 2,538 texts at 88 text/s + 512 s / 4.5: 29 s + 114 s
    assert low.endswith("≈ 29 s, plus 2 min of the other work (profile tiny-warm, measured at load 9.0 on 2 cores; "
                        "× 0.22 for load 1.0 now + this run on 2 cores) → at most about 2 min in all; the cache is "
                        "asked and the rate timed once the encoder is ready")  # 191 s measured cold: within ±50 %
