"""Ablations of the audit (notebook 05): the same frozen designs while σ or q varies (Fig. 1), each encoder
(Table 3), and ε_lower against the number of trials (the tightness curve, Eqs. 16–19 for its expectation).
"""
from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from pe_kit.audit.moments import aux_moments, llr_weights, null_moments, restrict
from pe_kit.audit.trials import check_equal_populations, scalar_problem
from pe_kit.code_hash import code_hash
from pe_kit.report.results import StepCache
from pe_kit.settings import AuditConfig, MechanismConfig
from pe_kit.study.setup import study_config, world_for, world_key
from pe_kit.study.world import SPLITS, World, canary_contribution

from steps.audits import _route_key, audit_variants
from steps.designs import _rng, canary_slots, design_for

__all__ = ["sweep", "encoder_names", "encoder_ablation", "encoder_note", "scalar_problems", "tightness"]


def sweep(world: World, variants: Sequence[str], field: str, values: Sequence[float], mechanism: MechanismConfig,
          audit: AuditConfig, seed: int, cache: StepCache | None = None, per_variant: int = 1,
          experiment: str | None = None, pool_size: int | None = None, generator: str | None = None
          ) -> tuple[list[dict], list[str]]:
    """Fig. 1 analogue: audit the same designs, built once with ``mechanism``, while ``field`` (``"noise_multiplier"``
    or ``"sample_rate"``) takes ``values``. Other arguments as ``audit_variants``. Returns (rows, skipped variants);
    rows carry ``experiment`` and ``mech_<field>``. Raises ValueError for another field or an empty grid."""
    if field not in ("noise_multiplier", "sample_rate"):
        raise ValueError(f"field={field!r} must be 'noise_multiplier' (σ) or 'sample_rate' (q)")
    if len(values) == 0:
        raise ValueError(f"the {field} grid is empty; pass at least one value")
    experiment = experiment or ("sigma_sweep" if field == "noise_multiplier" else "q_sweep")
    rows, skipped = [], []
    from pe_kit.progress import progress

    name = "σ" if field == "noise_multiplier" else "q"
    desc = f"{experiment}: {name} = {', '.join(f'{v:g}' for v in values)}"
    for i, value in enumerate(progress(list(values), desc=desc, unit="setting")):
        mech = replace(mechanism, **{field: float(value)})
        r, s = audit_variants(world, variants, per_variant, mech, audit, seed, cache, salt=1000 + i, progress=False,
                              extra={"experiment": experiment, "sweep_field": field, "sweep_value": float(value)},
                              design_mechanism=mechanism, pool_size=pool_size, generator=generator)
        rows += r
        skipped += [v for v in s if v not in skipped]
    return rows, skipped


def encoder_names(encoders) -> list[str]:
    """The ablation's encoders: ``"auto"`` or None = ``pe_kit.text.models.available_encoders()``, else the given
    names."""
    from pe_kit.text.models import available_encoders

    return available_encoders() if encoders in ("auto", ["auto"], None) else list(encoders)


def encoder_ablation(params: Mapping[str, Any], encoders: Sequence[str], variants: Sequence[str], per_variant: int,
                     mechanism: MechanismConfig, audit: AuditConfig, cache: StepCache | None = None,
                     arm: str | None = None, bank: str | None = None, pool_size: int | None = None,
                     generator: str | None = None) -> tuple[list[dict], list[str]]:
    """Table 3 analogue: the same study with each encoder; one that cannot be loaded is skipped with a warning
    (``encoder:<name>`` in skipped). Returns (rows with ``experiment="encoder"`` and ``study_model``, skipped)."""
    rows, skipped = [], []
    for name in encoders:
        cfg = study_config(params, arm=arm, bank=bank, model=name)
        try:
            world = world_for(cfg, top_k=int(params.get("top_k", 5)))
        except (OSError, ValueError, ImportError) as exc:
            if "bank" in str(exc) and "bank_size" in str(exc):
                raise
            warnings.warn(f"encoder {name!r} skipped: {exc}", stacklevel=2)
            skipped.append(f"encoder:{name}")
            continue
        r, s = audit_variants(world, variants, per_variant, mechanism, audit, int(params["seed"]), cache,
                              extra={"experiment": "encoder"}, pool_size=pool_size,
                              generator=generator if generator is not None else params.get("paraphraser"))
        rows += r
        skipped += [v for v in s if v not in skipped]
    return rows, skipped


