"""What a result depends on besides its inputs: the step cache's code key (the package's code less the modules that
only drive runs or draw, and the notebooks' step modules: an edit anywhere the numbers could come from recomputes
the steps) and the versions of the packages that shape the numbers (every result row).
"""
from __future__ import annotations

import platform
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from pe_kit.cache import content_hash, source_digest

__all__ = ["DISPLAY_ONLY", "code_hash", "versions"]

#: The only modules left out of :func:`code_hash`: they drive runs or draw, and no other module imports them
#: (tests/test_code_hash.py checks both against the import graph), so the numbers cannot depend on them.
DISPLAY_ONLY = ("run/cli.py", "run/reproduce.py", "report/widgets.py", "report/plots.py", "report/extension_plots.py")


@lru_cache(maxsize=1)
def _package_digest() -> str:
    pkg = Path(__file__).resolve().parent
    rels = (p.relative_to(pkg).as_posix() for p in sorted(pkg.rglob("*.py")) if "__pycache__" not in p.parts)
    return source_digest(*(rel for rel in rels if rel not in DISPLAY_ONLY))


def code_hash(*folders: str | Path) -> str:
    """SHA-256 (16 hex) of every ``.py`` file of pe_kit but :data:`DISPLAY_ONLY` (read once per process) and of those
    directly in each of ``folders`` (the notebooks' steps pass theirs; read on every call, so edits count)."""
    if not folders:
        return _package_digest()
    files = [p for folder in folders for p in sorted(Path(folder).glob("*.py"))]
    return content_hash(_package_digest(), *(part for p in files for part in (p.name, p.read_bytes())))[:16]


def versions() -> dict:
    """Versions of Python and the packages that shape the numbers (for every result row)."""
    out = {"python": platform.python_version()}
    for pkg in ("pe_kit", "numpy", "scipy", "opacus", "sentence-transformers", "torch"):
        try:
            out[f"version_{pkg}"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[f"version_{pkg}"] = None
    return out
