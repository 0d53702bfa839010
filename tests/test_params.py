"""One typed validation for every run parameter (issue 10, item 2): --set, presets, StudyConfig, resolve_params."""
from __future__ import annotations

import nbformat
import pytest

from pe_kit.settings import AuditConfig, MechanismConfig, check_param, parse_override
from pe_kit.run.presets import PRESETS, get_preset, resolve_params


@pytest.mark.parametrize("text, key, value", [
    ("trials=1e6", "trials", 1_000_000),  # integral floats are fine for integer fields
    ("trials=200000.0", "trials", 200_000),
    ("sigmas=1e-1", "sigmas", (0.1,)),  # a single value for a list field
    ("variants=ordinary", "variants", ("ordinary",)),
    ("variants=all", "variants", "all"),
    ("tightness_trials=1e3,2e4", "tightness_trials", (1000, 20000)),
    ("max_seq_length=null", "max_seq_length", None),
])
def test_set_accepts_and_normalises(text, key, value):
    k, v = parse_override(text)
    p = get_preset("tiny", {k: v})
    assert getattr(p, key) == value and type(getattr(p, key)) is type(value)


@pytest.mark.parametrize("text, words", [
    ("trials=true", "true/false is not a number"),  # bool is not an int (was: 1 trial)
    ('trials="5000"', "not an integer ≥ 1"),
    ("max_probes=1.5", "no fractional part"),
    ("max_probes=true", "true/false is not a number"),
    ("n_test=null", "null is not accepted"),
    ("model=null", "null is not accepted"),
    ("record_cap=false", "true/false"),
    ("n_test=0", "out of range: use an integer ≥ 1"),
    ("qs=0.5,1.5", "qs[1]=1.5 is out of range: use a list of numbers in (0, 1]"),
    ("arm=medium", "use one of long, short"),
    ("06.rounds=true", "true/false"),
    ("paraphraser=", "paraphraser is empty: use a text (one of smollm2, auto, wordnet)"),
    ("trials=", "trials is empty: use an integer ≥ 1"),
])
def test_set_refuses_values_that_mean_something_else(text, words):
    with pytest.raises(ValueError) as err:
        parse_override(text)
    key = text.split("=")[0].split(".")[-1]
    assert key in str(err.value) and words in str(err.value)


