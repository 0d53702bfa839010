"""The README's black-box audit example runs as written and prints what it says (microsoft/prv_accountant style)."""
import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _block(after: str) -> str:
    text = README.read_text()
    start = text.index(after)
    m = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert m, f"no python block after {after!r}"
    return m.group(1)


def test_readme_blackbox_example_runs():
    """The correct histogram passes the battery, the off-by-one copy is flagged, with the lines the README prints."""
    code = _block("## Audit a PE implementation (black box)")
    expected = "\n".join(m.group(1) for m in re.finditer(r"^# (.+)$", code, re.M))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert out.getvalue().strip() == expected.strip()
    assert expected.startswith("my_dp_histogram False -") and "buggy_dp_histogram True" in expected


def test_readme_one_run_example_prints_what_it_states():
    """The one-run Python example: both bounds on the idealised game, the numbers the README prints."""
    code = _block("**One-run audits from Python.**")
    expected = "\n".join(line[2:] for line in code.splitlines() if line.startswith("# ") and " " in line[2:]
                         and line[2:].split()[0] in ("steinke", "fdp"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert out.getvalue().strip() == expected.strip()
    assert expected.startswith("steinke 1.57") and "fdp 2.05" in expected


def test_readme_python_api_example_prints_what_it_states(monkeypatch):
    """"Audit your own PE from Python": audit_scores, audit_one_run and audit_mechanism print the stated values."""
    code = _block("## Audit your own PE from Python")
    expected = [line[4:] for line in code.splitlines() if line.startswith("# → ")]
    assert len(expected) == 3 and expected[2].startswith("mechanism: epsilon_lower=")
    monkeypatch.chdir(README.parent)  # the example reads tests/data/blogs-tiny.jsonl.gz from the repository root
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert out.getvalue().strip().splitlines() == expected
