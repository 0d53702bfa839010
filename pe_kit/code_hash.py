"""The step cache's code key: a SHA-256 of the package's code, less the modules that only drive runs or draw, so an
edit anywhere the numbers could come from recomputes the steps (``pe_kit.study.audits``, ``.ablations``).
"""
from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Sequence

__all__ = ["DISPLAY_ONLY", "package_code_hash", "code_hash"]

#: The only modules left out of :func:`code_hash`: they drive runs or draw, and no other module imports them
#: (tests/test_code_hash.py checks both against the import graph), so the numbers cannot depend on them.
DISPLAY_ONLY = ("run/cli.py", "run/reproduce.py", "report/widgets.py", "report/plots.py", "report/extension_plots.py")


def package_code_hash(pkg: str | Path | None = None, exclude: Sequence[str] = DISPLAY_ONLY) -> str:
    """SHA-256 (16 hex) of every ``.py`` file (relative path and bytes, sorted) of package folder ``pkg`` (default:
    pe_kit) except ``exclude``. Raises NotADirectoryError if ``pkg`` is not a folder."""
    pkg = Path(pkg).resolve() if pkg is not None else Path(__file__).resolve().parent
    if not pkg.is_dir():
        raise NotADirectoryError(f"pkg={str(pkg)!r} is not a folder; pass the pe_kit package folder")
    h = hashlib.sha256()
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg).as_posix()
        if rel not in exclude and "__pycache__" not in path.parts:
            h.update(rel.encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


@lru_cache(maxsize=1)
def code_hash() -> str:
    """SHA-256 (16 hex) of the pe_kit code but :data:`DISPLAY_ONLY` (:func:`package_code_hash`), once per process."""
    return package_code_hash()
