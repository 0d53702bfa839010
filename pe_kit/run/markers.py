"""Names and keys of ``pe-kit reproduce``'s files. The run folder ``results/<run-id>/`` (:func:`default_run_id`) is
stable for the same preset, data file and settings (a rerun resumes) and differs whenever the rows would describe
another mechanism. A done-marker ``<run>/.done/<notebook>.json`` records a finished notebook's key
(:func:`marker_key`) and the sizes of its outputs (:func:`outputs_of`); :func:`marker_valid` says whether it can
stand in for rerunning the notebook.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from pe_kit.cache import atomic_write_bytes, content_hash
from pe_kit.code_hash import code_hash
from pe_kit.run.presets import PRESETS
from pe_kit.settings import Preset

__all__ = ["code_fingerprint", "outputs_of", "input_digests", "marker_key", "marker_valid", "write_file",
           "default_run_id", "bundled_data"]


def write_file(path: Path, data: bytes) -> None:
    """Atomic write, then the usual read permissions (the temp file starts private)."""
    atomic_write_bytes(path, data)
    os.chmod(path, 0o644)


_RUNNER_ONLY = ("run/cli.py", "run/reproduce.py", "run/execute.py", "run/markers.py", "run/preflight.py")


def code_fingerprint(*folders: Path) -> str:
    """Hash of the pe_kit modules a notebook's outputs can depend on (all but the runner and the CLI) and of the
    ``.py`` files directly in each of ``folders`` (the notebooks' ``steps``), read on every call."""
    return code_hash(*folders, exclude=_RUNNER_ONLY)


def outputs_of(run_dir: Path, nb: str) -> dict:
    """The files notebook ``nb`` wrote into ``run_dir`` (its CSV, its figures), relative path → size in bytes."""
    files = [run_dir / f"{nb}.csv"] + sorted((run_dir / "figures").glob(f"{nb}_*"))
    return {str(f.relative_to(run_dir)): f.stat().st_size for f in files if f.is_file()}


def input_digests(params: Mapping[str, Any]) -> dict:
    """Digests (``"<param>"`` or ``"<param>[i]"`` → str) by content of every file and model a notebook's parameters
    name (data, banks, encoders, SmolLM2, any existing file) and of the shipped ``paraphrase_pools``."""
    from pe_kit.cache import file_digest
    from pe_kit.data.loaders import default_bank_path, default_data_path
    from pe_kit.text.encoder import model_fingerprint
    from pe_kit.text.generators.paraphrase_pools import shipped_pools_digest
    from pe_kit.text.models import available_encoders

    out: dict[str, str] = {}
    out["data"] = file_digest(params.get("data") or default_data_path())
    out["paraphrase_pools"] = shipped_pools_digest()  # paraphrase designs may take a shipped SmolLM2 pool
    for key, value in params.items():
        listed = isinstance(value, (list, tuple))
        for i, v in enumerate(value if listed else [value]):
            name = f"{key}[{i}]" if listed else key
            if not isinstance(v, str) or key == "output_dir":
                continue
            if key in ("bank", "banks") and v == "bankA":
                out[name] = file_digest(default_bank_path())
            elif key in ("model", "encoders"):
                for j, m in enumerate(available_encoders() if v == "auto" else [v]):
                    out[f"{name}:{j}"] = model_fingerprint(m)
            elif key == "generator" and v == "smollm2":
                try:
                    from pe_kit.text.generators.local_lm import smollm2_gguf_path

                    out[name] = model_fingerprint(smollm2_gguf_path())
                except Exception as exc:  # not installed: the notebook will say so itself
                    out[name] = f"unavailable: {type(exc).__name__}"
            else:
                path = v[5:] if v.startswith("file:") else v
                if len(path) < 4096 and os.path.isfile(path):
                    out[name] = file_digest(path)
    return out


def marker_key(src: Path, params: Mapping[str, Any], fingerprint: str) -> str:
    """Done-marker key of one notebook: its file's bytes, its parameters, :func:`input_digests` of the
    files and models they name, and the code's ``fingerprint`` (:func:`code_fingerprint`). 64 hex chars."""
    return content_hash(Path(src).read_bytes(), json.dumps(params, sort_keys=True, default=str),
                        json.dumps(input_digests(params), sort_keys=True), fingerprint)


def marker_valid(marker: Path, key: str, run_dir: Path) -> bool:
    """Whether done-marker ``marker`` has ``key`` and every output it lists (its CSV among them) is in ``run_dir``
    with the recorded non-zero size."""
    try:
        info = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    outs = info.get("outputs") or {}
    return info.get("key") == key and f"{marker.stem}.csv" in outs and all(
        (run_dir / rel).is_file() and (run_dir / rel).stat().st_size == size and size > 0 for rel, size in outs.items())


#: how a run id names a mechanism or audit setting that differs from its preset's (``quick-sigma0.8-q0.05``)
_RUN_ID_KEYS = (("mechanism", "noise_multiplier", "sigma"), ("mechanism", "sample_rate", "q"),
                ("mechanism", "top_k", "k"), ("mechanism", "clip_norm", "C"), ("audit", "delta", "delta"),
                ("audit", "alpha", "alpha"), ("audit", "threshold_rule", "rule-"))


def _mechanism_tag(preset: Preset) -> str:
    """``-sigma0.8-q0.05`` for the settings of :data:`_RUN_ID_KEYS` that differ from the named preset's, else ``""``."""
    base = PRESETS.get(preset.name)
    if base is None:
        return ""
    tags = []
    for sec, name, abbr in _RUN_ID_KEYS:
        mine, theirs = getattr(preset.section(sec), name), getattr(base.section(sec), name)
        if mine != theirs:
            tags.append(f"{abbr}{mine:g}" if isinstance(mine, (int, float)) else f"{abbr}{mine}")
    return "".join("-" + t for t in tags)


def bundled_data(preset: Preset) -> bool:
    """True when ``preset`` reads the data that ships with the kit (the default, or tiny's own sample)."""
    return preset.data is None or preset.name == "tiny" and Path(preset.data) == Path(PRESETS["tiny"].data)


def default_run_id(preset: Preset, fitted: bool = False) -> str:
    """``<preset>`` for the default data, else ``<preset>-<data file stem>-<6 hex of its absolute path>``; then
    :func:`_mechanism_tag`, then ``-fit`` when ``fitted``."""
    tail = _mechanism_tag(preset) + ("-fit" if fitted else "")
    if bundled_data(preset):
        return preset.name + tail
    path = Path(preset.data).expanduser().resolve()
    stem = path.name.split(".")[0]
    return f"{preset.name}-{stem}-{content_hash(str(path))[:6]}" + tail