def test_same_validation_in_configs_and_resolve_params(tmp_path):
    from pe_kit.study.world import StudyConfig

    assert StudyConfig(n_test=1e3).n_test == 1000 and type(StudyConfig(n_test=1e3).n_test) is int
    for bad in (dict(n_test=True), dict(n_test=2.5), dict(arm="middle"), dict(max_seq_length=2), dict(data=3)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            StudyConfig(**bad)
    with pytest.raises(ValueError, match="top_k=True"):
        MechanismConfig(top_k=True)
    assert MechanismConfig(top_k=5.0).top_k == 5 and AuditConfig(trials=1e6).trials == 1_000_000
    with pytest.raises(ValueError, match="sample_rate"):
        MechanismConfig(sample_rate=0)
    out = str(tmp_path / "o")
    P = resolve_params("03_llr_checks", "tiny", output_dir=out, trials=2e4)
    assert P["trials"] == 20_000 and type(P["trials"]) is int and P["ceiling_sigmas"] == [0.5, 1.0, 2.0]
    with pytest.raises(ValueError, match="trials=True"):
        resolve_params("03_llr_checks", "tiny", output_dir=out, trials=True)
    # every preset passes its own validation
    for name in ("tiny", "quick"):
        assert get_preset(name) is not None
    assert check_param("sigmas", 0.5) == [0.5]
    # σ = 0 in the Fig. 1 sweep has no noise to audit (ε_theory = ∞); it once reached notebook 05 and the kernel
    # was killed for memory at 24 GiB. The sweep takes σ > 0 only; a single mechanism may still run at σ = 0.
    for bad in (0, [0, 1], -0.5):
        with pytest.raises(ValueError, match=r"sigmas(\[0\])?=-?0(\.5)? is out of range: use a list of numbers > 0"):
            check_param("sigmas", bad)
    assert MechanismConfig(noise_multiplier=0.0).noise_multiplier == 0.0
    from pathlib import Path

    assert StudyConfig(data=Path("/x/y.jsonl")).data == "/x/y.jsonl"  # a Path is fine for a path field


def test_cli_undeclared_notebook_parameter_exits_2_listing_declared(tmp_path, capsys):
    from pe_kit.run.cli import main

    base = ["reproduce", "--preset", "tiny", "--results-dir", str(tmp_path), "--no-progress"]
    assert main(base + ["--notebooks", "03", "--set", "03.bogus_param=5"]) == 2
    err = capsys.readouterr().err
    assert "03_llr_checks has no parameter 'bogus_param'" in err and "llr_trials" in err and "ceiling_sigmas" in err
    assert main(base + ["--notebooks", "06", "--set", "06.roundz=3"]) == 2
    err = capsys.readouterr().err
    assert "'roundz'" in err and "rounds" in err and "mauve_seeds" in err
    assert main(base + ["--set", "03.seed=3"]) == 2 and "--seed" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # refused before any notebook ran
    # explore takes the same integer rule: 1e6 is fine, 1.5 is not
    assert main(["explore", "--trials", "1e6", "--json"]) == 0
    assert main(["explore", "--trials", "1.5"]) == 2 and "no fractional part" in capsys.readouterr().err


def test_unused_set_key_is_named_with_the_notebooks_that_read_it():
    from pathlib import Path

    from pe_kit.run.preflight import unused_overrides

    folder = Path(__file__).resolve().parents[1] / "notebooks"
    out = unused_overrides({"paraphraser": "wordnet", "max_seq_length": 64, "06_multiround_mauve.rounds": 3},
                           ["01_mechanism", "03_llr_checks"], folder)
    assert out == ["--set paraphraser=… has no effect on 01_mechanism, 03_llr_checks: it is read by 02_probe_design, "
                   "04_audit, 05_ablations; add those notebooks with --notebooks or drop the setting"]
    # every key of scripts/paper_run.sh's parts reaches one of its notebooks
    assert unused_overrides({"arms": ["short"], "max_seq_length": 64}, ["04_audit"], folder) == []
    assert unused_overrides({"arm": "long", "n_test": 600, "n_calibration": 600}, ["06_multiround_mauve"], folder) == []
    assert unused_overrides({"arm": "short", "sweep_arm": "short"}, ["01_mechanism", "02_probe_design",
                                                                     "03_llr_checks", "05_ablations"], folder) == []
    assert unused_overrides({"sweep_trials": 5}, ["01_mechanism"], folder)[0].endswith(
        "it is read by 05_ablations; add those notebooks with --notebooks or drop the setting")


def test_tiny_preset_extra_is_typed():
    assert PRESETS["tiny"].extra["06_multiround_mauve"]["rounds"] == 3


@pytest.mark.notebooks
def test_notebook_without_kernelspec_runs(tmp_path, capfd):
    """case09: no kernelspec and no language_info in the metadata; the runner's own kernel runs it."""
    from pe_kit.run.reproduce import run_reproduction

    nbs = tmp_path / "nb"
    nbs.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.metadata = {}
    params = nbformat.v4.new_code_cell('output_dir = "."\nseed = 0\n')
    params.metadata["tags"] = ["parameters"]
    body = nbformat.v4.new_code_cell("import sys\nfrom pe_kit.report.results import write_rows\n"
                                     "write_rows([{'executable': sys.executable, 'seed': seed}], output_dir, '07_nokernel')")
    nb.cells = [params, body]
    nbformat.write(nb, nbs / "07_nokernel.ipynb")
    summary = run_reproduction("tiny", results_dir=tmp_path / "runs", run_id="case09", notebooks=["07_nokernel"],
                               notebooks_folder=nbs, progress=False, echo=lambda s: None)
    assert summary.ok and [s.status for s in summary.statuses] == ["ran"]
    import sys

    import pandas as pd

    assert pd.read_csv(summary.run_dir / "07_nokernel.csv")["executable"].tolist() == [sys.executable]
    # the kernel's start-up chatter stays off the terminal (issue 10 item 4)
    assert "Kernel is running over TCP" not in capfd.readouterr().err
