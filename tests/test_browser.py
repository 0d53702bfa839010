"""End-to-end: notebook 05's explorer in a real JupyterLab, driven by headless Chromium (issue 14).

Starts JupyterLab from the interpreter running the tests (the project's venv: ``.venv`` in CI) on a free
port with a token, opens a copy of ``notebooks/05_ablations.ipynb`` reduced to the cells the explorer needs
(its title, the ``parameters`` cell with papermill-injected ``preset="tiny"`` and a temporary ``output_dir``,
the imports cell and the explorer cell, taken verbatim from the notebook), runs them in the ``pe_kit`` kernel
the notebook asks for, types σ = 2 into the σ slider's text box and checks that the ε_theory shown changes
from the accountant's value at σ = 1 to its value at σ = 2 (q = 0.1, δ = 1e-5: 1.695 → 0.379, equal to
``pe_kit.audit.accounting.epsilon_theory`` at the displayed 3 decimals). A screenshot after the move goes to
``$PE_KIT_ARTIFACTS`` (default ``test-artifacts/`` at the repo root, gitignored).

The browser is the system Chromium (Debian's ``chromium``; ``PE_KIT_CHROMIUM`` names another binary), driven
by Playwright with ``executable_path`` (Playwright never downloads a browser here). Skipped with the reason
when Playwright, Chromium or JupyterLab is missing. ``PE_KIT_HEADLESS`` is removed from the Lab server's
environment so the kernel shows the live widget, not the static table of headless runs.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NB05 = ROOT / "notebooks" / "05_ablations.ipynb"
SIGMA_LABEL = "σ (noise)"
THEORY_LABEL = "ε_theory (Opacus PRV, 1 release)"
# the open notebook's kernel in the page (JupyterLab started with expose_app_in_browser)
KERNEL = "window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel"

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def _chromium() -> str | None:
    """The system Chromium that answers ``--version`` (a snap stub or a broken install does not), or None."""
    names = [os.environ.get("PE_KIT_CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"]
    for name in filter(None, names):
        path = shutil.which(name)
        if not path:
            continue
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and "chrom" in out.stdout.lower():
            return path
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read().decode())


def _explorer_notebook(dest: Path, output_dir: Path) -> str:
    """Write the reduced copy of notebook 05 (cells verbatim, parameters injected by papermill); return its name."""
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    nb = load_notebook_node(str(NB05))
    cells = nb.cells
    params = [i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", [])]
    explore = [i for i, c in enumerate(cells) if c.cell_type == "code" and "show_explorer(" in c.source]
    assert len(params) == 1 and len(explore) == 1, "notebook 05 needs one parameters cell and one explorer cell"
    p, e = params[0], explore[0]
    imports = next(i for i in range(p + 1, e) if cells[i].cell_type == "code")
    assert "notebook_setup" in cells[imports].source and "widgets" in cells[imports].source
    keep = [0, p, imports] + ([e - 1] if cells[e - 1].cell_type == "markdown" else []) + [e]
    nb.cells = [cells[i] for i in keep]
    nb = parameterize_notebook(nb, {"preset": "tiny", "output_dir": str(output_dir)})
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    name = "05_explorer_browser.ipynb"
    nbformat.write(nb, dest / name)
    return name


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server (own process group) rooted in a temp dir holding the reduced notebook 05."""
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed (the 'notebooks' extra)")
    pytest.importorskip("papermill")
    root = tmp_path_factory.mktemp("lab")
    name = _explorer_notebook(root, root / "results")
    port, token = _free_port(), uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k != "PE_KIT_HEADLESS"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", JUPYTER_RUNTIME_DIR=str(root / ".runtime"),
               JUPYTER_CONFIG_DIR=str(root / ".jupyter"), MPLBACKEND="module://matplotlib_inline.backend_inline",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "notebooks"), str(ROOT), env.get("PYTHONPATH")])))
    (root / ".jupyter" / "labconfig").mkdir(parents=True)  # no "official Jupyter news?" toast over the widget
    (root / ".jupyter" / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
           f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0",
           "--LabApp.expose_app_in_browser=True", f"--LabApp.workspaces_dir={root / '.workspaces'}",
           "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(root / "lab.log", "w")
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{(root / 'lab.log').read_text()[-3000:]}")
            try:
                _get_json(f"{base}/api/status?token={token}")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer in 90 s:\n{(root / 'lab.log').read_text()[-3000:]}")
                time.sleep(0.5)
        yield {"base": base, "token": token, "notebook": name, "root": root}
    finally:
        _stop(proc)
        log.close()


def _stop(proc: subprocess.Popen) -> None:
    """Stop the Lab server (its process group) and its kernels (their own sessions): SIGTERM, then SIGKILL."""
    import psutil

    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        kids = []
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # Lab shuts its kernels down on SIGTERM
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
    _, alive = psutil.wait_procs(kids, timeout=10)
    for k in alive:  # a kernel that outlived its server
        try:
            k.kill()
        except psutil.Error:
            pass


@pytest.fixture(scope="module")
def page():
    """A headless Chromium page (system browser, never a downloaded one), closed after the module."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (the 'dev' extra)")
    exe = _chromium()
    if exe is None:
        pytest.skip("no system Chromium found (apt-get install chromium, or set PE_KIT_CHROMIUM)")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox"], timeout=60_000)
        try:
            pg = browser.new_page(viewport={"width": 1280, "height": 1100})
            pg.set_default_timeout(120_000)
            yield pg
        finally:
            browser.close()


def _theory_shown(pg) -> str:
    row = pg.locator("tr", has_text=THEORY_LABEL)
    return row.locator("td").nth(1).inner_text().strip()


def test_explorer_sigma_slider_updates_epsilon_theory(page, lab):  # page first: a missing browser skips at once
    from pe_kit.audit.accounting import epsilon_theory

    want_1 = f"{epsilon_theory(1.0, 0.1, 1e-5):.3f}"
    want_2 = f"{epsilon_theory(2.0, 0.1, 1e-5):.3f}"
    assert (want_1, want_2) == ("1.695", "0.379")  # the numbers (σ 1 → 2 at q = 0.1)

    specs = _get_json(f"{lab['base']}/api/kernelspecs?token={lab['token']}")["kernelspecs"]
    assert "pe_kit" in specs, (f"notebook 05 asks for kernel 'pe_kit', which scripts/bootstrap.sh installs; this "
                               f"Jupyter has only {sorted(specs)}: run bash scripts/bootstrap.sh")
    pg = page
    pg.goto(f"{lab['base']}/lab/tree/{lab['notebook']}?token={lab['token']}")
    pg.wait_for_function(f"() => {KERNEL}")
    sessions = _get_json(f"{lab['base']}/api/sessions?token={lab['token']}")
    assert [s["kernel"]["name"] for s in sessions] == ["pe_kit"]  # the kernel the notebook asks for, no dialog
    pg.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")

    slider = pg.locator(".widget-slider", has_text=SIGMA_LABEL)
    slider.wait_for(state="visible", timeout=240_000)
    pg.wait_for_function(f"() => [...document.querySelectorAll('tr')].some(r => r.innerText.includes("
                         f"{json.dumps(THEORY_LABEL)}))", timeout=60_000)
    assert _theory_shown(pg) == want_1
    readout = slider.locator(".widget-readout")
    handle = slider.locator(".noUi-handle")
    assert float(readout.inner_text()) == 1.0 and float(handle.get_attribute("aria-valuenow")) == 1.0

    readout.click()
    pg.keyboard.press("Control+A")
    pg.keyboard.type("2")
    pg.keyboard.press("Enter")
    pg.wait_for_function(f"() => [...document.querySelectorAll('tr')].some(r => r.innerText.includes("
                         f"{json.dumps(THEORY_LABEL)}) && r.innerText.includes({json.dumps(want_2)}))",
                         timeout=60_000)
    assert float(readout.inner_text()) == 2.0
    assert float(handle.get_attribute("aria-valuenow")) == 2.0  # the slider's handle moved too
    assert _theory_shown(pg) == want_2
    pg.wait_for_function(f"() => {KERNEL}.status === 'idle'", timeout=120_000)  # the plot has been redrawn

    out = Path(os.environ.get("PE_KIT_ARTIFACTS") or ROOT / "test-artifacts")
    out.mkdir(parents=True, exist_ok=True)
    shot = out / "browser_05_explorer_sigma2.png"
    cell = pg.locator(".jp-CodeCell", has_text="show_explorer(")  # the explorer cell: its code and the panel
    cell.evaluate("e => e.scrollIntoView({block: 'start'})")
    pg.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
