"""One settings tree (issue 30): each setting declared once, addressed by path with --set, read by every notebook.

The fast tests check the declarations, the paths and the error wording. The ``notebooks``-marked test runs the
tiny reproduction at σ = 2, q = 0.05 through the CLI and checks every CSV row against the accountant.
"""
import ast
import json
import os
from dataclasses import fields
from pathlib import Path

import nbformat
from papermill.translators import PythonTranslator
import pandas as pd
import pytest

from pe_kit.audit.accounting import epsilon_theory
from pe_kit.study import setup
from pe_kit.run.presets import NOTEBOOK_KEYS, PRESETS, audited_mechanism, get_preset, notebook_params, resolve_params
from pe_kit.run.reproduce import preset_changes
from pe_kit.settings import (MECHANISM_KEYS, NOTEBOOK_SECTIONS, NOTEBOOKS, PARAM_TYPES, RUNNER_KEYS, SECTIONS, SHORT,
                             AuditSettings, MechanismConfig, MechanismSettings, Preset, Section, locate, parameters_cell,
                             parse_override)

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "blogs-tiny.jsonl.gz"


def _declaring_classes(name):
    """The settings classes whose own body declares field ``name`` (inherited fields not counted)."""
    out = set()
    for cls in _all_sections():
        own = cls.__dict__.get("__annotations__", {})
        if name in own and "spec" in cls.__dataclass_fields__[name].metadata:
            out.add(cls)
    return out


def _all_sections():
    seen, todo = [], list(Section.__subclasses__())
    while todo:
        c = todo.pop()
        if c not in seen:
            seen.append(c)
            todo += c.__subclasses__()
    return seen


def _field(cls, name):
    return next(f for f in fields(cls) if f.name == name)


def test_each_setting_is_declared_once_and_is_the_preset_field_the_cli_key_and_the_notebook_parameter():
    for name, (sec, fname) in SHORT.items():
        cls = SECTIONS.get(sec) or NOTEBOOK_SECTIONS[sec]
        f = _field(cls, fname)
        spec = f.metadata["spec"]
        assert len(_declaring_classes(name)) == 1 or name == "record_cap", name  # record_cap: one factory, 2 uses
        assert PARAM_TYPES[name] is spec  # the type --set, resolve_params and the presets check against
        assert locate(name)[:2] == (sec, fname)
        # the preset's default is the declaration's default
        default = f.default if not isinstance(f.default, tuple) else list(f.default)
        assert Preset("x").view()[name] == default
        # the notebooks that take it declare it in their parameters cell, on a line generated from the declaration
        for stem in NOTEBOOKS:
            if name in NOTEBOOK_KEYS[stem]:
                assert f"{name} = None  # {f.metadata['doc']}: {spec.describe()}" in parameters_cell(stem).split("\n")
    # a change of the declaration would reach all three: the CLI message quotes the declared range
    with pytest.raises(ValueError, match=r"mechanism.noise_multiplier=-1 is out of range: use a number ≥ 0"):
        parse_override("mechanism.noise_multiplier=-1")
    assert PARAM_TYPES["noise_multiplier"].describe() == "a number ≥ 0"


def test_every_notebook_parameters_cell_is_the_generated_one():
    for stem in NOTEBOOKS:
        nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
        cell = next(c for c in nb.cells if c.cell_type == "code")
        assert "parameters" in cell.metadata.get("tags", [])
        assert cell.source == parameters_cell(stem), f"{stem}: regenerate its parameters cell"
        # papermill reads every line of it (a comment holding '=' would make it skip the line)
        parsed = [prm.name for prm in PythonTranslator.inspect(cell)]
        assert parsed == list(NOTEBOOK_KEYS[stem]), stem
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert "P, mech, audit = notebook_setup(NB, globals())" in code, stem  # resolve_params on the cell's names
        assert "globals().items()" not in code, stem  # no hand-filtered globals()
        assert set(MechanismSettings.specs()) <= set(NOTEBOOK_KEYS[stem]), stem  # every notebook reads σ, q, k, C


