"""Progress of long steps (pe_kit.progress): a tqdm bar interactively, plain tqdm lines on stderr headless.

The unit tests drive ``progress`` in this process with the headless environment set; the ``notebooks`` test
executes a small notebook through ``run_reproduction`` (papermill, a real kernel) whose cell runs an outer
step of 40 units with an inner step inside each, and checks that the runner echoed the step's start, update and
end lines while it ran, and that the saved cell output holds them as plain lines (no carriage returns or escape codes).
"""
import re
import subprocess
import sys
import time

import nbformat
import pytest

from pe_kit.progress import progress, progress_interval
from tests.user_notebooks import one_cell_notebook

CONTROL = re.compile(r"[\r\x1b]")


@pytest.fixture
def headless_env(monkeypatch):
    monkeypatch.setenv("PE_KIT_HEADLESS", "1")
    monkeypatch.setenv("PE_KIT_PROGRESS_INTERVAL", "0")
    monkeypatch.delenv("PE_KIT_PROGRESS", raising=False)


def test_headless_steps_are_plain_lines_with_eta(headless_env, capsys):
    with progress(total=4, desc="audit long/bankA", unit="canary") as bar:
        for _ in range(4):
            with progress(total=10, desc="embed nonce", unit="text") as inner:
                inner.update(10)
            bar.update(1)
    lines = capsys.readouterr().err.splitlines()
    assert not any(CONTROL.search(x) for x in lines)
    assert lines[0] == "audit long/bankA: 0/4 canary (0%) [00:00 elapsed, ETA ?, ?canary/s]"
    assert any(re.match(r"audit long/bankA: [1-4]/4 canary \(\d+%\) \[00:00 elapsed, ETA \S+, .*canary/s\]", x)
               for x in lines)
    assert any(x.startswith("embed nonce: 10/10 text in 00:00") for x in lines)
    assert re.fullmatch(r"audit long/bankA: 4/4 canary in 00:00, .*canary/s", lines[-1])


def test_lines_are_throttled_and_short_nested_steps_silent(headless_env, monkeypatch, capsys):
    monkeypatch.setenv("PE_KIT_PROGRESS_INTERVAL", "3600")
    with progress(total=3, desc="outer", unit="x") as bar:
        for _ in range(3):
            for _ in progress(range(1000), desc="trials", unit="trial"):
                pass
            bar.update(1)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("outer: 0/3 x (0%)") and lines[-1].startswith("outer: 3/3 x in 00:00")
    assert len(lines) == 2  # the nested steps ran for less than the interval
    for _ in progress(iter(range(5)), desc="read rows", unit="row"):  # unknown total
        pass
    assert capsys.readouterr().err.splitlines()[-1].startswith("read rows: 5 row in 00:00")


def test_a_users_own_bar_does_not_silence_the_steps_inside_it(headless_env, monkeypatch, capsys):
    """Only a pe_kit step's open bar makes a step nested (delayed): a script's own tqdm loop does not."""
    from tqdm import tqdm

    monkeypatch.setenv("PE_KIT_PROGRESS_INTERVAL", "3600")
    with open("/dev/null", "w") as sink:
        for s in tqdm(range(2), file=sink):
            with progress(total=3.0, desc=f"step {s}", unit="x") as bar:
                bar.update(3)
    ends = [ln for ln in capsys.readouterr().err.splitlines() if " in 00:00" in ln]
    assert [ln.split(",")[0] for ln in ends] == ["step 0: 3/3 x in 00:00", "step 1: 3/3 x in 00:00"]


def test_off_and_interactive_modes(headless_env, monkeypatch, capsys):
    monkeypatch.setenv("PE_KIT_PROGRESS", "off")
    assert list(progress([1, 2, 3], desc="x")) == [1, 2, 3]
    assert capsys.readouterr().err == ""
    monkeypatch.delenv("PE_KIT_PROGRESS")
    monkeypatch.delenv("PE_KIT_HEADLESS")
    bar = progress(total=5, desc="embed bank", unit="text")  # interactive: a tqdm.auto bar
    assert bar.total == 5 and bar.leave and not bar.disable
    inner = progress(total=2, desc="inner")
    assert not inner.leave  # a nested bar disappears when it ends
    inner.describe("inner, renamed")
    assert inner.desc == "inner, renamed"
    inner.close(), bar.close()


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
def test_reproduce_prints_steps_and_notebook_keeps_plain_lines(tmp_path, monkeypatch):
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
    assert steps[0].startswith("    audit long/bankA: 0/40 canary (0%)")
    assert any(re.search(r"audit long/bankA: \d+/40 canary \(\d+%\) \[\d\d:\d\d elapsed, ETA \d\d:\d\d", x)
               for x in steps)  # an update with k of n and an ETA reached the terminal while the cell ran
    assert steps[-1].startswith("    audit long/bankA: 40/40 canary in 00:0")
    assert not any("embed nonce" in x for x in lines)  # nested steps shorter than the interval stay silent
    executed = nbformat.read(summary.run_dir / "notebooks" / "01_mechanism.ipynb", as_version=4)
    cell = [c for c in executed.cells if c.cell_type == "code" and "progress(" in c.source][0]
    text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
    assert not CONTROL.search(text) and text.splitlines() == [x[4:] for x in steps]


def test_headless_kernels_silence_third_party_bars():
    """A library's own tqdm bar (e.g. transformers' "Loading weights") stays off in the runner's kernels
    (``TQDM_DISABLE=1``), while pe_kit's steps still print their lines."""
    code = ("from tqdm.auto import tqdm\nfrom pe_kit.progress import progress\n"
            "list(tqdm(range(3), desc='Loading weights'))\nlist(progress(range(3), desc='pe_kit step'))")
    env = {"PE_KIT_HEADLESS": "1", "TQDM_DISABLE": "1", "PYTHONPATH": ":".join(sys.path)}
    err = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stderr
    assert "Loading weights" not in err and "pe_kit step: 3/3 it in " in err
