"""The notebooks: committed clean, and executed headless by the reproduction runner on real data.

``test_notebooks_are_committed_clean`` is fast and always runs. The ``notebooks``-marked tests start Jupyter
kernels: the tiny reproduction executes every notebook with papermill on tests/data/blogs-tiny.jsonl.gz
(80 bloggers × 16 posts) and checks the collected results; the runner tests use two small notebooks to
check resume and failure reporting.
"""
import json
import re
import time
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from pe_kit.run.presets import NOTEBOOK_KEYS, NOTEBOOKS
from pe_kit.run.reproduce import _declared, run_reproduction

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
TINY = Path(__file__).parent / "data" / "blogs-tiny.jsonl.gz"
OURS = ("01_mechanism", "02_probe_design", "03_llr_checks", "04_audit", "05_ablations", "08_one_run_audit")


def test_notebooks_are_committed_clean():
    found = sorted(p.stem for p in NB_DIR.glob("*.ipynb"))
    assert set(OURS) <= set(found)
    assert set(found) <= set(NOTEBOOKS), f"unknown notebook(s) {set(found) - set(NOTEBOOKS)}: add them to NOTEBOOKS"
    for stem in found:
        nb = nbformat.read(NB_DIR / f"{stem}.ipynb", as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert "parameters" in code[0].metadata.get("tags", []), f"{stem}: first code cell must be tagged 'parameters'"
        for i, c in enumerate(code):
            assert c.outputs == [] and c.execution_count is None, f"{stem}: code cell {i} was committed with outputs"
        assert "output_dir" in _declared(NB_DIR / f"{stem}.ipynb")
        if stem in NOTEBOOK_KEYS:
            missing = set(NOTEBOOK_KEYS[stem]) - set(_declared(NB_DIR / f"{stem}.ipynb"))
            assert not missing, f"{stem}: parameters cell lacks {missing}"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce")
    lines = []
    summary = run_reproduction("tiny", results_dir=out, data=str(TINY), progress=False, echo=lines.append)
    return summary, lines, out


@pytest.mark.notebooks
def test_tiny_reproduction_results(tiny_run):
    summary, lines, _ = tiny_run
    assert summary.ok, "\n".join(lines)
    ran = [s.notebook for s in summary.statuses]
    expected = [nb for nb in NOTEBOOKS if (NB_DIR / f"{nb}.ipynb").is_file()]
    assert ran == expected and all(s.status == "ran" for s in summary.statuses)
    run = summary.run_dir
    df = pd.read_csv(summary.results_csv)
    for col in ("notebook", "experiment", "preset", "seed", "version_pe_kit", "version_numpy", "python"):
        assert col in df.columns and df[col].notna().all(), col
    assert set(df["notebook"]) == set(expected) and (df["preset"] == "tiny").all() and (df["seed"] == 0).all()
    # every audit row: 0 ≤ ε_lower ≤ ε_theory, μ_eff ≤ 1/σ, ‖v_P‖ ≤ C; the settings are on the row
    impl = df[df["experiment"] == "implementation_audit"]  # notebook 07: seeded bugs *should* exceed ε_theory
    audits = df[df["epsilon_lower"].notna() & (df["experiment"] != "implementation_audit")]
    assert len(audits) > 0
    assert ((audits["epsilon_lower"] >= 0) & (audits["epsilon_lower"] <= audits["epsilon_theory"] + 1e-9)).all()
    mu = df[df["mu_eff"].notna() & df["mu_eff_ceiling"].notna()]
    assert (mu["mu_eff"] <= mu["mu_eff_ceiling"] + 1e-9).all()
    t2 = df[df["experiment"] == "table2"]
    assert set(t2["study_arm"]) == {"long", "short"} and set(t2["bank_source"]) == {"bankA", "public"}
    assert {"ordinary", "nonce"} <= set(t2["variant"])
    assert (t2.groupby(["study_arm", "bank_source", "variant"]).size() == 2).all()  # per_variant canaries each
    assert (t2["epsilon_theory"].round(3) == 1.695).all() and (t2["trials"] == 20_000).all()
    assert (t2["canary_norm"] <= t2["mech_clip_norm"] + 1e-12).all() and (t2["study_n_test"] == 20).all()
    nonce = t2[t2["variant"] == "nonce"]
    assert (nonce["canary_votes_on_P"] > 0.99).all() and (nonce["mu_eff"] > 0.95).all()  # votes all on the probes
    # 07: every concentrated-design verdict matches its derivation at 2·10⁴ trials (fixed-size needs up to 10⁵)
    if len(impl):
        clear = impl[impl["implementation"] != "fixed_size_sample"]
        assert (clear["violation"].astype(bool) == clear["expected_violation"].astype(bool)).all()
        assert (impl["trials"] == 20_000).all() and impl["epsilon_ceiling"].notna().all()
        ctl = df[df["experiment"] == "implementation_controls"]
        assert len(ctl) and (ctl["times_flagged"] == 0).all()
    t2_ceiling = df[(df["experiment"] == "table2")]
    assert t2_ceiling["epsilon_ceiling"].notna().all() and (t2_ceiling["tightness"].fillna(0) >= 0).all()
    # the LLR checks that are identities pass on real contributions
    llr = df[df["experiment"] == "llr_check"]
    exact = llr[~llr["check"].isin(["gaussian_ks", "mixture_llr"])]
    assert len(exact) >= 10 and exact["passed"].astype(bool).all()
    # the Fig. 1 sweeps carry their 95% band and the swept setting
    sweep = df[df["experiment"] == "sigma_sweep"]
    assert sorted(sweep["mech_noise_multiplier"].unique()) == [0.5, 1.0, 2.0]
    assert (sweep["epsilon_ci_low"] <= sweep["epsilon_ci_high"]).all()
    assert set(df.loc[df["experiment"] == "tightness", "trials"]) == {1_000, 5_000, 20_000}
    # figures: PNG + PDF per figure, non-empty; the markdown table exists
    pngs = sorted((run / "figures").glob("*.png"))
    assert len(pngs) >= 11 and all(p.stat().st_size > 1000 for p in pngs)
    assert all(p.with_suffix(".pdf").stat().st_size > 1000 for p in pngs)
    md = summary.results_md.read_text()
    assert "ε_lower by variant" in md and "| long | bankA |" in md and "about this preset" in md
    for nb in expected:  # executed notebooks are kept
        assert (run / "notebooks" / f"{nb}.ipynb").stat().st_size > 0 and (run / ".done" / f"{nb}.json").is_file()
    # progress (pe_kit.progress): the terminal got the long steps, the notebooks plain lines
    assert any(re.match(r"    audit long/bankA: 0/\d+ canary \(0%\)", x) for x in lines)
    assert any(re.match(r"    audit short/public: \d+/\d+ canary in ", x) for x in lines)
    for nb in expected:
        executed = nbformat.read(run / "notebooks" / f"{nb}.ipynb", as_version=4)
        for i, cell in enumerate(c for c in executed.cells if c.cell_type == "code"):
            text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
            assert not re.search(r"[\r\x1b]", text), f"{nb} code cell {i}: carriage return / escape code in {text[:200]!r}"
    audit_nb = nbformat.read(run / "notebooks" / "04_audit.ipynb", as_version=4)
    audit_cell = [c for c in audit_nb.cells if "audits.audit_variants(" in c.source][0]
    audit_text = "".join(o.get("text", "") for o in audit_cell.outputs if o.get("output_type") == "stream")
    # one closing line per step: 4 audits (arm × bank); a line at most every 10 s per step, the cell's prints
    assert len(re.findall(r"^audit (long|short)/(bankA|public): 16/16 canary in ", audit_text, flags=re.M)) == 4
    assert len(audit_cell.outputs) <= 60 and audit_text.count("\n") <= 60, audit_text[:2000]  # a tqdm.auto bar: 182


@pytest.mark.notebooks
def test_tiny_rerun_reuses_everything(tiny_run):
    summary, _, out = tiny_run
    assert summary.ok
    before = summary.results_csv.read_bytes()
    t0 = time.perf_counter()
    again = run_reproduction("tiny", results_dir=out, data=str(TINY), progress=False, echo=lambda s: None)
    assert time.perf_counter() - t0 < 60
    assert [s.status for s in again.statuses] == ["reused"] * len(summary.statuses)
    assert again.results_csv.read_bytes() == before


def _mini_notebook(path: Path, body: str) -> None:
    params = nbformat.v4.new_code_cell('output_dir = "."\npreset = "tiny"\nseed = 0')
    params.metadata["tags"] = ["parameters"]
    cells = [nbformat.v4.new_markdown_cell("# mini"), params,
             nbformat.v4.new_code_cell("from pe_kit.report import results"), nbformat.v4.new_code_cell(body)]
    nb = nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "language": "python",
                                                                        "display_name": "Python 3"}})
    nbformat.write(nb, path)


