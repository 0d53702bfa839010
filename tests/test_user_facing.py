"""User-facing defects an adversarial tester found (session 4): results.md states its own run's sizes and only real
changes, notebook 08's table, input errors that name the field and the fix, ``pe-kit results NAME``, one progress
end line with ``--log-output``. No notebook runs here except the one marked ``notebooks``."""
from pathlib import Path

import numpy as np
import pytest

from pe_kit.run.presets import PRESETS, get_preset

TINY = Path(__file__).parent / "data" / "blogs-tiny.jsonl.gz"


# ------------------------------------------------------------------------------------------------ 1. sizes
def test_results_md_states_the_sizes_of_its_own_run(tmp_path):
    from tests.test_fit import _s140

    from pe_kit.run.fit import data_profile, fit_preset
    from pe_kit.run.reproduce import about_preset, run_sizes

    data = _s140(tmp_path / "own.csv", 60, 40)
    p = get_preset("quick", data=data, fmt="sentiment140")
    fitted = fit_preset(p, data_profile(data, "sentiment140", p.record_cap)).preset
    assert (fitted.record_cap, fitted.max_probes, fitted.bank_size, fitted.n_test) == (40, 64, 448, 16)
    line = run_sizes(fitted)
    assert line.startswith("m=40, canaries=6 (5 per variant), aux/calibration/test=8/16/16, p=448, "
                           "r=64 (exact: r=m=40 copies), M=512, token cap=64")
    assert "notebook 06" not in line  # its p was capped at the run's p = 448
    about = about_preset(fitted, changed=True)
    for stale in ("r=64", "m=64", "p=8192", "N=290"):  # the quick preset's own sizes are not this run's
        assert stale not in about
    assert "sizes of this run" in about and "pe-kit presets" in about
    assert about_preset(PRESETS["quick"], changed=False) == PRESETS["quick"].description
    set40 = get_preset("quick", {"max_probes": 40, "record_cap": 40})
    assert ", r=40 (exact: r=m=40 copies)" not in run_sizes(set40) and ", r=40, M=512" in run_sizes(set40)
    assert run_sizes(PRESETS["quick"]).endswith("; notebook 06: p=512")  # 06's own p, not the preset's 8192


# ------------------------------------------------------------------------------------------------ 2. changes
def test_changed_from_preset_lists_only_real_changes():
    from pe_kit.settings import parse_override
    from pe_kit.run.reproduce import preset_changes

    assert preset_changes(PRESETS["quick"]) == {} and preset_changes(get_preset("tiny")) == {}
    p = get_preset("quick", dict([parse_override("06.rounds=3"), parse_override("trials=1e4")]))
    assert preset_changes(p) == {"trials": 10_000, "06.rounds": 3}  # 08's untouched extras are not listed
    same = get_preset("quick", dict([parse_override("08.idealised_repeats=3")]))  # the preset's own value
    assert preset_changes(same) == {}
    p8 = get_preset("tiny", dict([parse_override("08.published_repeats=5")]))
    assert preset_changes(p8) == {"08.published_repeats": 5}


# ------------------------------------------------------------------------------------------------ 3. notebook 08
def _one_run_row(method: str, eps: float, mu_lower: float) -> dict:
    return {"experiment": "one_run", "method": method, "variant": "nonce", "m": 6, "probe_share": 0.5,
            "epsilon_lower": eps, "mu_lower": mu_lower, "k_plus": 2, "k_minus": 1, "guesses": 3, "correct": 3,
            "mu_eff": 0.8, "epsilon_theory": 5.4, "releases": 1, "seconds": 0.2, "mech_sample_rate": 1.0}