def test_set_paths_and_short_names():
    assert parse_override("mechanism.noise_multiplier=0.8") == ("noise_multiplier", 0.8)
    assert parse_override("audit.delta=1e-6") == ("delta", 1e-6)
    assert parse_override("06.rounds=3") == ("06_multiround_mauve.rounds", 3)
    assert parse_override("study.n_test=600") == ("n_test", 600)
    # the flat keys of scripts/paper_run.sh, the README and the tests
    assert parse_override("arms=long") == ("arms", ["long"])
    assert parse_override("n_test=600") == ("n_test", 600)
    assert parse_override("max_seq_length=64") == ("max_seq_length", 64)
    assert parse_override("sweep_trials=1e4") == ("sweep_trials", 10_000)
    assert parse_override("06.bank_size=300") == ("06_multiround_mauve.bank_size", 300)
    # refused before the tree (issue 30): a notebook's own mechanism value
    assert parse_override("04.noise_multiplier=2") == ("04_audit.noise_multiplier", 2.0)
    assert get_preset("tiny", {"04_audit.noise_multiplier": 2.0}).view("04_audit")["noise_multiplier"] == 2.0
    p = get_preset("tiny", dict([parse_override("mechanism.noise_multiplier=0.8"), parse_override("audit.delta=1e-6"),
                                 parse_override("06.rounds=2")]))
    assert p.mechanism.noise_multiplier == 0.8 and p.audit.delta == 1e-6 and p.notebooks["06_multiround_mauve"].rounds == 2
    assert preset_changes(p) == {"noise_multiplier": 0.8, "delta": 1e-6, "06.rounds": 2,
                                 "06.noise_multiplier": "(as noise_multiplier)", "07.delta": "(as delta)"}


def test_mechanism_set_reaches_every_notebook_and_a_notebook_value_wins():
    base = PRESETS["tiny"]
    assert base.view("06_multiround_mauve")["noise_multiplier"] == 1.1088  # paper Fig. 2, notebook 06's own
    assert base.view("07_audit_an_implementation")["delta"] == 1e-3  # the black-box suite's own δ
    from steps.implementation_audit import SUITE_DELTA  # the base stage cannot import it: the same value

    assert base.view("07_audit_an_implementation")["delta"] == SUITE_DELTA
    p = get_preset("tiny", {"noise_multiplier": 2, "sample_rate": 0.05})
    for stem in NOTEBOOKS:
        params = notebook_params(stem, p, Path("/tmp/run"), 0, NOTEBOOK_KEYS[stem])
        mech = MechanismConfig.from_params(params)
        assert (mech.noise_multiplier, mech.sample_rate, mech.top_k, mech.clip_norm) == (2.0, 0.05, 5, 0.1), stem
    assert p.view("07_audit_an_implementation")["delta"] == 1e-3  # δ not set: 07 keeps its own
    q = get_preset("tiny", {"noise_multiplier": 2, "06_multiround_mauve.noise_multiplier": 3})
    assert q.view("06_multiround_mauve")["noise_multiplier"] == 3 and q.view("01_mechanism")["noise_multiplier"] == 2
    # a notebook's own sizes stay under a global size (06's p = 512 in quick)
    assert get_preset("quick", {"bank_size": 2048}).view("06_multiround_mauve")["bank_size"] == 512
    assert set(MECHANISM_KEYS) == {"top_k", "clip_norm", "noise_multiplier", "sample_rate", "delta", "alpha"}
    P = resolve_params("04_audit", p, output_dir="/tmp/pe_kit_settings_test")
    assert setup.audit_from(P, 2).delta == 1e-5 and MechanismConfig.from_params(P).noise_multiplier == 2.0


def test_results_md_line_names_the_mechanism_and_its_epsilon_theory():
    p = get_preset("tiny", {"noise_multiplier": 2, "sample_rate": 0.05})
    line = audited_mechanism(p)
    eps = epsilon_theory(2.0, 0.05, 1e-5)
    assert 0 < eps < 1.695  # more noise and a lower rate than the paper's σ = 1, q = 0.1
    assert line.startswith(f"σ (noise_multiplier)=2, q (sample_rate)=0.05, k (top_k)=5, C (clip_norm)=0.1, "
                           f"m (record_cap)=16, δ=1e-05, α=0.05: ε_theory={eps:.3f}")
    assert "add/remove of one user under Poisson sampling" in line and "notebook 07: delta=0.001" in line
    assert "notebook 06" not in line  # σ set for every notebook: 06's own 1.1088 is dropped