GOOD = ("results.write_rows(results.tidy([{'value': 1.0, 'seed_seen': seed}], '{nb}', 'mini', "
        "{'preset': preset, 'seed': seed}), output_dir, '{nb}')")


@pytest.mark.notebooks
def test_failure_names_notebook_and_cell_and_resume(tmp_path, capsys):
    from pe_kit.run.cli import main

    nbs = tmp_path / "nbs"
    nbs.mkdir()
    _mini_notebook(nbs / "01_mechanism.ipynb", GOOD.replace("{nb}", "01_mechanism"))
    _mini_notebook(nbs / "02_probe_design.ipynb", "raise ValueError('bad input: n_aux')")
    argv = ["reproduce", "--preset", "tiny", "--results-dir", str(tmp_path / "res"), "--notebooks-dir", str(nbs),
            "--run-id", "mini", "--no-progress", "--seed", "4"]
    assert main(argv) == 1  # cells: markdown 0, parameters 1, injected parameters 2, import 3, the raise 4
    cap = capsys.readouterr()
    both = cap.out + cap.err
    assert re.search(r"notebook 02_probe_design failed in cell 4 .*ValueError: bad input: n_aux", both)
    assert both.count("bad input: n_aux") == 1  # the failure is reported once (issue 14), not twice
    assert "02_probe_design failed" in cap.err  # and the exit line on stderr points at it
    run = tmp_path / "res" / "mini"
    assert (run / ".done" / "01_mechanism.json").is_file() and not (run / ".done" / "02_probe_design.json").exists()
    assert (run / "notebooks" / "02_probe_design.ipynb").is_file()  # the partial notebook with the traceback
    df = pd.read_csv(run / "results.csv")  # what finished is collected
    assert list(df["notebook"]) == ["01_mechanism"] and list(df["seed_seen"]) == [4]
    assert "FAILED" in (run / "results.md").read_text()
    # fix the notebook: the finished one is reused, the failed one runs
    _mini_notebook(nbs / "02_probe_design.ipynb", GOOD.replace("{nb}", "02_probe_design"))
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "[1/2] 01_mechanism: reused" in out and "[2/2] 02_probe_design: done" in out
    assert list(pd.read_csv(run / "results.csv")["notebook"]) == ["01_mechanism", "02_probe_design"]
    # a changed parameter invalidates the marker
    assert main(argv[:-1] + ["5"]) == 0
    assert "01_mechanism: done" in capsys.readouterr().out
    info = json.loads((run / ".done" / "01_mechanism.json").read_text())
    assert info["params"]["seed"] == 5 and info["outputs"]["01_mechanism.csv"] > 0
