"""The computations behind the narrative notebooks (01–05), as plain functions returning tidy rows.

The notebooks stay thin (narrative + a ``parameters`` cell + calls into these functions + plots); the
same functions are what ``pe-kit reproduce`` ends up running. Every audit step is cached under
``<output_dir>/.steps`` by the content hash of everything that fixes its numbers (study settings,
variant, canary slot, mechanism and audit settings, seed and the code of pe_kit but its display-only
modules, ``DISPLAY_ONLY``), so a rerun resumes where it stopped.

Paper: "Canaries in the Bank" — §3 Table 2, Fig. 1, Table 3; App. C Table 4; App. E.
"""
from __future__ import annotations

import hashlib
import warnings
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from pe_kit.attack.variants import ALL_VARIANTS, VARIANTS, resolve_variants  # resolve_variants: X.resolve_variants in notebooks
from pe_kit.audit.moments import (
    aux_moments,
    llr_weights,
    mu_eff,
    null_moments,
    restrict,
)
from pe_kit.audit.trials import check_equal_populations, scalar_problem
from pe_kit.settings import AuditConfig, MechanismConfig, check_param
from pe_kit.report.results import StepCache
from pe_kit.study.world import (
    StudyConfig,
    World,
    audit_design,
    build_world,
    canary_contribution,
    make_design,
    truncation_fields,
)

__all__ = ["code_hash", "package_code_hash", "DISPLAY_ONLY", "world_key", "study_config", "world_for",
           "resolve_variants", "canary_slots", "design_for",
           "try_design", "design_summary", "audit_variants", "sweep", "encoder_ablation", "scalar_problems",
           "tightness", "paraphrase_examples", "mechanism_from", "audit_from", "REAL_VARIANTS", "NONCE_VARIANTS", "PAPER_TABLE2",
           "PAPER_TABLE4"]

REAL_VARIANTS = tuple(v for v in VARIANTS if not v.startswith("nonce"))
NONCE_VARIANTS = tuple(v for v in VARIANTS if v.startswith("nonce"))
#: The only modules left out of :func:`code_hash`: they drive runs or draw, and no other module imports them
#: (tests/test_code_hash.py checks both against the import graph), so the numbers cannot depend on them.
DISPLAY_ONLY = ("run/cli.py", "run/reproduce.py", "report/widgets.py", "report/plots.py", "report/extension_plots.py")


