"""``pe_kit.audit_mechanism``: the kit's PE mechanism audited on a corpus, in one call.

data → ``World`` (``world.build_world``) → a frozen design of one Table-1 variant (``world.make_design``) →
``world.audit_design`` → an ``Audit`` whose ``row`` is the row notebook 04 writes for the same settings.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any, Mapping

import numpy as np

from pe_kit.audit.outcome import Audit
from pe_kit.settings import AuditConfig, AuditSettings, MechanismConfig, MechanismSettings, check_param, closest

__all__ = ["audit_mechanism", "check_study_keys"]


def audit_mechanism(data: str | None = None, variant: str = "nonce", *, mechanism: MechanismConfig | None = None,
                    audit: AuditConfig | None = None, trials: int | None = None, delta: float | None = None,
                    canaries: int = 1, seed: int = 0, study: Mapping[str, Any] | None = None,
                    generator=None, pool_size: int = 512) -> Audit:
    """Audit the kit's PE mechanism on ``data`` with ``canaries`` canaries of ``variant``; report the largest ε_lower.

    Args:
        data: corpus path (JSON Lines / CSV; None = the bundled Blogs sample).
        variant: one of ``attack.variants.ALL_VARIANTS`` (Table 1's eight or ``composed-mu_eff``).
        mechanism: the audited release, ``MechanismConfig`` (default: the paper's k=5, C=0.1, σ=1, q=0.1, m=64; its
            ``record_cap`` is the study's) or a preset's ``MechanismSettings`` (taken with m = 64).
        audit: ``AuditConfig`` or a preset's ``AuditSettings`` (default ``AuditConfig()``; its ``n_canaries`` is
            replaced by ``canaries``). trials, delta: replace ``audit.trials`` / ``audit.delta``.
        canaries: canaries audited (real variants: canary slots 0 … canaries−1; nonce: fresh draws), each bound at
            γ = α / (4 · canaries), so the maximum holds at family-wise level α (App. E.6).
        seed: the study's splits and bank draw and the designs' and trials' rng.
        study: other ``StudyConfig`` fields (not ``data``, ``seed`` or ``record_cap``).
        generator, pool_size: paraphrase route and pool size M (``world.make_design``).

    Returns:
        ``Audit`` of the canary with the largest ε_lower; ``row`` is its ``audit_design`` row plus ``canaries``,
        ``epsilon_lower_per_canary`` (in audit order) and the budget's reach (``audit.plan.Reach.as_row``), which
        is printed to stderr before the world is built.

    Raises:
        ImportError: on an install without the study extra, naming the missing module.
        ValueError: for a bad ``study`` key, canaries < 1 or more real canaries than the study holds, and what
            ``StudyConfig``, ``build_world`` and ``make_design`` raise.
        TypeError: for a ``mechanism`` / ``audit`` that is not a settings object of its section.
    """
    try:  # the study extra's packages load before any work
        for package in ("opacus", "tqdm"):
            import_module(package)
        from pe_kit.attack.variants import ALL_VARIANTS, unknown_variant
        from pe_kit.audit.plan import announce_reach, audit_reach
        from pe_kit.study.setup import world_for
        from pe_kit.study.world import StudyConfig, audit_design, make_design
    except ModuleNotFoundError as exc:
        if (exc.name or "pe_kit").split(".")[0] == "pe_kit":
            raise
        raise ImportError(f"pe_kit.audit_mechanism needs {exc.name}, which this install lacks: auditing a corpus "
                          'needs the study extra, pip install -e ".[study]" (or the main install, '
                          "scripts/bootstrap.sh)") from exc

    if variant not in ALL_VARIANTS:
        raise unknown_variant(variant, ALL_VARIANTS)
    mechanism = _as_config(mechanism, MechanismConfig, MechanismSettings, "mechanism")
    audit = _as_config(audit, AuditConfig, AuditSettings, "audit")
    canaries = check_param("n_canaries", canaries)
    audit = AuditConfig.from_params(audit.as_dict(), n_canaries=canaries, trials=trials, delta=delta)
    study = check_study_keys(study, {"data": "audit_mechanism(data=…)", "seed": "audit_mechanism(seed=…)",
                                     "record_cap": "mechanism=MechanismConfig(record_cap=…)"})
    reach = announce_reach(audit_reach(mechanism, audit.trials, gamma=audit.gamma, delta=audit.delta), mechanism)
    config = StudyConfig(data=data, seed=seed, record_cap=mechanism.record_cap, **study)
    world = world_for(config, progress=False, top_k=mechanism.top_k)
    real = not variant.startswith("nonce")
    if real and canaries > len(world.splits.canary):
        raise ValueError(f"canaries={canaries} > the study's {len(world.splits.canary)} canary users: raise "
                         "study['n_canary'] or audit fewer canaries")
    rng = np.random.default_rng([seed, 30])
    rows = []
    for slot in range(canaries):
        design = make_design(world, variant, slot, rng, mechanism=mechanism, audit=audit, generator=generator,
                             pool_size=pool_size)
        rows.append(audit_design(world, design, mechanism, audit, rng))
    best = max(rows, key=lambda r: r["epsilon_lower"])
    return Audit.from_row({**best, **reach.as_row(), "canaries": canaries,
                           "epsilon_lower_per_canary": [float(r["epsilon_lower"]) for r in rows]})


def check_study_keys(study, elsewhere: dict) -> dict:
    """``study`` as a dict of ``StudyConfig`` fields, for a call that takes the fields of ``elsewhere`` (field → where
    to pass it) through its own arguments.

    Raises:
        ValueError: naming each key that is no field (with the closest field) or is passed elsewhere.
    """
    from pe_kit.study.world import StudyConfig

    study = dict(study or {})
    known = sorted(set(StudyConfig.specs()) - set(elsewhere))
    for key in study:
        if key in elsewhere:
            raise ValueError(f"study={{{key!r}: …}} is not accepted here: pass it as {elsewhere[key]}")
        if key not in known:
            close = closest(key, known)
            hint = f"did you mean {close!r}?" if close else f"the fields are {known}"
            raise ValueError(f"study={{{key!r}: …}} is no StudyConfig field: {hint}")
    return study


def _as_config(value, config_cls, section_cls, name: str):
    """``value`` as ``config_cls`` (None → its defaults; a settings section → its fields, the config's defaults for
    the rest).

    Raises:
        TypeError: for anything else, naming what came and the fix (a dict: ``pe_kit.MechanismConfig(**value)``).
    """
    if value is None:
        return config_cls()
    if isinstance(value, config_cls):
        return value
    if isinstance(value, section_cls):
        return config_cls(**value.as_dict())
    fix = f"pe_kit.{config_cls.__name__}(**{name})" if isinstance(value, dict) else f"pe_kit.{config_cls.__name__}(...)"
    raise TypeError(f"{name}={value!r} is not a {config_cls.__name__} (it is a {type(value).__name__}): pass {fix}")
