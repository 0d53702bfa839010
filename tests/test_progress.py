"""Progress of long steps (pe_kit.progress): plain lines headless, a terminal that shows the steps.

The unit tests drive ``Progress`` in this process with the headless environment set; the ``notebooks`` test
executes a small notebook through ``run_reproduction`` (papermill, a real kernel) whose cell runs an outer
step of 40 units with an inner step inside each, and checks that the saved cell output is one line without
carriage returns or escape codes, and that the runner printed the step's start, update and end lines.
"""
import re
import time

import nbformat
import pytest

from pe_kit.progress import Progress, progress, progress_interval
from tests.user_notebooks import one_cell_notebook

CONTROL = re.compile(r"[\r\x1b]")


@pytest.fixture
def headless_env(monkeypatch, tmp_path):
    path = tmp_path / "progress.log"
    monkeypatch.setenv("PE_KIT_HEADLESS", "1")
    monkeypatch.setenv("PE_KIT_PROGRESS_FILE", str(path))
    monkeypatch.setenv("PE_KIT_PROGRESS_INTERVAL", "0")
    monkeypatch.delenv("PE_KIT_PROGRESS", raising=False)
    return path


def test_headless_outer_step_is_one_stderr_line_and_file_has_eta(headless_env, capsys):
    with progress(total=4, desc="audit long/bankA", unit="canary") as bar:
        for _ in range(4):
            with progress(total=10, desc="embed nonce", unit="text") as inner:
                inner.update(10)
            bar.update(1)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not CONTROL.search(err)  # nested steps never reach the cell output
    assert re.fullmatch(r"audit long/bankA: 4/4 canary in 00:00(, \S+ canary/s)?\n", err)
    lines = headless_env.read_text().splitlines()
    assert lines[0] == "audit long/bankA: started (4 canary)"
    assert any(re.match(r"audit long/bankA: [1-4]/4 canary \(\d+%\) \[00:00 elapsed, ETA \S+, .*canary/s\]", x)
               for x in lines)
    assert any(x.startswith("  embed nonce: ") for x in lines)  # inner steps: indented, file only
    assert lines[-1].startswith("audit long/bankA: 4/4 canary in ")
    assert not any(CONTROL.search(x) for x in lines)


def test_update_lines_are_throttled(headless_env, monkeypatch):
    monkeypatch.setenv("PE_KIT_PROGRESS_INTERVAL", "3600")
    for _ in progress(range(1000), desc="trials", unit="trial"):
        pass
    lines = headless_env.read_text().splitlines()
    assert lines == [lines[0], lines[-1]] and lines[0] == "trials: started (1,000 trial)"
    assert lines[-1].startswith("trials: 1,000/1,000 trial in 00:00")


def test_off_and_interactive_modes(headless_env, monkeypatch, capsys):
    monkeypatch.setenv("PE_KIT_PROGRESS", "off")
    assert list(progress([1, 2, 3], desc="x")) == [1, 2, 3]
    assert capsys.readouterr().err == "" and not headless_env.exists()
    monkeypatch.delenv("PE_KIT_PROGRESS")
    monkeypatch.delenv("PE_KIT_HEADLESS")
    bar = Progress(total=5, desc="embed bank", unit="text")  # interactive: a tqdm bar, nothing in the file
    assert bar._bar is not None and bar._bar.total == 5 and bar._bar.leave
    inner = Progress(total=2, desc="inner")
    assert inner.depth == 1 and not inner._bar.leave  # a nested bar disappears when it ends
    inner.close(), bar.close()
    assert not headless_env.exists()


def test_bad_settings_name_the_field(monkeypatch):
    monkeypatch.setenv("PE_KIT_PROGRESS_INTERVAL", "soon")
    with pytest.raises(ValueError, match="PE_KIT_PROGRESS_INTERVAL='soon' must be a number of seconds"):
        progress_interval()
    monkeypatch.delenv("PE_KIT_PROGRESS_INTERVAL")
    with pytest.raises(ValueError, match=r"total=-1 must be an integer ≥ 0"):
        progress(total=-1)


STEP_CELL = """
import time
from pe_kit.progress import progress
from pe_kit.report import results
with progress(total=40, desc="audit long/bankA", unit="canary") as bar:
    for i in range(40):
        for _ in progress(range(3), desc="embed nonce", unit="text"):
            pass
        time.sleep(0.05)
        bar.update(1)
_ = results.write_rows(results.tidy([{'value': 1.0}], '01_mechanism', 'mini', {'preset': preset, 'seed': seed}),
                   output_dir, '01_mechanism')
"""


@pytest.mark.notebooks
def test_reproduce_prints_steps_and_notebook_keeps_one_line(tmp_path, monkeypatch):
    from pe_kit.run.reproduce import run_reproduction

    monkeypatch.setenv("PE_KIT_PROGRESS_INTERVAL", "0.5")
    nbs = tmp_path / "nbs"
    one_cell_notebook(nbs, STEP_CELL)
    lines: list[str] = []
    t0 = time.perf_counter()
    summary = run_reproduction("tiny", results_dir=tmp_path / "res", notebooks_folder=nbs, progress=False,
                               echo=lines.append)
    assert summary.ok, lines
    assert time.perf_counter() - t0 < 120
    steps = [x for x in lines if "audit long/bankA" in x]
    assert steps[0] == "    audit long/bankA: started (40 canary)"
    assert any(re.search(r"audit long/bankA: \d+/40 canary \(\d+%\) \[\d\d:\d\d elapsed, ETA \d\d:\d\d", x)
               for x in steps)  # an update with k of n and an ETA reached the terminal while the cell ran
    assert steps[-1].startswith("    audit long/bankA: 40/40 canary in 00:0")
    executed = nbformat.read(summary.run_dir / "notebooks" / "01_mechanism.ipynb", as_version=4)
    cell = [c for c in executed.cells if c.cell_type == "code" and "progress(" in c.source][0]
    streams = [o for o in cell.outputs if o.get("output_type") == "stream"]
    text = "".join(o.get("text", "") for o in streams)
    assert len(streams) == 1 and text.count("\n") == 1 and not CONTROL.search(text)
    assert text.startswith("audit long/bankA: 40/40 canary in ")


def test_headless_kernels_silence_third_party_bars(monkeypatch, capsys):
    """A library's own tqdm.auto bar (e.g. transformers' "Loading weights") must not reach a headless notebook."""
    import tqdm.auto

    from pe_kit.run.presets import text_progress

    monkeypatch.setattr(tqdm.auto, "tqdm", tqdm.auto.tqdm)  # restored after the test
    text_progress()
    assert list(tqdm.auto.tqdm(range(3), desc="Loading weights")) == [0, 1, 2]
    assert capsys.readouterr().err == ""
