"""The pe-kit command: presets, overrides, the headless explorer, argument errors (no notebook execution here)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pe_kit.run.cli import main
from pe_kit.run.presets import (
    NOTEBOOK_KEYS,
    PRESETS,
    get_preset,
    notebook_params,
    resolve_params,
)
from pe_kit.settings import parse_override
from pe_kit.run.reproduce import default_run_id

TINY = Path(__file__).parent / "data" / "blogs-tiny.jsonl.gz"


def test_presets_listing(capsys):
    """One short block per preset: purpose in one line, cold time, sizes as a two-line table, data; the long
    rationale is in docs/presets.md (which the listing names and which exists)."""
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    blocks = {b.split(":", 1)[0]: b.splitlines() for b in out.strip().split("\n\n")}
    assert list(blocks)[:3] == ["tiny", "quick", "paper"]
    for name in ("tiny", "quick", "paper"):
        lines = blocks[name]
        assert lines[0] == f"{name}: {PRESETS[name].description}" and len(PRESETS[name].description) < 320
        assert lines[1].startswith("   cold: ")
        header, values = re.split(r" {2,}", lines[2].strip()), lines[3].split()
        assert header == ["m", "canary users", "canaries per variant", "aux", "calibration", "test N", "p", "r", "M",
                          "token cap", "trials", "sweep trials"] and len(values) == 12
    paper = dict(zip(["m", "canary_users", "per_variant", "aux", "calibration", "test", "p", "r", "M", "cap", "trials",
                      "sweep"], blocks["paper"][3].split()))
    # the paper's sizes (§3, App. D): 25 canary users, 5 canaries audited per real-canary variant
    assert paper == {"m": "64", "canary_users": "25", "per_variant": "5", "aux": "500", "calibration": "1000",
                     "test": "1000", "p": "8192", "r": "64", "M": "512", "cap": "256", "trials": "10⁶",
                     "sweep": "5·10⁶"}
    # tiny: the 5 are users of the canary split, the 2 the canaries each variant audits (no longer "canaries 5",
    # "per variant 2": five canaries, two of what?)
    assert blocks["tiny"][2:4] == ["    m  canary users  canaries per variant  aux  calibration  test N    p   r   M  "
                                   "token cap  trials  sweep trials",
                                   "   16             5                     2   15           20      20  256  16  64  "
                                   "       32   20000         20000"]
    # the paper preset ships no data: its listing says how to give it one
    assert blocks["paper"][4].startswith("   data: pass --data PATH")
    assert blocks["quick"][4].startswith("   data: the bundled Blogs sample")
    assert "docs/presets.md" in out and (Path(__file__).resolve().parents[1] / "docs" / "presets.md").is_file()


def test_paper_and_quick_sizes():
    paper, quick = PRESETS["paper"], PRESETS["quick"]
    assert (paper.n_aux, paper.n_calibration, paper.n_test, paper.bank_size, paper.max_probes, paper.record_cap,
            paper.per_variant, paper.trials, paper.pool_size) == (500, 1000, 1000, 8192, 64, 64, 5, 10**6, 512)
    # quick keeps the paper's operating point (issue 11): m = 64, exact r = m, p = 8192, 5 independent canaries
    # per real variant, equal-size calibration and test splits of distinct users
    assert (quick.record_cap, quick.bank_size, quick.max_probes, quick.pool_size) == (64, 8192, 64, 512)
    assert quick.n_canary == 25 and quick.per_variant == 5 and quick.n_calibration == quick.n_test
    assert 10**5 <= quick.trials <= 10**6 and quick.data is None  # the bundled Blogs sample
    assert "64 tokens" in quick.description and "N=290" in quick.description  # says how it differs from the paper


def test_quick_splits_fit_the_bundled_sample_with_a_public_bank():
    """25 canaries + aux + 2N users leave enough bloggers for a p = 8192 public bank (64 posts each)."""
    from pe_kit.data.loaders import load_corpus
    from pe_kit.data.splits import make_arm, split_users

    q = PRESETS["quick"]
    corpus = make_arm(load_corpus(None, record_cap=q.record_cap), "long", q.record_cap)
    s = split_users(corpus, q.n_canary, q.n_aux, q.n_calibration, q.n_test, canary_records=q.record_cap)
    assert len(s.public) * q.record_cap >= q.bank_size
    assert not set(s.calibration) & set(s.test) and len(s.calibration) == len(s.test) == q.n_test


def test_multiround_presets_fit_the_retrieval_pool():
    """Notebook 06's public-retrieval generator asks for g = p − r − k̃ new texts per round and draws them from a
    pool of 3·T·g unused bank-A texts (its parameters cell): every preset's p must leave that many (bank A holds
    8,192 label-only texts), and the paper preset audits the composed releases at 5·10⁶ trials (App. D)."""
    from pe_kit.data.loaders import load_bank_texts
    from pe_kit.pe.multiround import PEConfig

    bank_a = len(set(load_bank_texts(None)[0]))
    for name in ("quick", "paper"):
        p = PRESETS[name]
        nb = {**p.as_dict(), **p.extra.get("06_multiround_mauve", {})}
        rounds, size, r = nb.get("rounds", 6), nb["bank_size"], min(nb["max_probes"], nb["bank_size"])
        g = size - r - PEConfig().retain_count(size, r)
        assert 3 * rounds * g <= bank_a - size, name
    assert PRESETS["paper"].extra["06_multiround_mauve"] == {"bank_size": 512, "trials": 5_000_000}


def test_explore_json(capsys):
    assert main(["explore", "--sigma", "1", "--q", "0.1", "--trials", "1e6", "--mu-eff", "1", "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["epsilon_theory"] == pytest.approx(1.695, abs=0.003) and 0.9 < st["epsilon_lower_expected"] < 1.05
    assert main(["explore", "--sigma", "-1"]) == 2
    assert "sigma" in capsys.readouterr().err


def test_explore_json_is_strict_json_at_delta_zero(capsys):
    """δ = 0 gives ε_theory = ∞ (the Gaussian mechanism has no pure-DP ε) and fraction_of_theory = NaN: strict JSON
    has neither, so both are null and not_finite names their values; a strict parser reads the output."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    assert main(["explore", "--delta", "0", "--json"]) == 0
    st = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert st["epsilon_theory"] is None and st["fraction_of_theory"] is None
    assert st["not_finite"] == {"epsilon_theory": "inf", "fraction_of_theory": "nan"}
    assert st["epsilon_lower_expected"] == pytest.approx(1.0138, abs=1e-4)
    assert main(["explore", "--json"]) == 0
    assert json.loads(capsys.readouterr().out, parse_constant=refuse)["not_finite"] == {}