def encoder_note(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """None when :func:`encoder_ablation`'s ``rows`` audit two or more encoders (the Table 3 analogue compares them),
    else which are missing and how to install them (``pe_kit.text.models.encoder_ablation_note``)."""
    from pe_kit.text.models import encoder_ablation_note

    return encoder_ablation_note(list(dict.fromkeys(r["study_model"] for r in rows))) if rows else "no encoder audited"


def scalar_problems(world: World, design, mechanism: MechanismConfig, audit: AuditConfig, rng: np.random.Generator):
    """The (calibration, test) ``ScalarProblem`` pair and coords (int64 (|P|,)) of one frozen design, as
    ``_audit_canary`` builds them: aux moments (Eqs. 31–35), w = Σ̂⁻¹v, projections of both splits (``rng`` unused)."""
    v_full = canary_contribution(world, design, mechanism)
    coords = np.sort(np.asarray(design.positions if design.positions is not None else np.flatnonzero(v_full), np.int64))
    v = v_full[coords]
    contribs = {s: world.contributions(s, mechanism, design) for s in SPLITS}
    n_test = contribs["test"].shape[0]
    m0, sigma = null_moments(aux_moments(restrict(contribs["aux"], coords), audit.shrinkage), n_test, mechanism,
                             audit.ridge)
    w = llr_weights(v, sigma)
    cal = restrict(contribs["calibration"], coords)
    check_equal_populations(cal.shape[0], n_test)
    probs = [scalar_problem(w, pop, v, m0, mechanism.noise_std, mechanism.sample_rate)
             for pop in (cal, restrict(contribs["test"], coords))]
    return probs[0], probs[1], coords


def tightness(world: World, variant: str, trials: Sequence[int], mechanism: MechanismConfig, audit: AuditConfig,
              seed: int, cache: StepCache | None = None, pool_size: int | None = None,
              generator: str | None = None) -> list[dict]:
    """ε_lower against the trials per hypothesis for one canary of ``variant``, from
    ``pe_kit.audit.sweep.tightness_curve`` (exact streaming counts), with ``epsilon_expected`` (Gaussian model at
    μ_eff) and its limit. Rows have ``experiment="tightness"``. Raises ValueError on an empty or non-positive list."""
    from pe_kit.audit.sweep import tightness_curve

    trials = [int(t) for t in trials]
    if not trials or min(trials) < 1:
        raise ValueError(f"tightness_trials={trials} must be a non-empty list of positive counts")
    slot = canary_slots(variant, 1, world.config.n_canary)[0]
    key = ("tightness", world.config.as_dict(), world_key(world), variant, slot, trials, mechanism.as_dict(),
           audit.as_dict(), seed, pool_size, code_hash(Path(__file__).parent), *_route_key(variant, generator))

    def compute():
        design = design_for(world, variant, 0, slot, seed, mechanism, pool_size, generator)
        if design is None:
            return []
        cal, test, _ = scalar_problems(world, design, mechanism, audit, _rng(seed, variant, 0, 31))
        df = tightness_curve({variant: [(cal, test)]}, trials, noise_multiplier=mechanism.noise_multiplier,
                             delta=audit.delta, gamma=audit.gamma, n_canaries=1, seed=int(seed))
        base = {"experiment": "tightness", "variant": variant, "canary_id": design.canary_id, "canary_slot": slot,
                "source": "pe_kit.audit.sweep.tightness_curve", "audit_n_canaries": audit.n_canaries,
                **{f"mech_{k}": v for k, v in mechanism.as_dict().items()},
                **{f"study_{k}": v for k, v in world.config.as_dict().items()}, "bank_source": world.config.bank,
                **world.truncation}
        return [{**base, **{k: v for k, v in r.items() if k not in ("attack", "canary")}}
                for r in df.to_dict("records")]

    return cache.get_or_compute(key, compute) if cache is not None else compute()