def package_code_hash(pkg: str | Path | None = None, exclude: Sequence[str] = DISPLAY_ONLY) -> str:
    """SHA-256 (16 hex) of every ``.py`` file of the package folder ``pkg`` (default: this pe_kit) except ``exclude``.

    Each file enters as its path relative to ``pkg`` and its bytes, in sorted order, ``__init__.py`` files
    included; a file added, removed or edited anywhere changes the hash.

    Raises:
        NotADirectoryError: if ``pkg`` is not a folder.
    """
    pkg = Path(pkg).resolve() if pkg is not None else Path(__file__).resolve().parents[1]
    if not pkg.is_dir():
        raise NotADirectoryError(f"pkg={str(pkg)!r} is not a folder; pass the pe_kit package folder")
    h = hashlib.sha256()
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg).as_posix()
        if rel not in exclude and "__pycache__" not in path.parts:
            h.update(rel.encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


@lru_cache(maxsize=1)
def code_hash() -> str:
    """SHA-256 (16 hex) of the whole pe_kit package's code but :data:`DISPLAY_ONLY` (:func:`package_code_hash`).

    Part of every step-cache key, so a code change recomputes the steps it could affect; this module (the seeds
    of designs and trials, ``_rng``; the canary of each variant, ``canary_slots``) is covered too. Computed once
    per process.
    """
    return package_code_hash()


def world_key(world: World) -> str:
    """The world's content key (``World.fingerprint``; computed by ``pe_kit.study.world.world_fingerprint``
    for a ``World`` built by hand). Part of every step-cache key: the data and bank bytes, the bank texts and
    the encoder's model files, never their paths alone."""
    if not world.fingerprint:
        from pe_kit.study.world import world_fingerprint

        world.fingerprint = world_fingerprint(world.config, world.bank_texts, world.encoder)
    return world.fingerprint


def study_config(params: Mapping[str, Any], arm: str | None = None, bank: str | None = None,
                 model: str | None = None) -> StudyConfig:
    """A ``StudyConfig`` from notebook parameters (keys as in ``pe_kit.settings.Preset``).

    Args:
        params: mapping with ``data, fmt, n_canary, n_aux, n_calibration, n_test, bank_size, max_probes,
            model, max_seq_length, record_cap, seed`` (and ``arm``/``bank`` unless given; optional ``on_error``).
        arm, bank, model: override the mapping's values.

    Raises:
        ValueError: naming a missing key, or a value of the wrong type or range (``StudyConfig`` checks every
            field with ``pe_kit.settings.check_param``; no silent ``int()`` of a bool or a fraction).
    """
    need = ("n_canary", "n_aux", "n_calibration", "n_test", "bank_size", "max_probes", "record_cap", "seed")
    missing = [k for k in need if params.get(k) is None]
    if missing:
        raise ValueError(f"parameters {missing} are not set; pass them or a preset (pe_kit.run.presets.PRESETS)")
    return StudyConfig(data=params.get("data"), fmt=params.get("fmt") or "auto", arm=arm or params.get("arm", "long"),
                       n_canary=params["n_canary"], n_aux=params["n_aux"], n_calibration=params["n_calibration"],
                       n_test=params["n_test"], bank=bank or params.get("bank", "bankA"), bank_size=params["bank_size"],
                       max_probes=params["max_probes"], model=model or params.get("model") or "all-MiniLM-L6-v2",
                       max_seq_length=params.get("max_seq_length"), record_cap=params["record_cap"],
                       seed=params["seed"], on_error=params.get("on_error") or "raise")


def mechanism_from(params: Mapping[str, Any], **overrides) -> MechanismConfig:
    """``MechanismConfig`` from parameters (``record_cap``, optional ``noise_multiplier``, ``sample_rate``,
    ``top_k``, ``clip_norm``; paper defaults otherwise) with keyword overrides."""
    kw = {k: params[k] for k in ("top_k", "clip_norm", "noise_multiplier", "sample_rate", "record_cap")
          if params.get(k) is not None}
    kw.update(overrides)
    return MechanismConfig(**kw)


def audit_from(params: Mapping[str, Any], n_canaries: int, **overrides) -> AuditConfig:
    """``AuditConfig`` from parameters (``trials``, optional ``alpha``, ``delta``, ``shrinkage``, ``ridge``: the
    settings tree's audit section; optional ``threshold_rule``) for ``n_canaries`` canaries per variant
    (γ = α / (4·n_canaries), App. E.6)."""
    kw = {k: params[k] for k in ("trials", "alpha", "delta", "shrinkage", "ridge", "threshold_rule")
          if params.get(k) is not None}
    kw["n_canaries"] = n_canaries
    kw.update(overrides)
    return AuditConfig(**kw)


_WORLDS: dict[tuple, World] = {}


def world_for(config: StudyConfig, progress: bool = True, top_k: int = 5) -> World:
    """Build (or reuse, within this process) the ``World`` of ``config``; embeddings come from the disk cache.

    The in-process reuse is keyed by ``config``, ``top_k`` *and* ``pe_kit.study.world.input_digests(config)``, so a
    data or bank file rewritten during a notebook session is reloaded. ``top_k``: the largest k the world's
    neighbour index must serve (its depth is k + max_probes; default the paper's k = 5).

    Raises what ``pe_kit.study.world.build_world`` raises (too few users, a bank smaller than ``bank_size`` …).
    """
    from pe_kit.study.world import input_digests

    key = (config, top_k, tuple(sorted(input_digests(config).items())))
    if key not in _WORLDS:
        from pe_kit.text.encoder import Encoder

        encoder = Encoder(config.model, max_seq_length=config.max_seq_length, progress=progress)
        _WORLDS[key] = build_world(config, encoder=encoder,
                                   mechanism=MechanismConfig(top_k=top_k, record_cap=config.record_cap))
    return _WORLDS[key]


def canary_slots(variant: str, per_variant: int, n_canary: int) -> list[int]:
    """Canary slots (indices into the study's canary split) used by ``variant``.

    Real-canary variants get disjoint blocks ``[i·per_variant, (i+1)·per_variant)`` (i = the variant's
    index among the five real variants) when the study holds enough canaries (paper: 40 = 8 × 5, each
    attack on "an independently selected set of five canaries"); otherwise the blocks wrap around and
    variants share canaries. Nonce variants draw synthetic canaries; their slots only index the draws.
    ``composed-mu_eff`` (beyond the paper) audits paraphrase-mu_eff's canaries, so the two natural-text
    Alg. B.1 attacks compare on the same five records sets.
    """
    per_variant = check_param("per_variant", per_variant)
    if variant in NONCE_VARIANTS:
        return list(range(per_variant))
    n_canary = check_param("n_canary", n_canary)
    i = REAL_VARIANTS.index("paraphrase-mu_eff" if variant == "composed-mu_eff" else variant)
    return [(i * per_variant + j) % n_canary for j in range(per_variant)]


def _route_key(variant: str, generator) -> tuple:
    """Step-key part of a variant's paraphrase route: () for variants without a paraphrase pool (their keys stay as
    they were), else (route, shipped pools digest). The route is what ``generator`` resolves to: None is
    ``study.DEFAULT_PARAPHRASER`` (so a changed default never reuses rows of the old one); ``"smollm2"`` adds the
    installed model's digest (its pools may be generated here); a generator object is keyed by
    ``generator_identity`` (name, ``config()``, model digest, code: two WordNet rates, two endpoints or two model
    files never share rows). ``composed-mu_eff`` adds its ``ComposedConfig`` (``composed_probes.DEFAULT_CONFIG``, which
    ``benchmarks/composed_reference.py --refine-rounds`` replaces), so rows of two configs never share a step."""
    if variant == "composed-mu_eff":
        from pe_kit.attack import composed_probes

        return ("composed", composed_probes.DEFAULT_CONFIG.as_dict())
    if not variant.startswith("paraphrase"):
        return ()
    from pe_kit.cache import content_hash
    from pe_kit.study.world import DEFAULT_PARAPHRASER, _installed_model

    route = DEFAULT_PARAPHRASER if generator is None else generator
    if route == "smollm2":
        from pe_kit.text.generators.paraphrase_pools import llm_paraphraser

        route = ("smollm2", _installed_model(llm_paraphraser()))
    elif not isinstance(route, str):
        from pe_kit.text.generators.base import generator_identity

        route = content_hash(generator_identity(route))
    return (route, _pools_key(variant))


def _pools_key(variant: str) -> str:
    """The shipped paraphrase pools' digest for paraphrase variants (their designs may take a shipped pool), else ""."""
    if not variant.startswith("paraphrase"):
        return ""
    from pe_kit.text.generators.paraphrase_pools import shipped_pools_digest

    return shipped_pools_digest()


def _rng(seed: int, variant: str, j: int, purpose: int, salt: int = 0) -> np.random.Generator:
    return np.random.default_rng([int(seed), ALL_VARIANTS.index(variant), int(j), int(purpose), int(salt)])


def try_design(world: World, variant: str, j: int, slot: int, seed: int, mechanism: MechanismConfig | None = None,
               pool_size: int | None = None, generator=None):
    """Like :func:`design_for`, but returns ``(design, None)`` or ``(None, reason)`` without warning.

    ``reason`` starts with ``"not implemented"`` (the variant does not exist in this pe_kit) or
    ``"pool shortfall"`` (this canary's records admit too few distinct candidates); other errors propagate.
    ``generator``: paraphrase route for the paraphrase variants (``pe_kit.study.world.paraphrase_pool``; None: the
    default, ``pe_kit.study.world.DEFAULT_PARAPHRASER``).
    """
    from pe_kit.text.generators.base import PoolShortfallError

    kw = {}
    if mechanism is not None:
        kw["mechanism"] = mechanism
    if pool_size is not None:
        kw["pool_size"] = pool_size
    if generator is not None:
        kw["generator"] = generator
    try:
        return make_design(world, variant, slot, _rng(seed, variant, j, 11), **kw), None
    except NotImplementedError as exc:
        return None, f"not implemented: {exc}"
    except PoolShortfallError as exc:  # the canary's records admit too few distinct candidates
        return None, f"pool shortfall: {exc}"


def design_for(world: World, variant: str, j: int, slot: int, seed: int, mechanism: MechanismConfig | None = None,
               pool_size: int | None = None, generator=None):
    """The frozen design of ``variant`` for its j-th canary (slot ``slot``), seeded by (seed, variant, j).

    Args:
        world, variant: the study and a name from ``VARIANTS``. j: the canary's index within the variant.
        slot: index into the canary split (real variants). seed: root seed.
        mechanism: k, C, σ, q used by the design (μ_eff variants freeze Σ̂_Q with it); default: paper values.
        pool_size: M, candidate pool of paraphrase / nonce variants (default 512, App. B).
        generator: paraphrase route (``"auto"``, ``"smollm2"``, ``"wordnet"``, a generator object; None =
            ``pe_kit.study.world.DEFAULT_PARAPHRASER``).

    Returns:
        ``ProbeDesign``, or None (with a warning) when the variant is not implemented (``NotImplementedError``
        from ``pe_kit.study.world.make_design``) or the canary's candidate pool falls short
        (``pe_kit.text.generators.base.PoolShortfallError``: e.g. records too short for enough distinct paraphrases),
        so notebooks run with whatever designs exist. Other errors propagate.
    """
    design, reason = try_design(world, variant, j, slot, seed, mechanism, pool_size, generator)
    if design is None:
        warnings.warn(f"variant {variant!r}, canary slot {slot} skipped: {reason}", stacklevel=2)
    return design


def design_summary(world: World, design, mechanism: MechanismConfig, audit: AuditConfig) -> dict:
    """Where the canary's votes go and its μ_eff on a frozen design, without trials (Eqs. 1, 3, 20, 34–35).

    Returns a dict: ``variant, canary_id, n_coords`` (|P|), ``canary_votes_on_P`` (share of the canary's
    vote mass on P), ``canary_norm`` (‖v_P‖₂ ≤ C), ``canary_norm_full`` (‖v‖₂), ``clip_norm``,
    ``mu_eff`` (with Σ̂ from the aux users, N = n_test), ``mu_eff_ceiling`` (1/σ),
    ``background_voters`` (test users with any vote on P), ``background_vote_share`` (mean share of a
    test user's mass on P), and the world's truncation counts (``pe_kit.study.world.truncation_fields``).
    """
    v_full = canary_contribution(world, design, mechanism)
    coords = np.asarray(design.positions if design.positions is not None else np.flatnonzero(v_full), np.int64)
    coords = np.sort(coords)
    v = v_full[coords]
    aux = world.contributions("aux", mechanism, design)
    test = world.contributions("test", mechanism, design)
    m0, sigma = null_moments(aux_moments(restrict(aux, coords), audit.shrinkage), test.shape[0], mechanism,
                             audit.ridge)
    tP = restrict(test, coords)
    totals = np.asarray(test.sum(axis=1)).ravel()
    onP = np.asarray(tP.sum(axis=1)).ravel()
    sigma_ = mechanism.noise_multiplier
    return {"variant": design.variant, "canary_id": design.canary_id, "n_coords": int(coords.size),
            "canary_votes_on_P": float(v.sum() / max(v_full.sum(), 1e-300)), "canary_norm": float(np.linalg.norm(v)),
            "canary_norm_full": float(np.linalg.norm(v_full)), "clip_norm": mechanism.clip_norm,
            "mu_eff": mu_eff(v, sigma) if coords.size else 0.0,
            "mu_eff_ceiling": (1 / sigma_) if sigma_ > 0 else float("inf"),
            "background_voters": int((onP > 0).sum()),
            "background_vote_share": float(np.mean(onP / np.maximum(totals, 1e-300))), **truncation_fields(world)}


def audit_variants(world: World, variants: Sequence[str], per_variant: int, mechanism: MechanismConfig,
                   audit: AuditConfig, seed: int, cache: StepCache | None = None, salt: int = 0,
                   progress: bool = True, extra: Mapping[str, Any] | None = None,
                   design_mechanism: MechanismConfig | None = None, pool_size: int | None = None,
                   generator: str | None = None) -> tuple[list[dict], list[str]]:
    """Audit ``per_variant`` canaries of each variant on one world: the rows behind Table 2 / Table 4.

    Args:
        world: the study (one data arm × one bank × one encoder).
        variants: names from ``VARIANTS``; unimplemented ones are skipped and reported.
        per_variant: canaries per variant (paper: 5); slots from ``canary_slots``.
        mechanism, audit: settings; ``audit.trials`` per hypothesis per split.
        seed: seeds designs (seed, variant, j) and trials (seed, variant, j, salt).
        cache: step cache (None = no resume); salt: separates sweep points that share a world.
        progress: ``pe_kit.progress`` over (variant, canary) (a bar in Jupyter, lines headless); extra: fields added to every row.
        design_mechanism: settings the designs are built with (default ``mechanism``; sweeps keep one frozen
            design per canary while the audited mechanism varies). pool_size: M of the candidate pools.
        generator: paraphrase route of the paraphrase variants' pools (``"auto"``, ``"smollm2"``, ``"wordnet"``;
            None = ``pe_kit.study.world.DEFAULT_PARAPHRASER``); part of each step's cache key.

    Returns:
        (rows, skipped): each row is ``pe_kit.study.world.audit_design``'s plus ``canary_slot``, ``canary_index``,
        ``seed``, ``salt`` and ``extra``; ``skipped`` names unimplemented variants (``"paraphrase"``) and
        canaries whose design failed on a pool shortfall (``"paraphrase#2: pool shortfall: …"``).
    """
    design_mechanism = design_mechanism or mechanism
    jobs = [(v, j, s) for v in resolve_variants(variants) for j, s in enumerate(
        canary_slots(v, per_variant, world.config.n_canary))]
    rows, skipped = [], []
    bar = None
    if progress:
        from pe_kit.progress import progress
        bar = progress(total=len(jobs), desc=f"audit {world.config.arm}/{world.config.bank}", unit="canary")
    try:
        for variant, j, slot in jobs:
            if variant in skipped:
                if bar is not None:
                    bar.update(1)
                continue

            def compute(variant=variant, j=j, slot=slot):
                design, reason = try_design(world, variant, j, slot, seed, design_mechanism, pool_size, generator)
                if design is None:
                    return {"skipped": reason}
                row = audit_design(world, design, mechanism, audit, _rng(seed, variant, j, 23, salt))
                return {**row, "canary_slot": slot, "canary_index": j, "seed": seed, "salt": salt}

            key = ("audit", world.config.as_dict(), world_key(world), variant, j, slot, mechanism.as_dict(), audit.as_dict(), seed, salt,
                   design_mechanism.as_dict(), pool_size, code_hash(), *_route_key(variant, generator))
            row = cache.get_or_compute(key, compute) if cache is not None else compute()
            if "skipped" in row:
                reason = row["skipped"]
                if reason.startswith("not implemented"):
                    skipped.append(variant)
                else:
                    skipped.append(f"{variant}#{j}: {reason}")
                warnings.warn(f"variant {variant!r}, canary {j} (slot {slot}) skipped: {reason}", stacklevel=2)
            else:
                rows.append({**row, **(extra or {})})
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return rows, skipped


def sweep(world: World, variants: Sequence[str], field: str, values: Sequence[float], mechanism: MechanismConfig,
          audit: AuditConfig, seed: int, cache: StepCache | None = None, per_variant: int = 1,
          experiment: str | None = None, pool_size: int | None = None, generator: str | None = None
          ) -> tuple[list[dict], list[str]]:
    """Fig. 1 analogue: audit the same frozen designs while one mechanism setting varies.

    Args:
        world, variants, mechanism, audit, seed, cache, per_variant: as ``audit_variants`` (paper: one canary).
        field: ``"noise_multiplier"`` (σ) or ``"sample_rate"`` (q).
        values: the grid.
        experiment: row label (default ``"sigma_sweep"`` / ``"q_sweep"``). pool_size: M of the pools.
        generator: paraphrase route (as ``audit_variants``).
        The designs are built once with ``mechanism`` and stay frozen across the grid.

    Returns:
        (rows, skipped variants); rows carry ``experiment`` and the swept value in ``mech_<field>``.

    Raises:
        ValueError: for another field or an empty grid.
    """
    if field not in ("noise_multiplier", "sample_rate"):
        raise ValueError(f"field={field!r} must be 'noise_multiplier' (σ) or 'sample_rate' (q)")
    if len(values) == 0:
        raise ValueError(f"the {field} grid is empty; pass at least one value")
    experiment = experiment or ("sigma_sweep" if field == "noise_multiplier" else "q_sweep")
    rows, skipped = [], []
    from pe_kit.progress import progress

    name = "σ" if field == "noise_multiplier" else "q"
    for i, value in enumerate(progress(list(values), desc=f"{experiment}: {name} = {', '.join(f'{v:g}' for v in values)}",
                                       unit="setting")):
        mech = replace(mechanism, **{field: float(value)})
        r, s = audit_variants(world, variants, per_variant, mech, audit, seed, cache, salt=1000 + i, progress=False,
                              extra={"experiment": experiment, "sweep_field": field, "sweep_value": float(value)},
                              design_mechanism=mechanism, pool_size=pool_size, generator=generator)
        rows += r
        skipped += [v for v in s if v not in skipped]
    return rows, skipped


def encoder_ablation(params: Mapping[str, Any], encoders: Sequence[str], variants: Sequence[str], per_variant: int,
                     mechanism: MechanismConfig, audit: AuditConfig, cache: StepCache | None = None,
                     arm: str | None = None, bank: str | None = None, pool_size: int | None = None,
                     generator: str | None = None) -> tuple[list[dict], list[str]]:
    """Table 3 analogue: the same study with each encoder (any sentence-transformers name or path).

    ``generator``: paraphrase route (as ``audit_variants``; None = ``params["paraphraser"]`` when set).

    An encoder that cannot be loaded is skipped with a warning (its name is returned in the skipped list
    as ``encoder:<name>``), so the ablation runs with whatever models are installed.

    Returns:
        (rows with ``experiment="encoder"`` and ``study_model``, skipped).
    """
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


def scalar_problems(world: World, design, mechanism: MechanismConfig, audit: AuditConfig,
                    rng: np.random.Generator):
    """The (calibration, test) ``ScalarProblem`` pair of one frozen design, exactly as ``_audit_canary`` builds it.

    aux moments → (m̂0, Σ̂_P) for N = n_test (Eqs. 31–35) → w = Σ̂⁻¹v → projections of the calibration users
    and of the test users (equal-size splits, never resampled; ``rng`` is unused and kept for callers).

    Returns:
        (calibration ScalarProblem, test ScalarProblem, coords int64 (|P|,)).
    """
    from pe_kit.study.world import SPLITS

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
    """ε_lower against the number of trials per hypothesis for one canary of ``variant``.

    ``generator``: paraphrase route of a paraphrase variant's pool (as ``audit_variants``).

    The frozen design's (calibration, test) scalar problems go to ``pe_kit.audit.sweep.tightness_curve`` (the
    streaming engine: exact counts, no per-trial memory), which calibrates and tests at every budget and
    adds ``epsilon_expected`` (the Gaussian-model expectation at the design's μ_eff) and its limit.

    Returns:
        rows with ``experiment="tightness"``, ``variant``, ``canary_id``, ``trials``, ``epsilon_lower``,
        ``epsilon_expected``, ``epsilon_expected_limit``, ``epsilon_theory``, ``mu_eff`` and the settings.

    Raises:
        ValueError: on an empty or non-positive trial list.
    """
    from pe_kit.audit.sweep import tightness_curve

    trials = [int(t) for t in trials]
    if not trials or min(trials) < 1:
        raise ValueError(f"tightness_trials={trials} must be a non-empty list of positive counts")
    slot = canary_slots(variant, 1, world.config.n_canary)[0]
    key = ("tightness", world.config.as_dict(), world_key(world), variant, slot, trials, mechanism.as_dict(),
           audit.as_dict(), seed, pool_size, code_hash(), *_route_key(variant, generator))

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
                **truncation_fields(world)}
        return [{**base, **{k: v for k, v in r.items() if k not in ("attack", "canary")}}
                for r in df.to_dict("records")]

    return cache.get_or_compute(key, compute) if cache is not None else compute()


