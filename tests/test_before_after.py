"""scripts/before_after.py reproduces the committed before/after table of docs/threshold_rules.md from the
two committed quick runs (git history), and its per-variant statistics are the plain max/median/min/mean."""
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from before_after import before_after_markdown, per_variant, read_results

REPO = Path(__file__).resolve().parents[1]


def _rows():
    return pd.DataFrame({"notebook": ["04_audit"] * 4 + ["05_ablations"], "study_arm": ["long"] * 5,
                         "study_bank": ["bankA"] * 5, "variant": ["exact", "exact", "exact", "nonce", "exact"],
                         "epsilon_lower": [0.1, 0.3, 0.2, 0.9, 5.0], "calibration_epsilon": [0.2, 0.2, 0.5, 1.0, 5.0],
                         "calibration_rule": ["gaussian_model"] * 5})


def test_per_variant_statistics():
    t = per_variant(_rows()).set_index("variant")
    assert t.loc["exact", "max"] == 0.3 and t.loc["exact", "min"] == 0.1 and t.loc["exact", "median"] == 0.2
    assert t.loc["exact", "gap"] == pytest.approx(np.mean([0.1, -0.1, 0.3]))
    assert t.loc["exact", "canaries"] == 3 and t.loc["nonce", "canaries"] == 1   # notebook 05's row is not counted
    assert t.loc["nonce", "rule"] == "gaussian_model"


def test_bad_tables_named(tmp_path):
    _rows().drop(columns="calibration_epsilon").to_csv(tmp_path / "no_calibration.csv", index=False)
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['calibration_epsilon'\]"):
        read_results(tmp_path / "no_calibration.csv")
    with pytest.raises(ValueError, match="no 04_audit rows"):
        per_variant(_rows().assign(notebook="01_mechanism"))


def test_paper_column_names_the_paper_bank_beside_the_public_bank():
    """The paper has no public bank: beside a public row the paper's value is its bank B's, and the cell says so."""
    rows = pd.concat([_rows(), _rows().assign(study_bank="public")])
    md = before_after_markdown(rows, rows, paper=True)
    assert "| long | bankA | exact | 0.300 → 0.300 | 0.200 → 0.200 | 0.100 → 0.100 | +0.100 → +0.100 | 0.371 |" in md
    assert ("| long | public | exact | 0.300 → 0.300 | 0.200 → 0.200 | 0.100 → 0.100 | +0.100 → +0.100 "
            "| 0.304 (paper's bank B) |") in md


def test_reproduces_committed_quick_table():
    try:
        old = subprocess.run(["git", "show", "29a0750:docs/paper_run/quick/results.csv"], cwd=REPO, check=True,
                             capture_output=True, text=True).stdout
    except (subprocess.CalledProcessError, FileNotFoundError):
        pytest.skip("needs the git history (commit 29a0750, the quick run with the argmax rule)")
    md = before_after_markdown(read_results(old), read_results(REPO / "docs/paper_run/quick/results.csv"))
    doc = (REPO / "docs" / "threshold_rules.md").read_text()
    rows = [line for line in md.splitlines()[2:]]
    assert len(rows) == 32                  # 2 arms × 2 banks × 8 variants
    for line in rows:                       # every row of the generated table is a row of the committed one
        assert line in doc, line
    assert "| long | bankA | nonce | 0.724 → 0.733 | 0.563 → 0.600 | 0.263 → 0.584 | +0.287 → -0.009 |" in md
