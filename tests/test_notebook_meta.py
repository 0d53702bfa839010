"""Every notebook asks JupyterLab for the kernel that scripts/bootstrap.sh installs (issue 14)."""
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_notebooks_ask_for_the_bootstrap_kernel():
    boot = (ROOT / "scripts" / "bootstrap.sh").read_text()
    name = re.search(r"ipykernel install --sys-prefix --name (\S+)", boot).group(1)
    display = re.search(r'--display-name "([^"]+)"', boot).group(1)
    specs = {p.name: json.loads(p.read_text())["metadata"].get("kernelspec", {})
             for p in sorted((ROOT / "notebooks").glob("*.ipynb"))}
    assert len(specs) >= 8
    wrong = {k: v for k, v in specs.items() if (v.get("name"), v.get("display_name")) != (name, display)}
    assert not wrong, f"notebooks asking for another kernel than {name!r} ({display}): {wrong}"