def test_explore_help_describes_every_option_with_field_names(capsys):
    with pytest.raises(SystemExit):
        main(["explore", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for text in ("--sigma σ noise multiplier σ (field noise_multiplier; noise std = σ · clip_norm C), > 0",
                 "--q q sampling rate q (field sample_rate)", "--trials N trials per hypothesis (field trials)",
                 "--mu-eff μ the canary's effective signal μ_eff", "capped at the ceiling 1/σ (Eq. 20)",
                 "--delta δ δ of the (ε, δ) guarantee (field delta)",
                 "γ = α / (4 · canaries) = 0.05 / (4 · 5) = 0.0025, the tail probability of each one-sided "
                 "Clopper–Pearson endpoint"):
        assert text in out, text
    assert main(["explore", "--sigma", "2", "--q", "0.1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "noise multiplier σ=2  sample rate q=0.1  trials=1,000,000 per hypothesis  δ=1e-05"
    assert lines[1].startswith("γ=0.0025  (tail probability of each one-sided Clopper–Pearson endpoint")
    assert lines[2] == "ε_theory            0.379"  # the explorer's σ = 2, q = 0.1 value (issue 14)


def test_results_command_and_readme_agree(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["results", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "Print RUN_DIR/results.md" in help_text and "it does not re-collect" in help_text
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    assert "`pe-kit results RUN_DIR` (prints a run's `results.md`" in readme
    (tmp_path / "results.md").write_text("# pe_kit reproduction results\n")
    assert main(["results", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "# pe_kit reproduction results\n\n"
    assert main(["results", str(tmp_path / "none")]) == 2


@pytest.mark.parametrize("argv, message", [
    (["reproduce", "--set", "bogus=1"], "bogus"),
    (["reproduce", "--set", "trials"], "key=value"),
    (["reproduce", "--preset", "paper"], "--data"),
    (["reproduce", "--data", "/no/such/file.jsonl"], "does not exist"),
    (["reproduce", "--set", "n_test=0"], "n_test"),
    (["reproduce", "--preset", "tiny", "--seed", "-1"], "seed=-1 is out of range"),
])
def test_reproduce_argument_errors(argv, message, capsys, tmp_path):
    assert main(argv + ["--results-dir", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_results_command(tmp_path, capsys):
    assert main(["results", str(tmp_path)]) == 2
    (tmp_path / "results.md").write_text("# table\n")
    assert main(["results", str(tmp_path)]) == 0 and "# table" in capsys.readouterr().out


def test_results_into_a_closed_pipe_ends_quietly(tmp_path):
    """`pe-kit results DIR | head`: the reader closing the pipe is not an error (no traceback, exit 0)."""
    (tmp_path / "results.md").write_text("row\n" * 200_000)
    out = subprocess.run(f"{sys.executable} -m pe_kit.run.cli results {tmp_path} | head -1", shell=True,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    assert out.stdout == "row\n" and "Traceback" not in out.stderr


def test_parse_override_types():
    assert parse_override("trials=100000") == ("trials", 100000)
    assert parse_override("variants=ordinary,nonce") == ("variants", ["ordinary", "nonce"])
    assert parse_override("max_seq_length=none") == ("max_seq_length", None)
    assert parse_override("sigmas=[0.5, 1]") == ("sigmas", [0.5, 1])
    assert parse_override("bank=public") == ("bank", "public")


def test_user_data_arms_and_run_id(tmp_path):
    yelp = tmp_path / "yelp_academic_dataset_review.json"
    yelp.write_text("")
    p = get_preset("quick", data=str(yelp))
    assert p.arms == ("long",) and p.banks == ("public",) and p.fmt == "auto"
    s140 = tmp_path / "training.1600000.processed.noemoticon.csv"
    s140.write_text("")
    p = get_preset("paper", data=str(s140), overrides={"n_test": 900, "n_calibration": 900})
    assert p.arms == ("short",) and p.n_test == 900 and default_run_id(p).startswith("paper-training-")
    assert default_run_id(PRESETS["quick"]) == "quick" and default_run_id(PRESETS["tiny"]) == "tiny"
    assert default_run_id(PRESETS["quick"], fitted=True) == "quick-fit"
    # two files with one stem get their own run folders (issue 14); the same file always the same one
    (tmp_path / "other").mkdir()
    twin = tmp_path / "other" / s140.name
    twin.write_text("")
    q1, q2 = get_preset("quick", data=str(s140)), get_preset("quick", data=str(twin))
    assert default_run_id(q1) != default_run_id(q2) and default_run_id(q1) == default_run_id(get_preset("quick", data=str(s140)))
    assert default_run_id(q1).split("-")[:2] == ["quick", "training"] and len(default_run_id(q1).split("-")[2]) == 6


def test_notebook_parameters():
    p = get_preset("tiny", data=str(TINY))
    params = notebook_params("04_audit", p, Path("/tmp/run"), 7)
    assert set(params) == set(NOTEBOOK_KEYS["04_audit"])
    assert params["seed"] == 7 and params["output_dir"] == "/tmp/run" and params["arms"] == ["long", "short"]
    # a notebook outside the table gets what it declares, plus the preset's extras for it
    extra = notebook_params("06_multiround_mauve", p, Path("/tmp/run"), 0,
                            declared=["output_dir", "seed", "n_test", "rounds", "unknown"])
    assert extra == {"output_dir": "/tmp/run", "seed": 0, "n_test": 20, "rounds": 3}
    r = resolve_params("04_audit", "tiny", output_dir="/tmp/pe_kit_resolve_test", n_aux=7)
    assert r["n_aux"] == 7 and r["n_test"] == 20 and r["preset"] == "tiny" and r["seed"] == 0


def test_console_script_module():
    out = subprocess.run([sys.executable, "-m", "pe_kit.run.cli", "presets"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "quick" in out.stdout


def test_readme_commands_and_example(capsys):
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "bash scripts/bootstrap.sh && .venv/bin/pe-kit reproduce --preset quick" in readme
    assert "bash scripts/bootstrap.sh && .venv/bin/python -m pytest -q -rs" in readme
    example = next(b for b in readme.split("```python\n")[1:] if "explorer_state" in b).split("```")[0]
    exec(compile(example, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "1.695 0.99"  # the value the README states


def test_set_single_value_for_a_list_setting_and_relative_bank_path(tmp_path, monkeypatch):
    from pe_kit.settings import parse_override

    assert parse_override("banks=public") == ("banks", ["public"])
    assert parse_override("arms=long") == ("arms", ["long"])
    assert parse_override("trials=1000") == ("trials", 1000)
    (tmp_path / "my_bank.jsonl").write_text('{"text": "a"}\n')
    monkeypatch.chdir(tmp_path)
    key, value = parse_override("banks=my_bank.jsonl,public")
    assert value == [str(tmp_path / "my_bank.jsonl"), "public"]
    assert parse_override("banks=file:my_bank.jsonl")[1] == ["file:" + str(tmp_path / "my_bank.jsonl")]


def test_this_python_kernel_runs_this_interpreter():
    import json
    import os
    import sys

    from jupyter_client.kernelspec import KernelSpecManager

    from pe_kit.run.reproduce import this_python_kernel

    name = this_python_kernel()
    spec = KernelSpecManager().get_kernel_spec(name)
    assert spec.argv[0] == sys.executable
    assert json.loads(json.dumps(spec.argv))[1:3] == ["-m", "ipykernel_launcher"]
    assert os.environ["JUPYTER_PATH"].split(os.pathsep)[0].endswith("jupyter")


def test_a_lighter_install_is_told_which_install_the_commands_need():
    """`pip install -e .` lacks pandas and papermill: `pe-kit presets` says so and names the main install (exit 2)
    instead of a ModuleNotFoundError traceback."""
    code = "import sys; sys.modules['pandas'] = None\nfrom pe_kit.run.cli import main\nsys.exit(main(['presets']))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == ("pe-kit presets: needs pandas, which this install lacks; the pe-kit commands need the "
                                "main install: bash scripts/bootstrap.sh (or pip install 'pe_kit[notebooks]')")
