"""The package layout: stages import only downwards, no import cycles, modules and functions stay small.

The stages follow the flow of one audit (docs/architecture.md): base (settings, cache) → data → text →
pe → audit → attack → report → study → run. A module may import its own stage or any lower one — lazy
imports inside functions count — and the module graph has no cycle. ``pe_kit/__init__.py`` is the facade, above
every stage: it re-exports the public calls lazily (PEP 562) and no module of the package imports it.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "pe_kit"
STAGES = ("base", "data", "text", "pe", "audit", "attack", "report", "study", "run", "facade")
MAX_LINES = 450
MAX_FUNCTION_LINES = 80
#: pe_kit/'s measured weight in lines (all modules); lower it when the package gets lighter
PACKAGE_LINES = 14_789
#: the core's measured weight: the modules audit_scores, epsilon_theory and audit_mechanism on every variant import
#: (scripts/core_lines.py, cold); lower it when the core gets lighter (the issue's bound is 9,000)
CORE_LINES = 7_392


def module_name(path: Path) -> str:
    parts = ("pe_kit",) + path.relative_to(PKG).with_suffix("").parts
    return ".".join(parts[:-1]) if parts[-1] == "__init__" else ".".join(parts)


def stage_of(module: str) -> str:
    if module == "pe_kit":
        return "facade"  # pe_kit/__init__.py: the public names, re-exported lazily from the stages
    parts = module.split(".")
    if parts[1] != "settings" and (len(parts) >= 3 or (len(parts) == 2 and (PKG / parts[1]).is_dir())):
        return parts[1]
    return "base"  # the pe_kit.settings package and its modules, pe_kit.cache, pe_kit.progress


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """Every pe_kit module that ``module`` imports, at any depth of its code (absolute and relative)."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            names = [stem] + [f"{stem}.{a.name}" for a in node.names]
        for n in names:
            # the longest known module that n names (pe_kit.audit.moments.mu_eff → pe_kit.audit.moments)
            while n and n not in known:
                n = n.rpartition(".")[0]
            if n.startswith("pe_kit") and n != module:
                out.add(n)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {m: imports_of(m, p, known) for m, p in mods.items()}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among non-package modules (package __init__ re-exports are not edges back)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(u: str) -> list[str] | None:
        state[u] = 1
        stack.append(u)
        for v in sorted(g.get(u, ())):
            if v not in g or modules_is_package(v):
                continue
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if not state.get(v):
                c = dfs(v)
                if c:
                    return c
        stack.pop()
        state[u] = 2
        return None

    for m in sorted(g):
        if not state.get(m) and not modules_is_package(m):
            c = dfs(m)
            if c:
                return c
    return None


def modules_is_package(m: str) -> bool:
    return (PKG.joinpath(*m.split(".")[1:]) / "__init__.py").is_file() if m != "pe_kit" else True


def test_every_module_belongs_to_a_known_stage():
    bad = {m: stage_of(m) for m in modules() if stage_of(m) not in STAGES}
    assert not bad, f"modules outside the stages {STAGES}: {bad}"


def test_lower_stages_never_import_higher_ones():
    rank = {s: i for i, s in enumerate(STAGES)}
    bad = [(m, d) for m, deps in graph().items() for d in deps if rank[stage_of(d)] > rank[stage_of(m)]]
    assert not bad, "upward imports (lower stage → higher stage): " + "; ".join(f"{a} → {b}" for a, b in bad)


def test_no_import_cycles():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " → ".join(cycle)


def test_checker_sees_cycles_and_upward_imports():
    """The checker itself: a planted cycle and a planted upward edge are found."""
    g = {"pe_kit.audit.a": {"pe_kit.audit.b"}, "pe_kit.audit.b": {"pe_kit.audit.a"}}
    assert find_cycle(g) == ["pe_kit.audit.a", "pe_kit.audit.b", "pe_kit.audit.a"]
    assert stage_of("pe_kit.run.cli") == "run" and stage_of("pe_kit.settings") == "base"
    assert stage_of("pe_kit.settings.tree") == "base"
    assert stage_of("pe_kit.audit") == "audit" and stage_of("pe_kit") == "facade"


def test_the_facade_exports_every_public_name_from_the_stage_that_declares_it():
    """pe_kit.__all__ resolves lazily; each name comes from a stage module that lists it in its own __all__; the
    facade's table names only modules of the stages (no name is defined in the facade itself)."""
    import importlib

    import pe_kit

    for name, module in pe_kit._EXPORTS.items():
        mod = importlib.import_module(module)
        assert name in mod.__all__, f"{module}.__all__ lacks {name}"
        assert getattr(pe_kit, name) is getattr(mod, name)
        assert stage_of(module) in STAGES[:-1]
    assert set(pe_kit.__all__) == set(pe_kit._EXPORTS) | {"__version__"}
    with pytest.raises(AttributeError, match="public names"):
        pe_kit.audit_everything  # noqa: B018


def test_lazy_imports_are_seen():
    g = graph()
    # run.markers imports data.loaders inside a function body
    assert "pe_kit.data.loaders" in g["pe_kit.run.markers"]


