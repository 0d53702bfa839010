"""A chatty notebook survives a loaded machine (issue 32 item 2).

papermill's client waits ``iopub_timeout`` seconds (nbclient's default: 4) for a cell's output messages after the
kernel has replied, and papermill raises ``CellTimeoutError: … Timeout waiting for IOPub output`` when they do not
arrive in time. A notebook whose cell draws a tqdm bar (``tqdm.auto``: a widget, one comm message per redraw) and
prints lines, run through ``pe_kit.run.reproduce.run_reproduction`` while one busy-loop process per core competes
for the CPU, must finish with every output line kept and its rows written. The busy loops are started and ended by
the test (by process id). On top of them the client handles each message 1 ms late (as a starved client does),
so that the race the load sets up is lost every time by a client that can drop messages, not only on a bad day.
"""
from __future__ import annotations

import os
import subprocess
import sys

import nbformat
import pandas as pd
import pytest

from tests.user_notebooks import one_cell_notebook

STEPS, EVERY = 4_000, 400  # bar redraws (2–3 widget messages each, in about a second: more than ZeroMQ's two
# 1,000-message queues hold) and the spacing of the printed lines
CHATTY_CELL = """
import sys
from tqdm.auto import tqdm
from pe_kit.report import results
n = 0
for i in tqdm(range(4000), desc="chatty", mininterval=0, miniters=1, disable=False):
    n += i
    if i % 400 == 0:
        print(f"line {i}", flush=True)
print("cell done", n, flush=True)
_ = results.write_rows(results.tidy([{'value': float(n)}], '01_mechanism', 'chatty', {'preset': preset, 'seed': seed}),
                       output_dir, '01_mechanism')
"""


@pytest.fixture
def busy_cores():
    """One busy-loop process per core (the issue's 'artificial load'), ended by pid after the test."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    yield procs
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def slow_client(monkeypatch):
    """papermill's client handles every kernel message 1 ms late (a client starved of CPU)."""
    import time

    from papermill.clientwrap import PapermillNotebookClient

    original = PapermillNotebookClient.process_message

    def late(self, *args, **kwargs):
        time.sleep(0.001)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PapermillNotebookClient, "process_message", late)


@pytest.mark.notebooks
def test_chatty_notebook_with_a_tqdm_bar_passes_under_load(tmp_path, busy_cores, slow_client):
    from pe_kit.run.reproduce import run_reproduction

    nbs = tmp_path / "nbs"
    one_cell_notebook(nbs, CHATTY_CELL)
    lines: list[str] = []
    summary = run_reproduction("tiny", results_dir=tmp_path / "res", notebooks_folder=nbs, progress=False,
                               echo=lines.append)
    assert all(p.poll() is None for p in busy_cores)  # the load lasted the whole run
    assert summary.ok, "\n".join(lines)
    executed = nbformat.read(summary.run_dir / "notebooks" / "01_mechanism.ipynb", as_version=4)
    cell = executed.cells[-1]  # the chatty cell (after the parameters and papermill's injected parameters)
    assert f"tqdm(range({STEPS})" in cell.source
    text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
    printed = [x for x in text.splitlines() if x.startswith(("line ", "cell done"))]
    assert printed == [f"line {i}" for i in range(0, STEPS, EVERY)] + [f"cell done {sum(range(STEPS))}"], \
        cell.outputs  # none lost
    rows = pd.read_csv(summary.run_dir / "01_mechanism.csv")
    assert rows["value"].tolist() == [float(sum(range(STEPS)))]
