"""Checks of a reproduction's settings run before any notebook: each refuses a setting a notebook would fail on
later (an undeclared ``<notebook>.<parameter>``, an unknown bank or model), naming the ``--set`` key,
the value and what is accepted.
"""
from __future__ import annotations

from pathlib import Path

from pe_kit.run.presets import NOTEBOOK_KEYS
from pe_kit.settings import RUNNER_KEYS, Preset, did_you_mean

__all__ = ["check_notebook_overrides", "unused_overrides", "check_banks", "check_bank_sizes", "check_models"]


def _declared(path: Path) -> list[str]:
    """Names assigned at the top level of the notebook's ``parameters`` cell (robust to any comments)."""
    import re

    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            return re.findall(r"^([A-Za-z_]\w*)\s*(?::[^=]+)?=(?!=)", cell.source, flags=re.M)
    return []


def _names(value) -> list[str]:
    """A setting that is one name or a list of names (``bank`` / ``banks``), as a list of str (None: empty)."""
    return [str(v) for v in ([value] if isinstance(value, str) else list(value or []))]


def _named(p: Preset, keys: tuple[str, str]) -> list[tuple[str, object]]:
    """(``--set`` key, value) of the common settings ``keys`` and of every notebook's own of the same names."""
    return [(k, getattr(p, k)) for k in keys] + [(f"{nb}.{k}", v) for nb, values in p.extra.items()
                                                  for k, v in values.items() if k in keys]


def _takes(src: Path) -> list[str]:
    """The parameters notebook ``src`` takes from the runner: its ``NOTEBOOK_KEYS`` entry (every declared name for
    a notebook outside the table) that its ``parameters`` cell declares, less the runner-owned ones."""
    declared = _declared(src)
    return [k for k in NOTEBOOK_KEYS.get(src.stem, declared) if k in declared and k not in RUNNER_KEYS]


def check_notebook_overrides(preset: Preset, folder: Path) -> None:
    """Raises ValueError for a ``<notebook>.<parameter>`` of ``preset.extra`` that the notebook in ``folder`` does not
    declare, listing those it does."""
    for nb, values in preset.extra.items():
        src = folder / f"{nb}.ipynb"
        if not src.is_file():
            continue
        takes = _takes(src)
        for k in values:
            if k not in takes:
                raise ValueError(f"--set {nb}.{k}=…: notebook {nb} has no parameter {k!r}{did_you_mean(k, takes)}; "
                                 f"its parameters are: {', '.join(sorted(takes))}")


def unused_overrides(overrides, notebooks, folder: Path) -> list[str]:
    """One warning per ``--set`` key (``overrides``; dotted keys skipped) that none of ``notebooks`` (``<name>.ipynb``
    in ``folder``) takes, naming the notebooks that would; ``data`` / ``fmt`` reach every notebook."""
    takers: dict[str, list[str]] = {}
    for src in sorted(folder.glob("*.ipynb")):
        for k in _takes(src):
            takers.setdefault(k, []).append(src.stem)
    out = []
    for key in (overrides or {}):
        if "." in key or key in ("data", "fmt"):
            continue
        users = takers.get(key, [])
        if not any(nb in users for nb in notebooks):
            where = (f"it is read by {', '.join(users)}" if users else "no notebook reads it")
            out.append(f"--set {key}=… has no effect on {', '.join(notebooks)}: {where}; add those notebooks "
                       "with --notebooks or drop the setting")
    return out


def check_banks(p: Preset) -> None:
    """Every bank ``p`` names (``bank``, ``banks``, a notebook's own) is a ``pe_kit.text.banks.make_bank`` kind or an
    existing JSON Lines file; raises ValueError naming the setting and value, listing the bank names."""
    from pe_kit.data.loaders import default_bank_b_path
    from pe_kit.text.banks import BANK_KINDS, bank_b_missing_message

    kinds = [k for k in BANK_KINDS if k != "file"]
    for key, value in _named(p, ("bank", "banks")):
        for name in _names(value):
            path = name[5:] if name.startswith("file:") else name
            if name == "bankB" and not default_bank_b_path().is_file():
                raise ValueError(f"{key} contains 'bankB': " + bank_b_missing_message().split(": ", 1)[1]
                                 + f" (--set {key}=…)")
            if name in kinds or Path(path).expanduser().is_file():
                continue
            what = "no such file" if name.startswith("file:") else "not a bank name and no such file"
            raise ValueError(f"{key} contains {name!r} ({what}): use bank names {', '.join(kinds)} or a JSON Lines "
                             f"file with a text field (file:<path> or a path)"
                             + did_you_mean(name, kinds) + f" (--set {key}=…)")


def check_bank_sizes(p: Preset) -> None:
    """A ``bankA`` bank (common or a notebook's own) cannot be larger than the bundled file: raises ValueError naming
    the ``--set`` key (``bank_size`` or ``<nb>.bank_size``), its value and bank A's distinct texts."""
    def uses_a(values) -> bool:
        return "bankA" in _names(values)

    checks = []
    if uses_a(p.bank) or uses_a(p.banks):
        checks.append(("bank_size", p.bank_size))
    for nb, values in p.extra.items():
        if "bank_size" in values:
            own = [values[k] for k in ("bank", "banks") if k in values]
            if (any(map(uses_a, own)) if own else uses_a(p.bank) or uses_a(p.banks)):
                checks.append((f"{nb}.bank_size", values["bank_size"]))
    if not checks:
        return
    from pe_kit.data.loaders import load_bank_texts

    available = len(load_bank_texts(None)[0])
    for key, size in checks:
        if int(size) > available:
            raise ValueError(f"{key}={size}: bank A (the bundled label-only bank) has {available:,} distinct texts; "
                             f"use --set {key}=… with at most {available} (the paper's p is 8192), or a larger "
                             "bank file (--set bank=PATH)")


def check_models(p: Preset) -> None:
    """Every encoder ``p`` names (``model``, ``encoders`` unless ``"auto"``, a notebook's own) loads offline
    (``pe_kit.text.models.check_model_offline``); raises ValueError listing the models the kit can load."""
    from pe_kit.text.models import check_model_offline

    for key, value in _named(p, ("model", "encoders")):
        if value != "auto":
            for name in _names(value):
                check_model_offline(name, key)