def test_the_package_never_imports_the_notebooks_step_modules():
    """``notebooks/steps`` (the notebooks' own step modules) build on pe_kit, never the other way round."""
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            assert not [n for n in names if n.split(".")[0] == "steps"], f"{path.relative_to(PKG)} imports steps"


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.end_lineno - node.lineno + 1


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: p.relative_to(PKG).as_posix())
def test_modules_and_functions_stay_small(path):
    """A module is one concept read in one sitting (≤ MAX_LINES), a function one step (≤ MAX_FUNCTION_LINES),
    docstrings included (docs/architecture.md, "Target layout")."""
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(PKG)}: {n} lines > {MAX_LINES}: split it by concept"
    long = {name: k for name, k in _functions(path) if k > MAX_FUNCTION_LINES}
    assert not long, f"{path.relative_to(PKG)}: functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_the_package_only_gets_lighter():
    """pe_kit/ may not grow past its measured weight: delete before adding (the target is 14k lines, the core 9k)."""
    total = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in PKG.rglob("*.py"))
    assert total <= PACKAGE_LINES, f"pe_kit/ is {total} lines > {PACKAGE_LINES}: delete before adding"


@pytest.mark.slow
def test_the_core_only_gets_lighter():
    """What ``pip install pe_kit[study]`` runs (``audit_scores``, ``epsilon_theory``, ``audit_mechanism`` on every
    variant, cold) imports at most CORE_LINES lines of pe_kit; an optional part (black-box, one-run, multi-round, a
    generator backend, the runner) loads only when called."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "scripts/core_lines.py", "--total"], cwd=PKG.parent, env=env,
                         capture_output=True, text=True, check=True).stdout
    core = int(out.split()[-1])
    assert 5_000 < core <= CORE_LINES, f"the core imports {core} lines of pe_kit > {CORE_LINES}: load it lazily"


def test_size_checks_see_long_functions(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def long():\n" + "    x = 1\n" * MAX_FUNCTION_LINES + "\n\ndef short():\n    return 1\n")
    assert dict(_functions(f)) == {"long": MAX_FUNCTION_LINES + 1, "short": 2}


def test_architecture_map_names_real_functions_and_every_equation():
    """docs/architecture.md: every `stage.module.name` it cites exists; Eqs. 1–36 and both algorithms are mapped."""
    import importlib
    import re

    doc = (PKG.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    cited = set(re.findall(r"`((?:data|text|pe|audit|attack|report|study|run|steps)\.[a-z_]+(?:\.[A-Za-z_]+)+)`", doc))
    assert len(cited) > 40
    missing = []
    for ref in sorted(cited):
        parts = ref.split(".")
        for cut in range(len(parts), 1, -1):
            try:  # steps.x.f: the notebooks' step modules (notebooks/steps, on sys.path by conftest.py)
                obj = importlib.import_module(("" if parts[0] == "steps" else "pe_kit.") + ".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                missing.append(ref)
            break
        else:
            missing.append(ref)
    assert not missing, f"architecture.md cites names that do not exist: {missing}"
    covered = set()
    for a, b in re.findall(r"Eqs?\. (\d+)(?:–(\d+))?", doc):
        covered |= set(range(int(a), int(b or a) + 1))
    assert set(range(1, 37)) <= covered, f"equations not mapped: {sorted(set(range(1, 37)) - covered)}"
    assert "Algorithm A.1" in doc and "Algorithm B.1" in doc


def test_importing_a_stage_imports_none_of_its_modules():
    """A stage package is its docstring: ``import pe_kit.audit`` loads no module of the stage (the public names are the
    facade's, pe_kit/__init__.py; everything else is imported from its module)."""
    import subprocess
    import sys

    code = "import sys, pe_kit.audit, pe_kit.study; print(sorted(m for m in sys.modules if m.startswith('pe_kit')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['pe_kit', 'pe_kit.audit', 'pe_kit.study']"


#: project history that belongs in docs/ and the git log, not in the package: issue numbers, dates, load figures
HISTORY = re.compile(r"(?i:\bissue \d+)|\b\d{1,2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* 20\d\d\b"
                     r"|\b20\d\d-\d\d-\d\d\b|(?i:load average)[\s:=]*(?:of\s+)?\d")


def history_lines(text: str) -> list[int]:
    return [i for i, line in enumerate(text.splitlines(), 1) if HISTORY.search(line)]


def test_package_text_carries_no_project_history():
    """Docstrings and comments say what the code does; issue numbers, dates and load figures go to docs/."""
    bad = [f"{p.relative_to(PKG.parent).as_posix()}:{i}" for p in sorted(PKG.rglob("*.py"))
           for i in history_lines(p.read_text(encoding="utf-8"))]
    assert not bad, "project history in pe_kit/ (move it to docs/ or the git log): " + ", ".join(bad)


def test_history_check_sees_history_and_spares_citations():
    planted = ["(Issue 33)", "511 s at load average 13, 4 Dec 2026", "run of 2026-12-04", "on 3 December 2026"]
    assert history_lines("\n".join(planted)) == [1, 2, 3, 4]
    kept = ["Steinke et al. 2023, Thm 3.1", "ICML 2025", "the 1-minute load average (other processes)", "2,048 rows"]
    assert history_lines("\n".join(kept)) == []
