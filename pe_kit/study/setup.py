"""A notebook's setup from its parameters: ``StudyConfig``, mechanism, audit and the ``World`` (§2.1, App. D)."""
from __future__ import annotations

from typing import Any, Mapping

from pe_kit.settings import AuditConfig, MechanismConfig
from pe_kit.study.world import StudyConfig, World, build_world, input_digests, world_fingerprint

__all__ = ["study_config", "audit_from", "world_for", "world_key"]


def world_key(world: World) -> str:
    """The world's content key (``World.fingerprint``, computed for a ``World`` built by hand), part of every
    step-cache key."""
    if not world.fingerprint:
        world.fingerprint = world_fingerprint(world.config, world.bank_texts, world.encoder)
    return world.fingerprint


def study_config(params: Mapping[str, Any], arm: str | None = None, bank: str | None = None,
                 model: str | None = None) -> StudyConfig:
    """A ``StudyConfig`` from notebook ``params`` (its fields; ``arm`` / ``bank`` / ``model`` replace theirs when
    given). Raises ValueError naming a missing size or seed, or a value of the wrong type or range."""
    need = ("n_canary", "n_aux", "n_calibration", "n_test", "bank_size", "max_probes", "record_cap", "seed")
    missing = [k for k in need if params.get(k) is None]
    if missing:
        raise ValueError(f"parameters {missing} are not set; pass them or a preset (pe_kit.run.presets.PRESETS)")
    return StudyConfig.from_params(params, arm=arm, bank=bank, model=model)


def audit_from(params: Mapping[str, Any], n_canaries: int, **overrides) -> AuditConfig:
    """``AuditConfig`` of the fields ``params`` sets (None or missing: the defaults) for ``n_canaries`` canaries per
    variant (γ = α / (4·n_canaries), App. E.6), with keyword overrides."""
    return AuditConfig.from_params(params, n_canaries=n_canaries, **overrides)


_WORLDS: dict[tuple, World] = {}


def world_for(config: StudyConfig, progress: bool = True, top_k: int = 5) -> World:
    """Build (or reuse within this process, keyed by ``config``, ``top_k`` and ``input_digests(config)``) the
    ``World`` of ``config``; ``top_k`` is the largest k its neighbour index serves. Raises as ``build_world``."""
    key = (config, top_k, tuple(sorted(input_digests(config).items())))
    if key not in _WORLDS:
        from pe_kit.text.encoder import Encoder

        encoder = Encoder(config.model, max_seq_length=config.max_seq_length, progress=progress)
        _WORLDS[key] = build_world(config, encoder=encoder,
                                   mechanism=MechanismConfig(top_k=top_k, record_cap=config.record_cap))
    return _WORLDS[key]
