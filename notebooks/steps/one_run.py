"""One-run audits of one PE release (notebook 08) beside the kit's multi-trial audit on the same bank.

``one_run_release``: frozen multi-canary bank → top-k routes → each canary inserted w.p. ½ → one Poisson-sampled
Gaussian release (Eq. 1) → per canary block: aux moments (Eqs. 31–35), ℓ_i (Eq. 14), ℓ_mix (Eq. 4) → the
abstaining guesser and both one-run bounds (``audit.one_run``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from pe_kit.audit.accounting import epsilon_theory
from pe_kit.audit.moments import aux_moments, llr_weights, mixture_llr, null_moments, restrict
from pe_kit.audit.one_run import _one_run_audit, idealised_scores
from pe_kit.settings import COUNT, AuditConfig, MechanismConfig, check_param
from pe_kit.pe.mechanism import release, routed_contributions
from steps.one_run_checks import published_checks
from steps.one_run_design import OneRunDesign, design_one_run, max_canaries

__all__ = ["OneRunRelease", "natural_candidates", "make_one_run_design", "one_run_release",
           "one_run_rows", "multi_trial_row", "idealised_rows", "DEFAULTS", "with_defaults",
           "one_run_study", "published_checks"]


@dataclass(frozen=True)
class OneRunRelease:
    """One release with m canaries: ``scores`` (m,), ``included`` S_i, ``participated``, per-canary ``mu_eff`` (Eq. 15),
    ``background_voters``, ``audits`` (method → ``Audit``), ``releases`` (1) and ``seconds``."""

    scores: np.ndarray
    included: np.ndarray
    participated: np.ndarray
    mu_eff: np.ndarray
    background_voters: np.ndarray
    audits: dict
    releases: int
    seconds: float


def natural_candidates(world) -> list[tuple[str, tuple]]:
    """(user_id, texts) of usable natural canaries: the canary split first, then unused users; texts not in the base
    bank, at least one."""
    splits = world.splits
    used = {*splits.canary, *splits.aux, *splits.calibration, *splits.test}
    order = list(splits.canary) + [u.user_id for u in world.corpus.users if u.user_id not in used]
    in_bank, by_id = set(world.bank_texts), world.corpus.by_id()
    pairs = ((uid, tuple(t for t in by_id[uid].texts if t not in in_bank)) for uid in order)
    return [(uid, texts) for uid, texts in pairs if texts]


def make_one_run_design(world, variant: str, n_canaries: int, seed: int, *, copies: int = 5) -> OneRunDesign:
    """The frozen multi-canary ``OneRunDesign`` of ``variant`` (``"nonce"`` or ``"natural"``) with m = ``n_canaries``
    on ``world``'s bank, seeded by (seed, variant, m); ``copies`` of each canary's one record per block.

    Raises ValueError when the blocks do not fit (names ``max_canaries``), too few natural users, or an unknown variant.
    """
    rng = np.random.default_rng([int(seed), 16, 0 if variant == "nonce" else 1, int(n_canaries)])
    natural = natural_candidates(world) if variant == "natural" else None
    return design_one_run(world.encoder, world.bank.shape[0], n_canaries, rng, variant=variant, copies=copies,
                          natural=natural)


def _population(world, bank: np.ndarray, mechanism: MechanismConfig, split: str):
    rec = world.records[split]
    return routed_contributions(rec["emb"], rec["owner"], len(rec["ids"]), bank, mechanism)


def one_run_release(world, design: OneRunDesign, mechanism: MechanismConfig, rng: np.random.Generator,
                    audit: AuditConfig = AuditConfig()) -> OneRunRelease:
    """One PE release with the design's canaries inserted w.p. ½ each (``rng`` the only randomness), every canary scored
    (Σ̂ with ``audit``'s shrinkage and ridge, Eqs. 33, 35) and ε bounded at its δ, family-wise α over
    (k₊, k₋) pairs. Raises ValueError if the design was made for another bank size, or a block's covariance is
    singular."""
    t0 = time.perf_counter()
    if design.bank_size != world.bank.shape[0]:
        raise ValueError(f"design bank_size={design.bank_size} but the world's bank has p={world.bank.shape[0]}")
    bank = design.bank(world.bank)
    test = _population(world, bank, mechanism, "test")
    aux = _population(world, bank, mechanism, "aux")
    canaries = routed_contributions(design.canary_embeddings, design.owner, design.m, bank, mechanism)
    m, n_test = design.m, test.shape[0]
    included = rng.random(m) < 0.5
    population = sp.vstack([test, canaries[np.flatnonzero(included)]]).tocsr()
    participation = rng.random(population.shape[0]) < mechanism.sample_rate
    y = release(population, mechanism, rng, participation)
    participated = np.zeros(m, dtype=bool)
    participated[np.flatnonzero(included)] = participation[n_test:]
    scores, mu, voters = np.empty(m), np.empty(m), np.empty(m, dtype=np.int64)
    for i in range(m):
        coords = np.sort(design.blocks[i])
        v = np.asarray(canaries[i].toarray()).ravel()[coords]
        m0, sigma = null_moments(aux_moments(restrict(aux, coords), audit.shrinkage), n_test, mechanism, audit.ridge)
        w = llr_weights(v, sigma)
        ell = float((y[coords] - m0 - v / 2) @ w)
        scores[i] = mixture_llr(ell, mechanism.sample_rate)
        mu[i] = np.sqrt(max(0.0, float(w @ v)))
        voters[i] = int((restrict(test, coords).getnnz(axis=1) > 0).sum())
    audits = _one_run_audit(scores, included, delta=audit.delta, alpha=audit.alpha, sample_rate=mechanism.sample_rate)
    return OneRunRelease(scores=scores, included=included, participated=participated, mu_eff=mu,
                         background_voters=voters, audits=audits, releases=1, seconds=time.perf_counter() - t0)


def one_run_rows(world, variant: str, n_canaries: int, mechanism: MechanismConfig, seed: int, *,
                 audit: AuditConfig = AuditConfig(), copies: int | None = None) -> list[dict]:
    """Tidy rows (one per bound, experiment ``one_run``) of one one-run audit of ``variant`` with ``n_canaries``
    canaries, seeded by seed, m and q (``copies`` None = ``mechanism.top_k``): ε_lower, μ_lower, the attaining
    (k₊, k₋) and counts, median μ_eff, ε_theory, releases, seconds and ``mech_*``. Raises as ``make_one_run_design``."""
    copies = mechanism.top_k if copies is None else int(copies)
    design = make_one_run_design(world, variant, n_canaries, seed, copies=copies)
    rng = np.random.default_rng([int(seed), 16, 2, int(n_canaries), int(round(mechanism.sample_rate * 1e6))])
    res = one_run_release(world, design, mechanism, rng, audit)
    eps_theory = epsilon_theory(mechanism.noise_multiplier, mechanism.sample_rate, audit.delta)
    rows = []
    for method, a in res.audits.items():
        rows.append({"experiment": "one_run", "method": method, "variant": variant, "m": design.m,
                     "probe_share": design.probe_share, "copies": copies, "records_per_canary": 1,
                     "epsilon_lower": a.epsilon_lower, **{k: a.info[k] for k in (
                         "mu_lower", "k_plus", "k_minus", "guesses", "correct", "n_included", "n_pairs", "alpha",
                         "delta")},
                     "mu_eff": float(np.median(res.mu_eff)), "mu_eff_ceiling": 1 / mechanism.noise_multiplier,
                     "background_voters": float(np.mean(res.background_voters)),
                     "epsilon_theory": eps_theory, "releases": res.releases, "seconds": res.seconds,
                     **{f"mech_{k}": v for k, v in mechanism.as_dict().items()}})
    return rows


def multi_trial_row(world, design: OneRunDesign, mechanism: MechanismConfig, trials: int, seed: int, *,
                    audit: AuditConfig = AuditConfig()) -> dict:
    """The kit's multi-trial audit (Eq. 28; γ = α/4) of the design's first canary on the same bank:
    ``method="multi_trial"``, ε_lower, μ_eff, ε_theory, ``releases`` = 4·trials and ``seconds``."""
    from pe_kit.audit.canary import _audit_canary

    t0 = time.perf_counter()
    bank = design.bank(world.bank)
    pops = {s: _population(world, bank, mechanism, s) for s in ("aux", "calibration", "test")}
    v_full = np.asarray(routed_contributions(design.canary_embeddings[design.owner == 0], np.zeros(
        int((design.owner == 0).sum()), dtype=np.int64), 1, bank, mechanism).toarray()).ravel()
    audit = replace(audit, trials=trials, n_canaries=1)
    res = _audit_canary(v_full, np.sort(design.blocks[0]), pops["aux"], pops["calibration"], pops["test"], mechanism,
                        audit, np.random.default_rng([int(seed), 16, 3, int(round(mechanism.sample_rate * 1e6))]))
    return {"experiment": "multi_trial", "method": "multi_trial", "variant": design.variant, "m": 1,
            "probe_share": design.blocks.shape[1] / design.bank_size, "epsilon_lower": res.epsilon_lower,
            "mu_eff": res.mu_eff, "mu_eff_ceiling": res.info["mu_eff_ceiling"], "epsilon_theory": res.epsilon_theory,
            "trials": audit.trials, "releases": 4 * audit.trials, "seconds": time.perf_counter() - t0,
            **{f"mech_{k}": v for k, v in mechanism.as_dict().items()}}


def idealised_rows(mu: float, sample_rate: float, ms, seed: int, *, delta: float = 1e-5, alpha: float = 0.05,
                   repeats: int = 1) -> list[dict]:
    """One-run bounds on the idealised game (``audit.one_run.idealised_scores``: per-canary Gaussian LLR, no PE)
    for each m in ``ms`` and ``repeats`` seeds: the reference a perfect nonce design (μ_eff = 1/σ) would reach."""
    repeats, ms = check_param("repeats", repeats, COUNT), [check_param("m", m, COUNT) for m in ms]
    rows = []
    noise = 1 / mu if mu > 0 else float("inf")
    eps_theory = epsilon_theory(noise, sample_rate, delta) if mu > 0 else 0.0
    for m in ms:
        for rep in range(repeats):
            t0 = time.perf_counter()
            s, inc = idealised_scores(mu, sample_rate, m, np.random.default_rng([int(seed), 16, 4, m, rep]))
            audits = _one_run_audit(s, inc, delta=delta, alpha=alpha, sample_rate=sample_rate)
            for method, a in audits.items():
                rows.append({"experiment": "one_run_idealised", "method": method, "m": m, "repeat": rep,
                             "epsilon_lower": a.epsilon_lower, **{k: a.info[k] for k in (
                                 "mu_lower", "k_plus", "k_minus", "guesses", "correct")}, "mu_eff": mu,
                             "epsilon_theory": eps_theory, "mech_sample_rate": sample_rate,
                             "mech_noise_multiplier": noise, "releases": 1, "seconds": time.perf_counter() - t0})
    return rows


#: notebook 08's own parameters and their defaults (a preset may override them in ``Preset.extra``).
DEFAULTS = {"one_run_qs": (1.0, 0.1), "probe_shares": (0.125, 0.25, 0.5, 1.0), "one_run_variants": ("nonce", "natural"),
            "copies": None, "idealised_ms": (100, 1000), "idealised_repeats": 3,
            "published_repeats": 100, "published_sigmas": (0.5, 1.0, 2.0, 4.0)}


def with_defaults(params: dict) -> dict:
    """``params`` with notebook 08's own parameters filled from ``DEFAULTS`` where None (``copies`` None = k;
    ``one_run_qs`` None = 1 and the mechanism's ``sample_rate`` when ``params`` has one); a single value of a list
    parameter (``--set 08.one_run_variants=nonce``) becomes a one-element list."""
    out = dict(params)
    if out.get("one_run_qs") is None and out.get("sample_rate") is not None:  # q = 1 and the mechanism's own q
        out["one_run_qs"] = sorted({1.0, float(out["sample_rate"])}, reverse=True)
    for k, v in DEFAULTS.items():
        if out.get(k) is None:
            out[k] = list(v) if isinstance(v, tuple) else v
        elif isinstance(v, tuple) and not isinstance(out[k], (list, tuple)):
            out[k] = [out[k]]
    return out


def one_run_study(world, params: dict, mechanism: MechanismConfig, audit: AuditConfig = AuditConfig()) -> list[dict]:
    """Notebook 08's grid (``audit``: δ, α, shrinkage and ridge): per q of ``one_run_qs``, variant and probe share, the one-run rows at the largest m fitting
    the share; then the multi-trial row of the nonce design's first canary. ``largest_share`` marks headline rows.
    Raises ValueError naming ``probe_shares`` when the largest share fits no canary (share·p < copies)."""
    params = with_defaults(params)
    copies = int(params["copies"] or mechanism.top_k)
    p = world.bank.shape[0]
    shares = sorted(float(s) for s in params["probe_shares"])
    rows: list[dict] = []
    if max_canaries(p, shares[-1], copies) < 1:
        fix = f"use a share ≥ {copies / p:.3g} (or lower copies)" if copies <= p else f"lower copies to ≤ {p}"
        raise ValueError(f"probe_shares={shares} fits no canary: each needs copies={copies} bank coordinates of the "
                         f"p={p}; {fix}")
    n_natural = len(natural_candidates(world)) if "natural" in params["one_run_variants"] else 0
    for q in params["one_run_qs"]:
        mech = replace(mechanism, sample_rate=float(q))
        for variant in params["one_run_variants"]:
            cap = n_natural if variant == "natural" else max_canaries(p, shares[-1], copies)
            m_top = min(max_canaries(p, shares[-1], copies), cap)  # the headline m: the largest share's
            done: set[int] = set()
            for share in shares:
                m = min(max_canaries(p, share, copies), cap)
                if m < 1 or m in done:  # shares that fit the same m (natural: capped by the users): one row per m
                    continue
                done.add(m)
                for r in one_run_rows(world, variant, m, mech, int(params["seed"]), audit=audit, copies=copies):
                    rows.append({**r, "probe_share_budget": share, "largest_share": m == m_top})
        design = make_one_run_design(world, "nonce", max_canaries(p, shares[-1], copies), int(params["seed"]),
                                     copies=copies)
        rows.append({**multi_trial_row(world, design, mech, int(params["trials"]), int(params["seed"]), audit=audit),
                     "probe_share_budget": shares[-1], "largest_share": True})
    return rows
