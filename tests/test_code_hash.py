"""Step-cache keys cannot go stale (issue 32, item 1): ``pe_kit.code_hash.code_hash`` covers the whole package and,
given their folder, the notebooks' step modules (``notebooks/steps``).

The hash is computed in a fresh interpreter on a scratch copy of ``pe_kit`` and ``notebooks/steps`` (``PYTHONPATH``
pointing at the copy), so the test sees exactly what a rerun after an edit would see. Editing ``_rng`` (the seeds of
designs and trials) or ``canary_slots`` (which canary each variant audits) must change it; editing a display-only
module must not.
The display-only list is checked against the import graph: no other module may import one of its entries.
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pe_kit

PKG = Path(pe_kit.__file__).resolve().parent
STEPS = PKG.parent / "notebooks" / "steps"


def _scratch(tmp_path: Path) -> Path:
    root = tmp_path / "clone"
    shutil.copytree(PKG, root / "pe_kit", ignore=shutil.ignore_patterns("__pycache__", "data_files", "*.pyc"))
    shutil.copytree(STEPS, root / "steps", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


def _hash_in(root: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    code = "from pe_kit.code_hash import code_hash; print(code_hash('steps'))"
    out = subprocess.run([sys.executable, "-c", code],
                         env=env, cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not found once in {path}"
    path.write_text(text.replace(old, new))


def test_editing_a_seed_producing_function_changes_the_step_cache_key(tmp_path):
    root = _scratch(tmp_path)
    exp = root / "steps" / "designs.py"
    before = _hash_in(root)
    assert len(before) == 16 and int(before, 16) >= 0
    _edit(exp, "int(purpose), int(salt)])", "int(purpose) + 1, int(salt)])")  # _rng: other seeds, same "seed=0"
    after_rng = _hash_in(root)
    assert after_rng != before
    _edit(exp, "def canary_slots(variant: str, per_variant: int, n_canary: int) -> list[int]:\n",
          "def canary_slots(variant: str, per_variant: int, n_canary: int) -> list[int]:\n    per_variant = per_variant\n")
    assert _hash_in(root) not in (before, after_rng)


def test_editing_a_display_only_module_keeps_the_key(tmp_path):
    from pe_kit.code_hash import DISPLAY_ONLY

    root = _scratch(tmp_path)
    before = _hash_in(root)
    for rel in DISPLAY_ONLY:  # steps/…: the figures of the notebooks' steps folder
        with open(root / ("" if rel.startswith("steps/") else "pe_kit") / rel, "a") as fh:
            fh.write("\n# a display-only edit\n")
    assert _hash_in(root) == before
    with open(root / "pe_kit" / "run" / "__init__.py", "a") as fh:  # package __init__ files count too
        fh.write("\n# an edit\n")
    assert _hash_in(root) != before


def _imports(path: Path, module: str) -> set[str]:
    """Every pe_kit module ``path`` imports, at module level or inside a function (absolute and relative)."""
    out = set()
    pkg_parts = module.split(".")[:-1] if path.name != "__init__.py" else module.split(".")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg_parts[: len(pkg_parts) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in out if m.startswith(("pe_kit", "steps"))}


def test_display_only_modules_are_imported_by_no_module_the_numbers_come_from():
    from pe_kit.code_hash import DISPLAY_ONLY

    assert len(DISPLAY_ONLY) <= 6  # a short list
    display = {("" if rel.startswith("steps/") else "pe_kit.") + rel[:-3].replace("/", ".") for rel in DISPLAY_ONLY}
    for rel in DISPLAY_ONLY:
        where = STEPS.parent if rel.startswith("steps/") else PKG
        assert (where / rel).is_file(), f"DISPLAY_ONLY names {where.name}/{rel}, which does not exist"
    for path in sorted(PKG.rglob("*.py")) + sorted(STEPS.glob("*.py")):
        steps = path.parent == STEPS
        rel = f"steps/{path.name}" if steps else path.relative_to(PKG).as_posix()
        if rel in DISPLAY_ONLY:
            continue
        module = ("" if steps else "pe_kit.") + rel[:-3].replace("/", ".").removesuffix(".__init__")
        used = _imports(path, module) & display
        assert not used, (f"pe_kit/{rel} imports {sorted(used)}, listed in pe_kit.code_hash.DISPLAY_ONLY: the numbers "
                          "may depend on it, so remove it from that list")


def test_the_step_modules_key_their_steps_on_their_own_folder():
    """Every ``code_hash`` call of ``notebooks/steps`` passes the steps' folder, so a steps edit recomputes."""
    calls = [line for p in sorted(STEPS.glob("*.py")) for line in p.read_text().splitlines() if "code_hash(" in line]
    assert len(calls) == 2 and all("code_hash(Path(__file__).parent)" in line for line in calls)


@pytest.mark.parametrize("rel", ["study/world.py", "study/setup.py", "code_hash.py", "run/presets.py", "report/results.py", "progress.py"])
def test_modules_that_shape_numbers_are_not_excluded(rel):
    from pe_kit.code_hash import DISPLAY_ONLY

    assert rel not in DISPLAY_ONLY


def test_a_step_module_edited_in_a_live_kernel_changes_the_key(tmp_path):
    """The steps' files are read on every call (the package's too), so an edit in JupyterLab followed by
    a reload gets a new key, not the stale cached steps."""
    from pe_kit.code_hash import code_hash

    (tmp_path / "audits.py").write_text("x = 1\n")
    before = code_hash(tmp_path)
    (tmp_path / "audits.py").write_text("x = 2\n")
    assert code_hash(tmp_path) != before and code_hash(tmp_path) == code_hash(tmp_path)


def test_the_done_markers_cover_the_setup_call_every_notebook_makes():
    from pe_kit.run.markers import _RUNNER_ONLY

    assert "run/presets.py" not in _RUNNER_ONLY  # run.presets.notebook_setup runs inside every notebook
