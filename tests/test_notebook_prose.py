"""Notebooks explain the method; numbers a run measures appear only in their outputs. A markdown cell that
hard-codes a measured value ("gain +0.019, 95 % CI [+0.014, +0.025]") goes stale silently when the cells above
recompute it, so such values belong in the cells' outputs, docs/results.md (generated) or
docs/notebook_measurements.md."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

#: a decimal with ≥ 2 digits after the point, a signed decimal, or a "value ± spread"
MEASURED = re.compile(r"(?<![\w.])(?:[+−-]\d+\.\d+|\d+\.\d{2,})(?![\w.])|\d\s*±\s*\d")
#: numbers that are method constants, not measurements: α = τ = 0.05 (and its 95 % level's 0.95), the paper's
#: ε_theory = 1.695 at σ = 1, q = 0.1, δ = 10⁻⁵, the multi-round σ = 1.1088 (App. D), the tolerances 0.01 and 0.02
#: of notebook 08's published-value checks, an arXiv identifier
CONSTANTS = {"0.05", "0.95", "1.695", "1.1088", "0.01", "0.02", "2410.22235"}


def prose(cell: dict) -> str:
    """A markdown cell without its equations ($…$, $$…$$) and inline code (`…`), where numbers are the method's."""
    text = "".join(cell["source"])
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"\$[^$]*\$", " ", text)
    return re.sub(r"`[^`]*`", " ", text)


def measured_values(text: str) -> list[str]:
    return [m.group() for m in MEASURED.finditer(text) if m.group() not in CONSTANTS]


def test_the_check_catches_the_old_notebook_06_prose():
    old = ("**at the last round: gain +0.019, 95 %\nCI [+0.014, +0.025]** (DP 0.030, control 0.010); ε_lower frozen / "
           "adaptive 0.44 / 0.53; 7.27 ± 0.46")
    assert measured_values(old) == ["+0.019", "+0.014", "+0.025", "0.030", "0.010", "0.44", "0.53", "7.27", "0.46"]
    # parameters and equations are the method's: left alone
    cell = {"source": ["σ = 1.1088, α = 0.05, $\\varepsilon = 1.234$, `--set trials=0.125`, q = 0.1, 10⁶"]}
    assert measured_values(prose(cell)) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_markdown_holds_no_measured_numbers(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    hits = {i: measured_values(prose(c)) for i, c in enumerate(cells) if c["cell_type"] == "markdown"}
    hits = {i: v for i, v in hits.items() if v}
    assert not hits, (f"{path.name}: markdown cells {sorted(hits)} hold measured-looking numbers {hits}; print them "
                      "from a code cell, or move them to docs/notebook_measurements.md with their sizes")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebooks_are_committed_without_outputs(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in cells if c["cell_type"] == "code")
