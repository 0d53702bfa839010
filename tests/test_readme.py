"""The README as a guide (microsoft/prv_accountant style): every Python block runs as written from the repository
root and prints exactly its ``# →`` lines; its headline table is the one the committed CSVs give; it stays short
and puts usage before measured results."""
from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_every_python_block_states_what_it_prints():
    blocks = _python_blocks()
    assert len(blocks) >= 6  # scores, one run, mechanism, release, adapter + Dask, explorer
    for code in blocks:
        assert re.search(r"^# → ", code, re.M), f"a README block without its printed lines:\n{code[:200]}"


@pytest.mark.parametrize("index", range(len(_python_blocks())))
def test_readme_python_block_prints_what_it_states(index, monkeypatch):
    code = _python_blocks()[index]
    expected = [line[4:] for line in code.splitlines() if line.startswith("# → ")]
    monkeypatch.chdir(ROOT)  # the examples read tests/data/blogs-tiny.jsonl.gz from the repository root
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert out.getvalue().strip().splitlines() == expected


def test_readme_headline_is_generated_from_the_committed_runs():
    from docs_results import readme_with_headline

    text = README.read_text(encoding="utf-8")
    assert readme_with_headline(text, ROOT / "docs" / "paper_run") == text, "run `python scripts/docs_results.py`"


def test_readme_is_a_short_guide_with_usage_first():
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 360, f"README has {len(lines)} lines"
    heads = [l for l in lines if l.startswith("## ")]
    order = [h.split(" ", 1)[1] for h in heads]
    assert order.index("Install and the two commands") < order.index("Results: the kit beside the paper")
    assert order.index("Results: the kit beside the paper") < order.index("Audit your own PE")
    # the terms a reader meets first are defined before the first result
    first_result = text.index("## Results")
    for term in ("**μ_eff**", "**The attack ceiling**", "**The neighbouring relation**", "**Arm**", "**Bank**",
                 "**ε_lower**", "**ε_theory**"):
        assert 0 <= text.find(term) < first_result, term
    assert not re.search(r"\b[Ii]ssue \d+", text), "the README points at an issue tracker the reader cannot see"


def test_composed_sentence_says_which_cap_each_number_has():
    """The composed-mu_eff numbers come from cap-64 (long) and cap-256 (short) runs; the headline's long column is at
    cap 256, so the sentence must name the cap of each number it sets beside the table (docs/composed.md)."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert ("reaches a median μ_eff of 0.910 of the ceiling in a separate cap-64 run on the full corpus (long arm, bank A, "
            "500 aux users, N = 600; not the cap-256 `long` column above)") in text
    assert "at the `short` column's cap 256: μ_eff 0.905, ε_lower 0.802 against nonce's 0.923" in text
