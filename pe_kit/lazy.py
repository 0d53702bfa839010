"""Lazy public names of a stage package (PEP 562): ``pe_kit.audit.epsilon_theory`` loads ``audit/accounting.py`` on
first access; ``import pe_kit.audit`` alone imports nothing.

Public names per module: its ``__all__`` literal, else its top-level public functions, classes and UPPER_CASE
constants, read with ``ast``. A name listed by several modules goes to the one defining it (first in file-name
order); a name that is also a submodule stays the submodule.
"""
from __future__ import annotations

import ast
import importlib
from functools import lru_cache
from pathlib import Path

__all__ = ["stage_exports", "lazy_package"]


def _defined(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(functions and classes, assigned names) at the top level of a module."""
    funcs: set[str] = set()
    assigned: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            funcs.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            assigned |= {t.id for t in targets if isinstance(t, ast.Name)}
    return funcs, assigned


def _listed(tree: ast.Module, funcs: set[str], assigned: set[str]) -> list[str]:
    """The module's ``__all__`` literal, else its public functions, classes and UPPER_CASE constants."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            try:
                return [str(n) for n in ast.literal_eval(node.value)]
            except ValueError:
                break
    return sorted(n for n in funcs | {a for a in assigned if a.isupper()} if not n.startswith("_"))


@lru_cache(maxsize=None)
def stage_exports(package: str, folder: str) -> dict[str, str]:
    """Public name → defining module (dotted) of ``package`` in ``folder``; SyntaxError for a bad module."""
    table: dict[str, str] = {}
    listed_by: dict[str, list[str]] = {}
    for path in sorted(Path(folder).glob("*.py")):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        funcs, assigned = _defined(tree)
        defined = funcs | assigned
        module = f"{package}.{path.stem}"
        for name in _listed(tree, funcs, assigned):
            listed_by.setdefault(name, []).append(module)
            if name in defined and name not in table:
                table[name] = module
    for name, modules in listed_by.items():  # listed only as re-exports: the first module that lists it
        table.setdefault(name, modules[0])
    submodules = {p.stem for p in Path(folder).glob("*.py")} | {p.name for p in Path(folder).iterdir()
                                                              if (p / "__init__.py").is_file()}
    return {name: module for name, module in table.items() if name not in submodules}


def lazy_package(package: str, init_file: str):
    """``(__getattr__, __dir__)`` of a stage's ``__init__``: public names and ``__all__`` load lazily."""
    folder = str(Path(init_file).parent)

    def __getattr__(name: str):
        if name == "__all__":
            return sorted(stage_exports(package, folder))
        module = stage_exports(package, folder).get(name)
        if module is None:  # also how ``from pkg import submodule`` falls back to importing the submodule
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        names = set(stage_exports(package, folder)) | {p.stem for p in Path(folder).glob("*.py")} - {"__init__"}
        return sorted(names)

    return __getattr__, __dir__