@pytest.mark.parametrize("arg, words", [
    ("mechanism.noise_multipler=2", ["mechanism section has no setting 'noise_multipler'",
                                      "did you mean 'noise_multiplier'?", "noise_multiplier (a number ≥ 0)",
                                      "sample_rate (a number in (0, 1])"]),
    ("mechanism.sample_rate=1.5", ["mechanism.sample_rate=1.5 is out of range: use a number in (0, 1]"]),
    ("mechanism.noise_multiplier=-2", ["mechanism.noise_multiplier=-2 is out of range: use a number ≥ 0"]),
    ("audit.delta=1", ["audit.delta=1 is out of range: use a number in [0, 1)"]),
    ("noise_multipler=2", ["unknown setting; did you mean 'noise_multiplier'?"]),
    ("06.noise_multiplier=true", ["06.noise_multiplier=True is not a number ≥ 0 (true/false is not a number)"]),
])
def test_cli_refuses_a_bad_mechanism_key_with_exit_2_naming_key_and_range(arg, words, tmp_path, capsys):
    from pe_kit.run.cli import main

    rc = main(["reproduce", "--preset", "tiny", "--results-dir", str(tmp_path / "r"), "--no-progress", "--set", arg])
    err = capsys.readouterr().err
    assert rc == 2 and all(w in err for w in words), err
    assert not (tmp_path / "r").exists()


def test_preset_values_are_checked_on_their_own_class():
    with pytest.raises(ValueError, match=r"sample_rate=0 is out of range: use a number in \(0, 1\]"):
        MechanismSettings(sample_rate=0)
    with pytest.raises(ValueError, match=r"delta=True is not a number in \[0, 1\) \(true/false is not a number\)"):
        AuditSettings(delta=True)
    with pytest.raises(ValueError, match=r"rounds=0 is out of range: use an integer ≥ 1"):
        Preset("x").with_values({"06.rounds": 0})
    with pytest.raises(ValueError, match="notebook 01_mechanism has no parameter 'rounds'"):
        Preset("x").with_values({"01.rounds": 2})
    assert set(RUNNER_KEYS) == {"output_dir", "preset", "seed"}


# ------------------------------------------------------------------------------------------ the tiny run at σ=2
#: experiments whose rows vary σ or q on purpose, or audit another paper's games (not the named mechanism)
_SIGMA_GRIDS = {"sigma_sweep", "llr_check", "one_run_published"}
_Q_GRIDS = {"q_sweep", "one_run", "multi_trial", "one_run_idealised", "one_run_published"}


@pytest.fixture(scope="module")
def tiny_sigma2(tmp_path_factory):
    from pe_kit.run.cli import main

    out = Path(os.environ.get("PE_KIT_SETTINGS_TEST_RUNS") or tmp_path_factory.mktemp("settings"))
    rc = main(["reproduce", "--preset", "tiny", "--results-dir", str(out), "--run-id", "sigma2", "--no-progress",
               "--set", "mechanism.noise_multiplier=2", "--set", "mechanism.sample_rate=0.05"])
    return rc, out / "sigma2"


@pytest.mark.notebooks
def test_tiny_reproduction_audits_the_mechanism_the_settings_name(tiny_sigma2):
    rc, run = tiny_sigma2
    assert rc == 0
    df = pd.read_csv(run / "results.csv")
    assert set(df["notebook"]) == set(NOTEBOOKS)
    # every row says which mechanism the settings named
    for col in ("param_noise_multiplier", "param_sample_rate", "param_delta", "param_top_k", "param_clip_norm"):
        assert df[col].notna().all(), col
    assert (df["param_noise_multiplier"] == 2.0).all() and (df["param_sample_rate"] == 0.05).all()
    assert (df["param_top_k"] == 5).all() and (df["param_clip_norm"] == 0.1).all()
    assert set(df.loc[df["notebook"] != "07_audit_an_implementation", "param_delta"]) == {1e-5}
    # and the rows audited it: σ = 2 and q = 0.05 wherever the experiment does not sweep that value
    exp = df["experiment"].fillna("")
    sig = df[df["mech_noise_multiplier"].notna() & ~exp.isin(_SIGMA_GRIDS)]
    assert len(sig) > 0 and (sig["mech_noise_multiplier"] == 2.0).all(), sig.groupby("experiment").size()
    q = df[df["mech_sample_rate"].notna() & ~exp.isin(_Q_GRIDS)]
    assert len(q) > 0 and (q["mech_sample_rate"] == 0.05).all(), q.groupby("experiment").size()
    assert {"01_mechanism", "02_probe_design", "04_audit", "06_multiround_mauve"} <= set(sig["notebook"])
    # ε_theory of every single-release audit at (2, 0.05) is the accountant's ε_theory(2, 0.05, δ)
    one = df[(df["epsilon_theory"].notna() & (df.get("mech_noise_multiplier") == 2.0) & (df["mech_sample_rate"] == 0.05)
              & ~exp.str.startswith("fig2_multiround"))]
    assert len(one) > 0 and {"04_audit", "05_ablations"} <= set(one["notebook"])
    for delta, rows in one.groupby("param_delta"):
        assert rows["epsilon_theory"].to_numpy() == pytest.approx(epsilon_theory(2.0, 0.05, float(delta)), rel=1e-9)
    t2 = df[exp == "table2"]
    assert len(t2) > 0 and t2["mu_eff_ceiling"].to_numpy() == pytest.approx(0.5)  # the attack ceiling 1/σ (Eq. 20)
    assert (t2["epsilon_lower"] <= t2["epsilon_theory"] + 1e-9).all()
    md = (run / "results.md").read_text()
    assert f"ε_theory={epsilon_theory(2.0, 0.05, 1e-5):.3f}" in md and "σ (noise_multiplier)=2" in md
    assert "noise_multiplier=2.0" in md and "sample_rate=0.05" in md  # listed as changed from the preset
    params = json.loads((run / ".done" / "06_multiround_mauve.json").read_text())["params"]
    assert params["noise_multiplier"] == 2.0 and params["sample_rate"] == 0.05


