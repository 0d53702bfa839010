"""``audit_release``: audit a PE release implementation on real text with a design battery (§2.1 Steps 1–5):
data → ``build_world`` → ``make_design`` → ``release_design`` → ``attack.design_battery`` →
``audit.battery.audit_battery`` at family-wise α.
"""
from __future__ import annotations

import dataclasses
import inspect
import sys

import numpy as np

from pe_kit.attack.design_battery import DEFAULT_AXES, LARGE_BANK, SENSITIVITY_CLAIM, battery_designs, check_design
from pe_kit.attack.release_designs import release_design
from pe_kit.audit.battery import BATTERY_TRIALS, BatteryAudit, audit_battery, battery_gamma
from pe_kit.audit.blackbox import DEFAULT_DELTA, MAX_TRIALS, look_sizes, spec_statistic
from pe_kit.audit.plan import announce_reach, audit_reach, auto_trials
from pe_kit.audit.release_runner import check_audit_arguments, check_keywords, dry_call, pilot_seconds, seed_sequence
from pe_kit.settings import MechanismConfig, MechanismSettings, closest
from pe_kit.study.mechanism_audit import _as_config, check_study_keys

__all__ = ["audit_release", "release_battery"]


def _world(world_or_data, study: dict | None, mechanism: MechanismConfig):
    if hasattr(world_or_data, "records") and hasattr(world_or_data, "bank"):
        return world_or_data
    from pe_kit.study.world import StudyConfig, build_world

    if world_or_data is not None and not isinstance(world_or_data, (str, bytes)) and not hasattr(world_or_data,
                                                                                                   "__fspath__"):
        raise TypeError(f"world_or_data must be a corpus path (str / Path), None (the bundled Blogs sample) or a "
                        f"pe_kit.study.world.World; got {type(world_or_data).__name__}")
    data = None if world_or_data is None else str(world_or_data)
    study = check_study_keys(study, {"data": "audit_release(release, data, …)"})
    study.setdefault("record_cap", mechanism.record_cap)  # the mechanism's m caps the study's records
    config = StudyConfig(data=data, **study)
    return build_world(config, mechanism=MechanismConfig(top_k=mechanism.top_k, record_cap=config.record_cap))


def _check_battery_arguments(variant, seed, design_options, axes) -> None:
    """ValueError (naming the argument, the value and the fix) on an unknown variant, axis or ``design_options`` key or
    a seed numpy cannot take."""
    from pe_kit.attack.variants import ALL_VARIANTS, unknown_variant
    from pe_kit.study.world import make_design

    if variant not in ALL_VARIANTS:
        raise unknown_variant(variant, ALL_VARIANTS)
    try:
        seed_sequence(seed)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"seed={seed!r} is not a seed ({exc}); pass an int ≥ 0, a sequence of them or a "
                         "numpy.random.SeedSequence") from None
    own = ("world", "variant", "canary_slot", "rng", "mechanism")
    for name, given, known in (("design_options", design_options, [k for k in inspect.signature(make_design).parameters
                                                                   if k not in own]),
                               ("axes", axes, sorted(DEFAULT_AXES))):
        for key in given or {}:
            if key not in known:
                guess = closest(key, known)
                hint = f"did you mean {guess!r}? " if guess else ""
                raise ValueError(f"{name} has the key {key!r}, which is unknown: {hint}use {', '.join(known)}")


