"""environment.yml and pyproject.toml list the same dependencies; CI calls the README's test command."""
import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[<>=!\[ ;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = set(map(_name, project["dependencies"]))
    for extra in project["optional-dependencies"].values():
        deps |= set(map(_name, extra))
    env = (ROOT / "environment.yml").read_text().split("- pip:", 1)[1]
    pip = {_name(m) for m in re.findall(r"^\s+- (.+)$", env, flags=re.M) if not m.startswith("-e")}
    assert pip == deps


def test_ci_runs_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    cmd = "bash scripts/bootstrap.sh && .venv/bin/python -m pytest -q -rs"
    assert cmd in readme.splitlines() and cmd in ci.splitlines()
    assert "pip install -q \"torch==2.13.0\"" in (ROOT / "scripts" / "bootstrap.sh").read_text()


def test_dependencies_split_by_task_and_the_main_install_keeps_them_all():
    """Core is what scores-only auditing needs (numpy, scipy); `study` (audit_mechanism) and `accounting` (ε_theory)
    are subsets of `notebooks`, the main job's extra, so bootstrap.sh's `.[dev,notebooks,llm]` installs every
    dependency the kit lists, as it did when they were all core."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = {k: set(map(_name, v)) for k, v in project["optional-dependencies"].items()}
    assert set(map(_name, project["dependencies"])) == {"numpy", "scipy"}
    for task in ("study", "accounting", "dask"):
        assert extras[task] <= extras["notebooks"], task
    assert {"opacus", "torch", "onnxruntime", "sentence-transformers"} <= extras["study"]
    assert not extras["study"] & {"papermill", "jupyterlab", "dask", "ipykernel"}
    everything = set(map(_name, project["dependencies"])).union(*extras.values())
    main = set(map(_name, project["dependencies"])) | extras["notebooks"] | extras["llm"] | extras["dev"]
    assert main == everything
    assert '-e ".[dev,notebooks,llm]"' in (ROOT / "scripts" / "bootstrap.sh").read_text()