def test_a_changed_mechanism_gets_its_own_default_run_folder():
    """`--set mechanism.noise_multiplier=0.8` without --run-id must not resume into (and mix rows with) the preset's
    own folder: the default run id names every mechanism / audit setting that differs from the preset's."""
    from pe_kit.run.reproduce import default_run_id

    assert default_run_id(get_preset("quick", {})) == "quick"
    assert default_run_id(get_preset("tiny", {"noise_multiplier": 0.8, "sample_rate": 0.05})) == "tiny-sigma0.8-q0.05"
    assert default_run_id(get_preset("quick", {"delta": 1e-6, "threshold_rule": "argmax"}), fitted=True) == \
        "quick-delta1e-06-rule-argmax-fit"


# ------------------------------------------------------------------ each setting's type and range: one declaration
def _name(node):
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _range_guards(tree) -> set:
    """Declared names an ``if … raise`` compares with a number literal (``if not 0 < sample_rate <= 1: raise``)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and any(isinstance(b, ast.Raise) for b in node.body):
            for cmp in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                ops = [cmp.left, *cmp.comparators]
                if any(isinstance(o, ast.Constant) and type(o.value) in (int, float) for o in ops):
                    out |= {_name(o) for o in ops if _name(o) in PARAM_TYPES}
    return out


#: Guards outside pe_kit/settings/ that repeat or narrow a declared range (σ > 0 for ε_theory, top_k ≤ p …).
#: Each should become ``check_param`` or a cross-field rule; this list may only shrink.
KNOWN_GUARDS = {
    "attack/selection.py": {"top_k"},
    "attack/variants.py": {"bank_size", "pool_size"}, "audit/accounting.py": {"noise_multiplier"},
    "audit/battery.py": {"alpha"},
    "audit/blackbox.py": {"alpha", "delta", "noise_multiplier"},
    "audit/engine.py": {"delta", "trials"}, "audit/expectations.py": {"delta", "sample_rate", "trials"},
    "audit/moments.py": {"shrinkage"},
    "audit/one_run_bounds.py": {"delta"}, "audit/sweep.py": {"n_canaries"},
    "audit/threshold_grid.py": {"sample_rate"}, "audit/trials.py": {"sample_rate"}, "data/passes.py": {"record_cap"},
    "data/splits.py": {"n_canary"},
    "pe/mechanism.py": {"clip_norm", "top_k"}, "pe/multiround.py": {"retain_fraction", "rounds"},
    "study/pools.py": {"pool_size"}, "study/world.py": {"max_probes"}, "text/encoder.py": {"max_seq_length"},
    "text/variation.py": {"max_attempts"},
}


def test_each_setting_type_and_range_is_declared_in_one_place():
    """An AST scan of pe_kit/: ``ParamSpec`` / ``setting`` are built only in pe_kit/settings/sections.py (one_run_checks'
    ``repeats``, Monte-Carlo games ≥ 2, is another quantity under a declared name), and no new module re-checks a
    declared field's range with literals (the explorer, ``--set`` and the sections all call ``check_param``)."""
    pkg = ROOT / "pe_kit"
    specs, guards = [], {}
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg).as_posix()
        if rel == "settings/sections.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        specs += [(rel, n.lineno) for n in ast.walk(tree)
                  if isinstance(n, ast.Call) and _name(n.func) in ("ParamSpec", "setting", "record_cap_setting")]
        if _range_guards(tree):
            guards[rel] = _range_guards(tree)
    assert specs == [], specs
    assert guards == KNOWN_GUARDS, {k: guards.get(k, set()) ^ KNOWN_GUARDS.get(k, set())
                                    for k in set(guards) | set(KNOWN_GUARDS) if guards.get(k) != KNOWN_GUARDS.get(k)}
    from pe_kit.attack.variants import ALL_VARIANTS
    from pe_kit.settings.sections import VARIANT_NAMES

    assert VARIANT_NAMES == ALL_VARIANTS  # the names the variant fields accept are the attack's variants
    # the scan sees a guard: q's old explorer check
    assert _range_guards(ast.parse("if not 0 < sample_rate <= 1:\n    raise ValueError")) == {"sample_rate"}