def release_battery(world_or_data=None, *, variant: str = "nonce", mechanism: MechanismConfig | None = None,
                    canary_slot: int = 0, seed=0, study: dict | None = None, design_options: dict | None = None,
                    axes: dict | None = None, large_bank: int = LARGE_BANK) -> tuple[list, object]:
    """The designs ``audit_release`` audits (base first) and the check design, without auditing."""
    _check_battery_arguments(variant, seed, design_options, axes)
    mechanism = _as_config(mechanism, MechanismConfig, MechanismSettings, "mechanism")
    from pe_kit.study.world import make_design

    world = _world(world_or_data, study, mechanism)
    index = world.records["test"]["index"]
    need = min(index.bank_size, mechanism.top_k + world.config.max_probes) if index is not None else 0
    if index is not None and index.depth < need:
        raise ValueError(f"mechanism.top_k={mechanism.top_k}: this World's neighbour index has depth {index.depth} < "
                         f"top_k + max_probes = {need}; build it with pe_kit.study.world.build_world(config, "
                         f"mechanism=MechanismConfig(top_k={mechanism.top_k}, …)) or pass the corpus path instead")
    g_design, g_battery = (np.random.default_rng(s) for s in seed_sequence(seed).spawn(3)[:2])
    probe = make_design(world, variant, canary_slot, g_design, mechanism=mechanism, **dict(design_options or {}))
    base = release_design(world, probe, mechanism)
    designs = battery_designs(base, mechanism, g_battery, axes=axes, large_bank=large_bank)
    return designs, check_design(base, mechanism)


#: keywords of ``audit_implementation`` that ``audit_release`` passes on (the others it sets itself)
_PASSED_ON = ("shrinkage", "ridge", "batch", "use_batch", "call_chunk", "show_progress")
#: a wrong keyword → the one meant
_ALIASES = {"progress": "show_progress", "verbose": "show_progress", "client": "scheduler", "dask": "scheduler",
            "n_trials": "trials", "data": "world_or_data", "world": "world_or_data"}


def _check_release(release, mechanism: MechanismConfig, designs, axes) -> None:
    """The release checked before the world is built: its type and signature, and one dry call
    (``audit.release_runner.dry_call``) at each mechanism the battery audits at (a design's ``info["claim"]``: the
    ``sensitivity`` design's q = 1), a refusal there naming the way out."""
    check_audit_arguments(release, None, mechanism)
    claims = ([(getattr(d, "info", None) or {}).get("claim") for d in designs[0]] if designs is not None
              else [SENSITIVITY_CLAIM] if "sensitivity" in (DEFAULT_AXES if axes is None else axes) else [])
    others = [dataclasses.replace(mechanism, **{k: v for k, v in c.items() if k != "delta"}) for c in claims if c]
    for mech in dict.fromkeys([mechanism] + others):
        try:
            dry_call(release, mech)
        except Exception as exc:
            if mech != mechanism:
                exc.add_note(f"the battery's sensitivity design runs the release at q = {mech.sample_rate:g} "
                             "(attack.design_battery.SENSITIVITY_CLAIM); to leave it out pass axes without "
                             "'sensitivity', e.g. axes={k: v for k, v in DEFAULT_AXES.items() if k != 'sensitivity'}")
            raise


def _check_budget(trials, target, looks: int) -> bool:
    """Whether ``trials`` is ``"auto"``; ValueError on another string, a ``target`` without ``"auto"`` or ``looks``
    the trials cannot hold (``blackbox.look_sizes``)."""
    auto = isinstance(trials, str)
    if auto and trials != "auto":
        raise ValueError(f"trials={trials!r} must be an integer ≥ 1 or 'auto'")
    if target is not None and not auto:
        raise ValueError(f"target={target!r} is used only by trials='auto', but trials={trials!r}; pass "
                         "trials='auto' to pick the budget that reaches the target, or drop target")
    look_sizes(MAX_TRIALS if auto else trials, looks)
    return auto


