"""What a result depends on besides its inputs: digests of the code that computes it (the package, less what only
drives runs or draws, and the notebooks' step modules) and the versions of the packages that shape the numbers.
"""
from __future__ import annotations

import platform
from importlib import metadata
from pathlib import Path

from pe_kit.cache import content_hash, source_digest

__all__ = ["DISPLAY_ONLY", "code_hash", "versions"]

#: The only modules left out of :func:`code_hash`: they drive runs or draw, and no other module imports them
#: (tests/test_code_hash.py checks both against the import graph), so the numbers cannot depend on them.
#: ``steps/…``: a file of the notebooks' steps folder (the figures).
DISPLAY_ONLY = ("run/cli.py", "run/reproduce.py", "report/widgets.py", "steps/plots.py", "steps/extension_plots.py")


def code_hash(*folders: str | Path, exclude=DISPLAY_ONLY) -> str:
    """SHA-256 (16 hex) of every ``.py`` file of pe_kit and directly in each of ``folders`` (the notebooks' steps),
    but ``exclude`` (``<folder name>/<file>`` for the latter); read on every call, so an edit counts."""
    pkg = Path(__file__).resolve().parent
    rels = (p.relative_to(pkg).as_posix() for p in sorted(pkg.rglob("*.py")) if "__pycache__" not in p.parts)
    files = [p for folder in folders for p in sorted(Path(folder).resolve().glob("*.py"))
             if f"{p.parent.name}/{p.name}" not in exclude]
    return content_hash(source_digest(*(rel for rel in rels if rel not in exclude)),
                        *(part for p in files for part in (p.name, p.read_bytes())))[:16]


def versions() -> dict:
    """Versions of Python and the packages that shape the numbers (for every result row)."""
    out = {"python": platform.python_version()}
    for pkg in ("pe_kit", "numpy", "scipy", "opacus", "sentence-transformers", "torch"):
        try:
            out[f"version_{pkg}"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[f"version_{pkg}"] = None
    return out
