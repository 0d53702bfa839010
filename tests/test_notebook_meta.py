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


def test_notebooks_run_by_hand_write_to_the_repo_results_folder(tmp_path, monkeypatch):
    """A notebook run in Lab (kernel cwd notebooks/) writes to <repo>/results/interactive, the CLI's results/."""
    from pe_kit.run.presets import notebook_output_dir, resolve_params

    for p in sorted((ROOT / "notebooks").glob("*.ipynb")):
        params = next(c for c in json.loads(p.read_text())["cells"] if "parameters" in c["metadata"].get("tags", []))
        assert re.search(r"^output_dir = None\b", "".join(params["source"]), flags=re.M), p.name
    fake = tmp_path / "checkout"  # a checkout: pyproject.toml and pe_kit/__init__.py at its root
    (fake / "pe_kit").mkdir(parents=True)
    (fake / "pe_kit" / "__init__.py").write_text("")
    (fake / "pyproject.toml").write_text("")
    (fake / "notebooks").mkdir()
    monkeypatch.chdir(fake / "notebooks")
    want = fake.resolve() / "results" / "interactive"
    assert notebook_output_dir() == str(want) and want.is_dir()
    assert resolve_params("03_llr_checks", "tiny")["output_dir"] == str(want)
    assert not (fake / "notebooks" / "results").exists()
    assert notebook_output_dir(tmp_path / "mine") == str(tmp_path / "mine")  # an explicit folder is kept
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert notebook_output_dir(start=elsewhere) == str(elsewhere.resolve() / "results" / "interactive")
    assert (ROOT / "pyproject.toml").is_file() and (ROOT / "pe_kit" / "__init__.py").is_file()  # what it looks for


def test_bootstrap_lets_the_venv_lab_start_as_root(tmp_path, monkeypatch):
    """As root, bootstrap.sh sets ServerApp.allow_root in the venv's Jupyter config, keeping what is there."""
    import sys

    boot = (ROOT / "scripts" / "bootstrap.sh").read_text()
    block = re.search(r'if \[ "\$\(id -u\)" = "0" \]; then\n  python - <<\'PY\'\n(.*?)\nPY\nfi', boot, re.S)
    assert block, "bootstrap.sh lost its allow_root step"
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    cfg = tmp_path / "etc" / "jupyter" / "jupyter_server_config.json"
    exec(compile(block.group(1), "bootstrap.sh", "exec"), {})
    assert json.loads(cfg.read_text()) == {"ServerApp": {"allow_root": True}}
    cfg.write_text(json.dumps({"ServerApp": {"port": 9999}, "LabApp": {"x": 1}}))
    exec(compile(block.group(1), "bootstrap.sh", "exec"), {})
    assert json.loads(cfg.read_text()) == {"ServerApp": {"port": 9999, "allow_root": True}, "LabApp": {"x": 1}}