# ---------------------------------------------------------------------------------------------- paper values
#: Table 2 and Table 4 of the paper (defined in ``pe_kit.report.paper_compare``, re-exported for the notebooks).
from pe_kit.report.paper_compare import PAPER_TABLE2, PAPER_TABLE4  # noqa: E402


def paraphrase_examples(design, n: int = 5, world: World | None = None):
    """Source records beside the paraphrase probes made from them (the ``paraphrase`` variant's design).

    Args:
        design: a ``paraphrase`` ``ProbeDesign`` (its ``info["probe_sources"]`` gives each probe's record).
        n: int ≥ 1, how many (record, probe) pairs to show, one per distinct source record first.
        world: the design's study; when given and the design's pool is not already SmolLM2's, a column
            ``smollm2`` adds the same record's rewrite from the canary's shipped SmolLM2 pool
            (``pe_kit.text.generators.paraphrase_pools.find_pool``; nothing is generated; empty when no
            shipped pool matches this canary's key).

    Returns:
        ``pandas.DataFrame`` with columns ``record`` (index in the canary's records), ``source``, ``paraphrase``
        and ``generator`` (the pool generator's name, e.g. ``wordnet`` or a local LLM), plus ``smollm2``
        when ``world`` is given.

    Raises:
        ValueError: if the design is not a paraphrase design with probe sources, or n < 1.
    """
    import pandas as pd

    if n < 1:
        raise ValueError(f"n={n} must be ≥ 1")
    sources = design.info.get("probe_sources") if design.variant == "paraphrase" else None
    if sources is None:
        raise ValueError(f"paraphrase_examples needs a 'paraphrase' design with probe sources; got {design.variant!r}")
    first = {}
    for t, s in enumerate(sources):
        first.setdefault(int(s), t)
    order = list(first.values()) + [t for t in range(len(sources)) if t not in first.values()]
    gen = design.info.get("pool_generator", "unknown")
    df = pd.DataFrame([{"record": int(sources[t]), "source": design.canary_texts[int(sources[t])],
                        "paraphrase": design.probe_texts[t], "generator": gen} for t in order[:n]])
    if world is not None and design.info.get("pool_source") != "shipped":
        llm = _shipped_llm_pool(world, design)
        first_llm: dict = {}
        if llm is not None:
            for text, s in zip(llm["texts"], llm["sources"]):
                first_llm.setdefault(int(s), text)
        df["smollm2"] = [first_llm.get(int(r), "") for r in df["record"]]
    return df


def _shipped_llm_pool(world: World, design) -> dict | None:
    """The shipped SmolLM2 pool of ``design``'s canary in ``world`` (same records, M and pool seed), or None."""
    from pe_kit.study.world import paraphrase_pool_seed
    from pe_kit.text.generators.paraphrase_pools import find_pool, llm_paraphraser, pool_spec

    size = int(design.info.get("pool_size", 0))
    if size < 1:
        return None
    seed = paraphrase_pool_seed(world.config.seed, design.canary_id)
    return find_pool(list(design.canary_texts), size, seed, pool_spec(llm_paraphraser()))
