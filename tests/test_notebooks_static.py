"""The notebooks call the public names: the facade ``pe_kit``, the report modules they draw with, the one setup call of
``pe_kit.run.presets``, ``pe_kit.study.setup`` and their own step modules of ``notebooks/steps`` (``from steps import
…``); never a ``_``-prefixed name (code cells parsed with ``ast``, nothing executed). ``notebook_setup``: the parameters cell's names → checked params, mechanism, audit.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: what every notebook may import from pe_kit: module → the names it may take (None: any public name)
COMMON = {"pe_kit": None, "steps.plots": None, "pe_kit.report.results": None,
          "pe_kit.run.presets": {"notebook_setup"}}
#: each notebook's own step modules (and the pe_kit modules beyond the common ones it calls)
STEPS = {
    "01_mechanism": ("pe_kit.study.setup", "steps.checks"),
    "02_probe_design": ("pe_kit.study.setup", "steps.designs"),
    "03_llr_checks": ("pe_kit.study.setup", "steps.designs", "steps.checks"),
    "04_audit": ("pe_kit.study.setup", "steps.audits", "pe_kit.report.paper_compare"),
    "05_ablations": ("pe_kit.study.setup", "steps.ablations", "pe_kit.report.widgets"),
    "06_multiround_mauve": ("steps.multiround_setup", "steps.multiround_study", "steps.extension_plots"),
    "07_audit_an_implementation": ("steps.implementation_audit", "steps.extension_plots"),
    "08_one_run_audit": ("pe_kit.study.setup", "steps.one_run", "steps.extension_plots"),
}
#: the packages whose imports the check follows: the kit and the notebooks' own step modules
ROOTS = ("pe_kit", "steps")


def pe_kit_uses(source: str) -> tuple[dict[str, str], set[tuple[str, str]]]:
    """(alias → pe_kit or steps module bound in ``source``, {(module, name)} taken from a module by import or
    attribute)."""
    aliases: dict[str, str] = {}
    used: set[tuple[str, str]] = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in ROOTS:
                    aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ROOTS:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                try:
                    importlib.import_module(sub)
                    aliases[a.asname or a.name] = sub
                except ModuleNotFoundError:
                    used.add((node.module, a.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            used.add((aliases[node.value.id], node.attr))
    return aliases, used


def violations(stem: str, source: str) -> list[str]:
    allowed = {**COMMON, **{m: None for m in STEPS[stem]}}
    aliases, used = pe_kit_uses(source)
    bad = [f"imports {m}" for m in sorted(set(aliases.values()) | {m for m, _ in used}) if m not in allowed]
    for module, name in sorted(used):
        if module not in allowed:
            continue
        mod = importlib.import_module(module)
        public = allowed[module] or set(getattr(mod, "__all__", None) or (n for n in vars(mod) if n[0] != "_"))
        if name.startswith("_") or name not in public:
            bad.append(f"{module}.{name} is not public")
    return bad


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_import_only_public_names_and_their_own_steps(path):
    assert path.stem in STEPS, f"{path.stem}: declare its step modules in STEPS"
    code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    assert violations(path.stem, code) == [], path.stem


def test_the_check_sees_private_names_foreign_modules_and_other_notebooks_steps():
    src = ("import pe_kit as pk\nfrom steps import designs, audits\n"
           "from pe_kit.audit.trials import scalar_problem\nfrom pe_kit.run.presets import resolve_params\n"
           "designs._rng(0, 'nonce', 0, 1)\npk.audit_mechanism\npk._EXPORTS")
    assert violations("02_probe_design", src) == [
        "imports pe_kit.audit.trials", "imports steps.audits", "pe_kit._EXPORTS is not public",
        "pe_kit.run.presets.resolve_params is not public", "steps.designs._rng is not public"]


def test_notebook_setup_checks_the_cell_once_and_builds_both_settings(tmp_path):
    from pe_kit.run.presets import notebook_setup

    cell = {"preset": "tiny", "output_dir": str(tmp_path), "noise_multiplier": 0.8, "sample_rate": None}
    params, mech, audit = notebook_setup("04_audit", cell)
    assert params["noise_multiplier"] == mech.noise_multiplier == 0.8 and mech.sample_rate == params["sample_rate"]
    assert audit.n_canaries == params["per_variant"] and audit.trials == params["trials"]
    assert audit.gamma == pytest.approx(params["alpha"] / (4 * params["per_variant"]))  # App. E.6
    assert notebook_setup("06_multiround_mauve", cell)[2].n_canaries == 1  # one canary, no per_variant
    assert notebook_setup("04_audit", cell, n_canaries=2)[2].n_canaries == 2
    with pytest.raises(ValueError, match=r"noise_multiplier=-1.*≥ 0"):
        notebook_setup("04_audit", {**cell, "noise_multiplier": -1})
    # a typed value is checked once, by its config, and params holds the config's normalised value
    params, mech, audit = notebook_setup("04_audit", {**cell, "noise_multiplier": 2, "trials": 2e4})
    assert type(params["noise_multiplier"]) is float and params["noise_multiplier"] == mech.noise_multiplier == 2.0
    assert type(params["trials"]) is int and params["trials"] == audit.trials == 20_000
    from pe_kit.run.presets import PRESETS, get_preset

    assert get_preset("tiny") is PRESETS["tiny"]  # the cell's preset is looked up, not built again
