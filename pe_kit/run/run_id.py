"""The name of a run's results folder (``results/<run-id>/``): stable for the same preset, data file and settings
(a rerun resumes), different whenever the rows would describe another mechanism.
"""
from __future__ import annotations

from pathlib import Path

from pe_kit.cache import content_hash
from pe_kit.run.presets import PRESETS
from pe_kit.settings import Preset

__all__ = ["default_run_id", "bundled_data"]


#: how a run id names a mechanism or audit setting that differs from its preset's (``quick-sigma0.8-q0.05``)
_RUN_ID_KEYS = (("mechanism", "noise_multiplier", "sigma"), ("mechanism", "sample_rate", "q"),
                ("mechanism", "top_k", "k"), ("mechanism", "clip_norm", "C"), ("audit", "delta", "delta"),
                ("audit", "alpha", "alpha"), ("audit", "threshold_rule", "rule-"))


def _mechanism_tag(preset: Preset) -> str:
    """``-sigma0.8-q0.05`` for the settings of :data:`_RUN_ID_KEYS` that differ from the named preset's, else ``""``,
    so runs of one preset at two mechanisms never share (and mix) one results folder."""
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
    """``<preset>`` for the default data, else ``<preset>-<data file stem>-<6 hex of its absolute path>``; then the
    mechanism and audit settings that differ from the preset's (``quick-sigma0.8-q0.05``, :func:`_mechanism_tag`),
    then ``-fit`` when ``fitted``."""
    tail = _mechanism_tag(preset) + ("-fit" if fitted else "")
    if bundled_data(preset):
        return preset.name + tail
    path = Path(preset.data).expanduser().resolve()
    stem = path.name.split(".")[0]
    return f"{preset.name}-{stem}-{content_hash(str(path))[:6]}" + tail