def test_a_fractional_count_is_told_only_values_in_range():
    """trials=0.5 suggests 1, not 0 (out of range); 2.5 suggests 2 or 3."""
    from pe_kit.settings import check_param

    with pytest.raises(ValueError, match=r"^trials=0.5 is not an integer ≥ 1 \(no fractional part allowed: use 1\)$"):
        check_param("trials", 0.5)
    with pytest.raises(ValueError, match=r"\(no fractional part allowed: use 2 or 3\)$"):
        check_param("trials", 2.5)


def test_a_number_float64_cannot_carry_is_refused_at_the_check_naming_the_range():
    """σ = 1e300 passed the check and overflowed in the accountant (σ² > 1.8e308); an integer above 2**53 would lose
    its last digits in float64. Both are refused where the value enters, for a class and for ``--set``."""
    from pe_kit.settings import MechanismConfig, check_param

    sigma = (r"noise_multiplier=1e\+300 is out of range: use a number ≥ 0, at most 1e\+100 in magnitude \(larger "
             r"values overflow float64: σ² in the accountant, \(σC\)²‖w‖² in the trials\)$")
    with pytest.raises(ValueError, match="^" + sigma):
        MechanismConfig(noise_multiplier=1e300)
    with pytest.raises(ValueError, match=r"^--set noise_multiplier=1e300: " + sigma):
        parse_override("noise_multiplier=1e300")
    assert epsilon_theory(MechanismConfig(noise_multiplier=1e100).noise_multiplier, 0.1, 1e-5) < 0.01  # largest σ
    assert check_param("trials", 2**53) == 2**53
    too_big = (r"^trials=9007199254740993 is out of range: use an integer ≥ 1, at most 2\*\*53 = "
               r"9,007,199,254,740,992 \(larger integers are not exact in float64\)$")
    with pytest.raises(ValueError, match=too_big):
        check_param("trials", 2**53 + 1)


def test_numpy_values_are_taken_as_their_python_values():
    """A numpy scalar of the right kind is its Python value; a 1-D array is a list for a list setting; a 2-D array
    or an array for a single value is refused naming the field and what it takes."""
    import numpy as np

    from pe_kit.settings import MultiRound, check_param

    assert check_param("control", np.bool_(False)) is False
    assert type(check_param("noise_multiplier", np.float64(0.8))) is float
    assert type(check_param("trials", np.int64(1000))) is int and check_param("arm", np.str_("short")) == "short"
    assert check_param("sigmas", np.array([0.5, 1.0])) == [0.5, 1.0]
    assert MultiRound(pe_seeds=np.arange(3), control=np.bool_(True)).pe_seeds == (0, 1, 2)
    assert check_param("variants", np.array(["exact", "nonce"])) == ["exact", "nonce"]
    with pytest.raises(ValueError, match=r"^pe_seeds is a 2-D array of shape \(1, 2\): use a list of integers ≥ 0$"):
        check_param("pe_seeds", np.array([[0, 1]]))
    with pytest.raises(ValueError, match=r"^noise_multiplier=\[0.5\] is a list: use a number ≥ 0$"):
        check_param("noise_multiplier", np.array([0.5]))
    with pytest.raises(ValueError, match=r"^trials=True is not an integer ≥ 1 \(true/false is not a number\)"):
        check_param("trials", np.bool_(True))