def test_one_run_tables_show_both_bounds_and_integer_counts(tmp_path):
    import pandas as pd

    from pe_kit.report.results import collect, summary_markdown, tidy, write_rows
    from steps.one_run import idealised_rows

    ideal = idealised_rows(1.0, 1.0, [100], 0, repeats=3)  # the idealised game: real bounds, no PE
    rows = [_one_run_row("steinke", 0.25, float("nan")), _one_run_row("fdp", 0.5, 0.125)] + ideal
    write_rows(tidy(rows, "08_one_run_audit", None, {"preset": "tiny", "seed": 0}), tmp_path, "08_one_run_audit")
    write_rows(tidy([{"experiment": "mechanism", "quantity": "users", "value": 20.0}], "01_mechanism", None),
               tmp_path, "01_mechanism")  # other notebooks' rows make 08's count columns NaN-padded floats
    md = summary_markdown(collect(tmp_path, ["01_mechanism", "08_one_run_audit"]))
    one = md.split("## One-run audits of one PE release")[1].split("##")[0]
    header = [h.strip() for h in next(x for x in one.splitlines() if x.startswith("|")).strip("|").split("|")]
    assert {"epsilon_lower", "mu_lower", "m", "k_plus", "epsilon_theory"} <= set(header)
    assert "| 1.000 | nonce | fdp | 6 | 0.500 | 0.800 | 2 | 1 | 3 | 3 | 0.500 | 0.125 | 5.400 | 1 |" in one
    assert "| 1.000 | nonce | steinke | 6 | 0.500 | 0.800 | 2 | 1 | 3 | 3 | 0.250 |  | 5.400 | 1 |" in one
    assert "6.0" not in one
    idl = md.split("## One-run audits on the idealised game")[1]
    fdp = pd.DataFrame([r for r in ideal if r["method"] == "fdp"])
    med = f"{fdp['epsilon_lower'].median():.3f} | {fdp['epsilon_lower'].min():.3f} | {fdp['epsilon_lower'].max():.3f}"
    assert f"| 1.000 | 100 | fdp | 3 | {med} | {fdp['mu_lower'].median():.3f} |" in idl
    assert "one_run_idealised (08" not in md and "one_run (08" not in md  # no generic fallback tables left



def test_results_md_shows_the_published_value_checks_and_says_what_is_not_reproduced(tmp_path):
    from pe_kit.report.results import collect, summary_markdown, tidy, write_rows
    from steps.one_run_checks import published_checks

    checks = [{**r, "experiment": "one_run_published"} for r in published_checks(repeats=3, seed=0, sigmas=(2.0,))]
    write_rows(tidy(checks, "08_one_run_audit", None, {"preset": "tiny", "seed": 0}), tmp_path, "08_one_run_audit")
    md = summary_markdown(collect(tmp_path, ["08_one_run_audit"]))
    sec = md.split("## One-run bounds against their published values")[1]
    title, table = sec.split("\n", 1)
    assert "f-DP column does not" in title and "`within` = True" in title and "100" in title
    lines = [x for x in table.splitlines() if x.startswith("| ")]
    assert lines[0] == "| table | method | setting | published | reproduced | tolerance | within | note |"
    by = {x.split(" | ")[1]: x for x in lines[1:]}
    assert set(by) == {"game", "theory", "steinke", "fdp"}
    assert by["game"].startswith("| App. B | game |") and "| 1429.000 |" in by["game"]
    assert by["fdp"].startswith("| Table 1 | fdp | σ=2, m=100000, δ=1e-05 | 1.590 |") and "3 games" in by["fdp"]
    assert "one_run_published (08" not in md  # its own table, not the generic fallback