def audit_release(release, world_or_data=None, *, variant: str = "nonce", mechanism: MechanismConfig | None = None,
                  trials: int | str = BATTERY_TRIALS, target: float | None = None, alpha: float = 0.05,
                  delta: float = DEFAULT_DELTA, seed=0, looks: int = 1, canary_slot: int = 0, study: dict | None = None,
                  design_options: dict | None = None, axes: dict | None = None, large_bank: int = LARGE_BANK,
                  scheduler=None, check_calls: int = 2_000, designs: tuple | None = None, **options) -> BatteryAudit:
    """Audit a PE release implementation on a real-text canary design and its battery (module docstring).

    ``release``: a ``PERelease`` (a function ``(bank, records, owner, n_users, config, rng) -> float (p,)``, a
    ``ReleasePipeline`` or a ``HistogramAdapter``); ``world_or_data``: a corpus path, None (bundled Blogs sample) or
    a built ``World``; ``variant``: the Table-1 canary; ``mechanism``: the claimed settings (default paper values);
    ``trials``: per hypothesis per split, or ``"auto"``: the fewest whose reach (``audit.plan``) is ≥ ``target``
    (default ε_theory), printed with a time estimate; ``looks``: early stop, each design in L looks at γ/L;
    ``study``, ``design_options``: ``StudyConfig`` / ``make_design`` keywords; ``axes``, ``large_bank``: the
    battery; ``scheduler``: a ``dask.distributed.Client``; ``designs``: a precomputed ``(designs, check)``;
    ``options``: further ``audit_implementation`` keywords.

    Arguments and the release (``_check_release``) are checked before the world is built; the budget's reach is
    printed before the first release. Returns ``audit.battery.BatteryAudit`` (``.outcome()``: its worst design).

    Raises TypeError for swapped or mistyped arguments, a class for an instance or an unknown keyword (naming the
    one meant); ValueError for bad settings, variant or study key, a release returning None / a wrong shape / NaN,
    or a ``target`` out of reach; a release error carries the finished designs as ``exc.partial``."""
    own = [k for k in inspect.signature(audit_release).parameters if k not in ("release", "options")]
    check_keywords(options, _PASSED_ON + tuple(own), "audit_release", _ALIASES)
    if designs is None:
        _check_battery_arguments(variant, seed, design_options, axes)
    mechanism = _as_config(mechanism, MechanismConfig, MechanismSettings, "mechanism")
    _check_release(release, mechanism, designs, axes)
    auto, show = _check_budget(trials, target, looks), options.get("show_progress") is not False
    if auto and designs is None:  # a target that even a one-design battery cannot reach fails before the world
        auto_trials(mechanism, gamma=battery_gamma(alpha, 1, release) / looks, delta=delta, target=target,
                    max_trials=MAX_TRIALS)
    if designs is None:
        designs = release_battery(world_or_data, variant=variant, mechanism=mechanism, canary_slot=canary_slot,
                                  seed=seed, study=study, design_options=design_options, axes=axes,
                                  large_bank=large_bank)
    battery, check = designs
    tail = battery_gamma(alpha, battery, release) / looks  # audit_battery's bounds for this battery
    if auto:
        trials = max(auto_trials(mechanism, gamma=tail, delta=delta, target=target, max_trials=MAX_TRIALS),
                     2 ** (looks - 1))  # at least one trial per look (blackbox.look_sizes)
    announce_reach(audit_reach(mechanism, trials, gamma=tail, delta=delta), mechanism, show=show)
    if auto and show:
        per = pilot_seconds(release, battery[0], mechanism, spec_statistic(battery[0], mechanism),
                            use_batch=options.get("use_batch"))
        total = len(battery) * 4 * trials + (check_calls if hasattr(release, "release_batch") else 0)
        print(f"trials='auto': {trials:,} per hypothesis per split ({len(battery)} designs, "
              f"{4 * trials * len(battery):,} releases); about {per * total / 60:.1f} min at the pilot's "
              f"{per * 1e3:.3g} ms per release",
              file=sys.stderr, flush=True)
    return audit_battery(release, battery, mechanism, trials=trials, alpha=alpha, delta=delta,
                         seed=seed_sequence(seed).spawn(3)[2], looks=looks, check=check, check_calls=check_calls,
                         scheduler=scheduler, announce=False, **options)