# ------------------------------------------------------------------------------------------------ 4. --format
def test_wrong_format_names_the_format_the_file_looks_like(tmp_path, capsys):
    import gzip

    from tests.test_fit import _s140

    from pe_kit.data.loaders import DataError, load_corpus, sniff_format
    from pe_kit.run.cli import main

    csv_path = _s140(tmp_path / "own.csv", 3, 4)
    rc = main(["reproduce", "--data", csv_path, "--format", "yelp", "--results-dir", str(tmp_path / "r"),
               "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "looks like Sentiment140 CSV" in err and "not format 'yelp'" in err
    assert "pass --format sentiment140" in err and "on_error" not in err
    blogs = tmp_path / "mine.jsonl"
    blogs.write_text('{"user_id": "a", "text": "hi", "industry": "x"}\n')
    yelp = tmp_path / "reviews.jsonl.gz"
    with gzip.open(yelp, "wt") as fh:
        fh.write('{"review_id": "r", "user_id": "a", "text": "ok", "stars": 4.0}\n')
    assert [sniff_format(x) for x in (csv_path, blogs, yelp, TINY)] == ["sentiment140", "blogs", "yelp", "blogs"]
    with pytest.raises(DataError, match="looks like Blog Authorship JSON Lines .* pass --format blogs"):
        load_corpus(blogs, "yelp")
    with pytest.raises(DataError, match="looks like Yelp reviews JSON Lines .* pass --format yelp"):
        load_corpus(yelp, "sentiment140")
    misnamed = tmp_path / "posts.csv"  # auto goes by the name (.csv → sentiment140); the content says blogs
    misnamed.write_text(blogs.read_text())
    with pytest.raises(DataError, match="pass --format blogs"):
        load_corpus(misnamed)
    assert len(load_corpus(blogs, "blogs", min_records=1).users) == 1  # a matching format loads as before
    assert len(load_corpus(yelp, "yelp", record_cap=1).users) == 1


# ------------------------------------------------------------------------------------------------ 5. model
def test_unknown_model_is_refused_before_any_notebook_listing_offline_models(tmp_path, capsys, monkeypatch):
    from pe_kit.run.cli import main
    from pe_kit.text.models import check_model_offline, offline_models

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert offline_models()[0] == "all-MiniLM-L6-v2"
    rc = main(["reproduce", "--preset", "tiny", "--set", "model=nosuch-model", "--results-dir", str(tmp_path / "r"),
               "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "model='nosuch-model' cannot be loaded offline here" in err
    assert "Models the kit can load offline: all-MiniLM-L6-v2" in err and "--set model=/path/to/model" in err
    assert not (tmp_path / "r").exists()  # refused before any notebook (the old failure came inside notebook 01)
    with pytest.raises(ValueError, match="did you mean 'all-MiniLM-L6-v2'"):
        check_model_offline("all-MiniLM-L6-v3")
    with pytest.raises(ValueError, match=r"encoders='all-MiniLM-L12-v2'.*no offline package exists"):
        check_model_offline("all-MiniLM-L12-v2", "encoders")
    rc = main(["reproduce", "--preset", "tiny", "--set", "encoders=all-MiniLM-L6-v2,typo-encoder", "--results-dir",
               str(tmp_path / "r"), "--no-progress"])
    assert rc == 2 and "encoders='typo-encoder'" in capsys.readouterr().err
    for ok in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", str(tmp_path)):  # a folder is taken
        check_model_offline(ok)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # downloads allowed: a hub id is the user's call
    check_model_offline("someone/some-model")


# ------------------------------------------------------------------------------------------------ 6. banks
def test_unknown_bank_is_refused_before_any_notebook_listing_bank_names(tmp_path, capsys, monkeypatch):
    from pe_kit.run.cli import main

    def run(*sets):
        argv = ["reproduce", "--preset", "tiny", "--results-dir", str(tmp_path / "r"), "--no-progress"]
        for x in sets:
            argv += ["--set", x]
        return main(argv), capsys.readouterr().err

    rc, err = run("banks=nosuch")
    assert rc == 2 and "banks contains 'nosuch' (not a bank name and no such file)" in err
    assert "use bank names bankA, bankB, public, llm-label, llm-icl or a JSON Lines file" in err and "--set banks=" in err
    rc, err = run("bank=publc")
    assert rc == 2 and "bank contains 'publc'" in err and "did you mean 'public'?" in err
    rc, err = run("banks=bankA,file:/no/such.jsonl")
    assert rc == 2 and "'file:/no/such.jsonl' (no such file)" in err
    assert not (tmp_path / "r").exists()
    from pe_kit.run.preflight import check_banks

    bank = tmp_path / "bank.jsonl"
    bank.write_text('{"text": "a"}\n')
    check_banks(get_preset("tiny", {"banks": ["bankA", "public", str(bank), f"file:{bank}"]}))  # all accepted


def test_bank_size_beyond_bank_a_is_refused_naming_the_key_set(tmp_path, capsys):
    """A notebook's own bank_size above bank A's 8,192 texts is refused before any notebook runs, and the message
    names that notebook's key (it once suggested the common --set bank_size=8192, which leaves 06's value as it was)."""
    from pe_kit.data.loaders import load_bank_texts
    from pe_kit.run.cli import main
    from pe_kit.run.preflight import check_bank_sizes

    n = len(load_bank_texts(None)[0])
    assert n == 8192  # the bundled bank A: the paper's p
    base = ["reproduce", "--preset", "tiny", "--results-dir", str(tmp_path / "r"), "--no-progress"]
    assert main(base + ["--notebooks", "06", "--set", "06.bank_size=100000"]) == 2
    err = capsys.readouterr().err
    assert "06_multiround_mauve.bank_size=100000: bank A" in err and "8,192 distinct texts" in err
    assert "--set 06_multiround_mauve.bank_size=… with at most 8192" in err
    assert main(base + ["--notebooks", "04", "--set", "bank_size=9000", "--set", "banks=bankA"]) == 2
    assert "bank_size=9000: bank A" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    from pe_kit.run.presets import PRESETS

    for preset in PRESETS.values():  # every preset's sizes fit
        check_bank_sizes(preset)
    check_bank_sizes(get_preset("tiny", {"banks": ["public"], "bank": "public", "bank_size": 10**6}))  # not bank A
    own = {"banks": ["public"], "bank": "public", "04_audit.banks": ["public", "bankA"], "04_audit.bank_size": 9000}
    with pytest.raises(ValueError, match="04_audit.bank_size=9000: bank A"):  # a notebook's own list naming bank A
        check_bank_sizes(get_preset("tiny", own))


# ------------------------------------------------------------------------------------------------ 7. --data folder
def test_data_folder_is_named_as_a_folder_with_the_formats(tmp_path, capsys):
    from pe_kit.data.loaders import load_corpus
    from pe_kit.run.cli import main

    (tmp_path / "train.csv").write_text("")
    rc = main(["reproduce", "--preset", "tiny", "--data", str(tmp_path), "--results-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and f"data='{tmp_path}' is a folder; --data takes one corpus file" in err
    assert "Sentiment140 CSV (.csv)" in err and "Yelp reviews JSON Lines" in err and "does not exist" not in err
    assert f"files here that could be one: {tmp_path / 'train.csv'}" in err
    with pytest.raises(IsADirectoryError, match="is a folder; path takes one corpus file"):
        load_corpus(tmp_path, "blogs")


# ------------------------------------------------------------------------------------------------ 8. did you mean
def test_set_key_typos_suggest_the_closest_key(tmp_path, capsys):
    from pe_kit.run.cli import main
    from pe_kit.settings import did_you_mean, parse_override

    with pytest.raises(ValueError, match=r"--set trails=…: unknown setting; did you mean 'trials'\?; valid keys: "):
        parse_override("trails=1000")
    with pytest.raises(ValueError, match=r"did you mean 'max_probes'\?"):
        parse_override("max_probe=32")
    with pytest.raises(ValueError, match=r"did you mean '08_one_run_audit'\?"):
        parse_override("08_one_run_audt.copies=5")
    assert did_you_mean("zzz", ["trials", "seed"]) == ""  # nothing close: no guess
    argv = ["reproduce", "--preset", "tiny", "--results-dir", str(tmp_path / "r"), "--no-progress", "--set"]
    assert main(argv + ["trails=1000"]) == 2 and "did you mean 'trials'?" in capsys.readouterr().err
    assert main(argv + ["08.idealised_repeat=2"]) == 2  # a notebook's own parameter, checked against its cell
    err = capsys.readouterr().err
    assert "notebook 08_one_run_audit has no parameter 'idealised_repeat'; did you mean 'idealised_repeats'?" in err
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------------------ 9. results NAME
def test_results_resolves_a_preset_or_run_id_name(tmp_path, capsys, monkeypatch):
    import os

    from pe_kit.run.cli import main

    for i, run in enumerate(("tiny", "tiny-own-1a2b3c-fit", "quick", "tinyx")):
        (tmp_path / run).mkdir()
        (tmp_path / run / "results.md").write_text(f"# {run}\n")
        os.utime(tmp_path / run / "results.md", (1_000_000 + i, 1_000_000 + i))  # later in the loop = newer
    (tmp_path / "paper").mkdir()  # a run without results.md is never chosen
    assert main(["results", "tiny", "--results-dir", str(tmp_path)]) == 0
    cap = capsys.readouterr()
    assert cap.out == "# tiny-own-1a2b3c-fit\n\n"  # the newest of tiny and tiny-…; tinyx is another name
    assert "(newest of 2; others: tiny)" in cap.err
    monkeypatch.chdir(tmp_path.parent)
    os.rename(tmp_path, tmp_path.parent / "results")  # the default --results-dir is ./results
    assert main(["results", "quick"]) == 0 and capsys.readouterr().out == "# quick\n\n"
    assert main(["results", "paper"]) == 2
    err = capsys.readouterr().err
    assert "no run named 'paper' or 'paper-…'" in err
    runs = "tinyx, quick, tiny-own-1a2b3c-fit, tiny"  # newest first
    assert f"run folders with a results.md under {tmp_path.parent / 'results'}: {runs}" in err


# ------------------------------------------------------------------------------------------------ 10. explore --q
def test_explore_q_out_of_range_names_sample_rate_and_the_range(capsys):
    from pe_kit.report.widgets import explorer_state
    from pe_kit.run.cli import main

    for q, why in (("1.5", "is out of range: use"), ("0", "is out of range: use"), ("-0.1", "is out of range: use"),
                   ("nan", "is not")):
        assert main(["explore", "--q", q]) == 2  # one check, one wording: sample_rate's declaration (pe_kit.settings)
        assert capsys.readouterr().err == f"pe-kit: sample_rate={float(q)!r} {why} a number in (0, 1]" + (
            " (must be finite)\n" if q == "nan" else "\n")
    assert main(["explore", "--q", "1", "--json"]) == 0  # q = 1 is inside (0, 1]
    assert '"sample_rate": 1.0' in capsys.readouterr().out
    assert main(["explore", "--sigma", "0"]) == 2 and "sigma=0.0 must be > 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"sample_rate=1.5 is out of range: use a number in \(0, 1\]"):
        explorer_state(1.0, 1.5, 1000)


# ------------------------------------------------------------------------------------------------ 11. --log-output
@pytest.mark.notebooks
def test_log_output_prints_each_end_line_once(tmp_path, monkeypatch, capfd):
    from tests.test_progress import STEP_CELL
    from tests.user_notebooks import one_cell_notebook

    from pe_kit.run.reproduce import run_reproduction

    monkeypatch.setenv("PE_KIT_PROGRESS_INTERVAL", "0.5")
    nbs = tmp_path / "nbs"
    one_cell_notebook(nbs, STEP_CELL)
    lines: list[str] = []
    summary = run_reproduction("tiny", results_dir=tmp_path / "res", notebooks_folder=nbs, progress=False,
                               echo=lines.append, log_output=True)
    assert summary.ok, lines
    shown = "\n".join(lines) + "\n" + capfd.readouterr().err
    assert shown.count("audit long/bankA: 40/40 canary in ") == 1  # was twice: kernel stderr and progress file
    assert any(x.startswith("    audit long/bankA: 0/40 canary (0%)") for x in lines)  # start and updates still shown
