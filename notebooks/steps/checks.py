"""The numerical checks behind notebooks 01 and 03: ``mechanism_walkthrough`` (one release step by step, Eq. 1,
Alg. A.1 lines 8–20) and ``llr_checks`` (App. E, Eqs. 14–23, on real data).
"""
from __future__ import annotations

__all__ = ["mechanism_walkthrough", "llr_checks"]

from dataclasses import replace
from typing import Sequence

import numpy as np
import scipy.sparse as sp
from scipy import stats

from pe_kit.audit.moments import aux_moments, llr_weights, mixture_llr, mu_eff, null_moments, restrict
from pe_kit.audit.trials import scalar_problem, simulate_scores, simulate_scores_full
from pe_kit.settings import AuditConfig, MechanismConfig
from pe_kit.pe.mechanism import contributions, release, routes_with_probes, squared_distances
from pe_kit.study.world import World, canary_contribution, make_design

from steps.designs import design_summary


def mechanism_walkthrough(world: World, mechanism: MechanismConfig, rng: np.random.Generator, split: str = "test",
                          canary_slot: int = 0) -> dict:
    """One PE release on real data, step by step (Eq. 1, Alg. A.1 lines 8–20), and one real canary's contribution.
    Returns a dict: ``routes`` int (n_records, k); ``h_norms`` (N,) ‖h̄_u‖₂ before clipping; ``v`` CSR (N, p);
    ``participation`` bool (N,); ``y`` (p,) the release; ``canary_v`` (p,); ``example`` (a canary record, its k
    nearest bank texts and squared distances); ``rows`` of ``{"quantity", "value", "note"}``."""
    rec = world.records[split]
    n_users, p = len(rec["ids"]), world.bank.shape[0]
    routes = routes_with_probes(rec["index"], rec["emb"], None, None, mechanism.top_k)
    h = contributions(routes, rec["owner"], n_users, p, clip_norm=1e12)  # unclipped h̄
    h_norms = np.sqrt(np.asarray(h.multiply(h).sum(axis=1)).ravel())
    v = contributions(routes, rec["owner"], n_users, p, mechanism.clip_norm)
    part = rng.random(n_users) < mechanism.sample_rate
    y = release(v, mechanism, rng, participation=part)
    design = make_design(world, "ordinary", canary_slot, rng)
    can_v = canary_contribution(world, design, mechanism)
    summ = design_summary(world, design, mechanism, AuditConfig(trials=1))
    can_routes = routes_with_probes(world.records["canary"]["index"], world.records["canary"]["emb"], None, None,
                                    mechanism.top_k)
    first = int(np.flatnonzero(world.records["canary"]["owner"] == canary_slot)[0])
    ex_idx = can_routes[first]
    ex_d = squared_distances(world.records["canary"]["emb"][first:first + 1], world.bank[ex_idx])[0]
    support = np.diff(v.indptr)
    sums = np.asarray(h.sum(axis=1)).ravel()
    sd = mechanism.noise_std
    rows = [
        ("users", n_users, f"{split} split"), ("bank_size_p", p, "candidates"),
        ("top_k", mechanism.top_k, "votes per record"),
        ("records_per_user_mean", float(np.bincount(rec["owner"]).mean()), "≤ record cap m"),
        ("vote_mass_per_user", float(sums.mean()), "Σ_j h̄_uj = 1 after normalization"),
        ("h_norm_min", float(h_norms.min()), "‖h̄_u‖₂ before clipping"),
        ("h_norm_median", float(np.median(h_norms)), "‖h̄_u‖₂ before clipping"),
        ("h_norm_max", float(h_norms.max()), "‖h̄_u‖₂ before clipping"),
        ("clip_norm_C", mechanism.clip_norm, "L2 clip"),
        ("fraction_clipped", float((h_norms > mechanism.clip_norm).mean()), "users with ‖h̄_u‖₂ > C"),
        ("v_norm_max", float(np.sqrt(np.asarray(v.multiply(v).sum(axis=1)).ravel()).max()), "≤ C after clipping"),
        ("support_median", float(np.median(support)), "bank entries a user votes on"),
        ("participants", int(part.sum()), f"Bernoulli(q={mechanism.sample_rate}) of {n_users}"),
        ("noise_std_sigmaC", sd, "per coordinate"),
        ("release_votes_total", float(np.asarray(v[part].sum())), "Σ_u I_u Σ_j v_uj"),
        ("release_noise_norm", float(np.linalg.norm(y - np.asarray(v[part].sum(axis=0)).ravel())), "‖Z‖₂ ≈ σC√p"),
        ("canary_support", int((can_v > 0).sum()), "coordinates the canary votes on"),
        ("canary_norm", float(np.linalg.norm(can_v)), "‖v_can‖₂ ≤ C"),
        ("canary_max_coord", float(can_v.max()), "largest single vote share"),
        ("canary_max_coord_over_noise", float(can_v.max() / sd) if sd > 0 else float("inf"),
         "signal/noise per coordinate"),
        ("canary_mu_eff", summ["mu_eff"], "Mahalanobis separation on its support (ordinary)"),
        ("mu_eff_ceiling", summ["mu_eff_ceiling"], "1/σ (Eq. 20)"),
    ]
    return {"routes": routes, "h_norms": h_norms, "v": v, "participation": part, "y": y, "canary_v": can_v,
            "design": design,
            "example": {"record": design.canary_texts[0], "bank_texts": [world.bank_texts[i] for i in ex_idx],
                        "bank_indices": ex_idx.tolist(), "sq_distances": ex_d.tolist()},
            "rows": [{"experiment": "mechanism", "quantity": q, "value": float(val), "note": note,
                      **{f"mech_{k}": x for k, x in mechanism.as_dict().items()},
                      **{f"study_{k}": x for k, x in world.config.as_dict().items()}} for q, val, note in rows]}


def _oracle_moments(pop: sp.csr_matrix, mechanism: MechanismConfig, ridge: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact null mean and covariance of the background on P for a known population (Eqs. 8–9)."""
    q = mechanism.sample_rate
    m0 = q * np.asarray(pop.sum(axis=0)).ravel()
    sig = q * (1 - q) * np.asarray((pop.T @ pop).todense())
    return m0, sig + (mechanism.noise_std ** 2 + ridge) * np.eye(sig.shape[0])


def llr_checks(world: World, designs: Sequence, mechanism: MechanismConfig, audit: AuditConfig, trials: int,
               rng: np.random.Generator, ceiling_sigmas: Sequence[float] = (0.5, 1.0, 2.0),
               full_path_trials: int = 2000) -> tuple[list[dict], dict]:
    """App. E numerically on real contributions, per design: one tidy row per check, and the draws for the plots.

    * ``h0_mean`` / ``h0_var`` / ``inc_mean`` / ``inc_var``: ℓ (Eq. 14) has mean ∓μ²/2, variance μ² (Eqs. 16–17)
      with the exact moments (Eqs. 8–9), against ``trials`` draws (5 standard errors).
    * ``gaussian_ks``: KS distance of standardized H0 scores to N(0,1) (Eq. 12; tolerance 0.05).
    * ``mixture_identity``: TPR = (1−q)·FPR + q·TPR_inc (Eq. 23). ``mixture_llr``: log p1/p0 vs ℓ_mix (Eq. 22).
    * ``mu_eff_ceiling``: μ_eff ≤ 1/σ (Eq. 20) for ``ceiling_sigmas``. ``canary_norm``: ‖v_P‖₂ ≤ C.
    * ``full_vs_scalar``: full and scalar paths agree (KS p ≥ 0.001 on ``full_path_trials``).

    Returns (rows, plot_data[variant] = {"mu", "h0", "inc", "h1", "q", "thresholds", "tpr", ...})."""
    rows, data = [], {}
    q = mechanism.sample_rate
    for design in designs:
        v_full = canary_contribution(world, design, mechanism)
        coords = np.sort(np.asarray(design.positions if design.positions is not None else np.flatnonzero(v_full)))
        v = v_full[coords]
        test = world.contributions("test", mechanism, design)
        pop = restrict(test, coords)
        m0, sig = _oracle_moments(pop, mechanism, audit.ridge)
        w = llr_weights(v, sig)
        mu2 = float(w @ v)
        mu = float(np.sqrt(mu2))
        prob = scalar_problem(w, pop, v, m0, mechanism.noise_std, q)
        s0 = simulate_scores(prob, 0, trials, rng)
        s_inc = simulate_scores(prob, 0, trials, rng) + prob.canary_shift
        s1 = simulate_scores(prob, 1, trials, rng)
        se_mean = mu / np.sqrt(trials)
        se_var = float(np.sqrt(np.var((s0 - s0.mean()) ** 2) / trials))  # empirical: the scores need not be normal

        def add(check, expected, observed, tol, note="", kind="close"):
            # kind: "close" |observed − expected| ≤ tol; "at_most" observed ≤ tol; "at_least" observed ≥ tol
            err = abs(observed - expected) if kind == "close" else float("nan")
            passed = {"close": err <= tol, "at_most": observed <= tol, "at_least": observed >= tol}[kind]
            rows.append({"experiment": "llr_check", "check": check, "variant": design.variant,
                         "canary_id": design.canary_id,
                         "expected": float(expected), "observed": float(observed), "abs_error": float(err),
                         "tolerance": float(tol), "rule": kind, "passed": bool(passed), "mu_eff": mu,
                         "trials": trials, "note": note, **{f"mech_{k}": x for k, x in mechanism.as_dict().items()},
                         **world.truncation})

        add("h0_mean", -mu2 / 2, s0.mean(), 5 * se_mean, "Eq. 16, exact test-population moments")
        add("h0_var", mu2, s0.var(ddof=1), 5 * se_var, "Eq. 16")
        add("inc_mean", mu2 / 2, s_inc.mean(), 5 * se_mean, "Eq. 17")
        add("inc_var", mu2, s_inc.var(ddof=1), 5 * se_var, "Eq. 17")
        ks = stats.kstest((s0 + mu2 / 2) / mu, "norm").statistic if mu > 0 else 0.0
        add("gaussian_ks", 0.0, ks, 0.05, "KS distance of standardized H0 scores to N(0,1) (Eq. 12 quality)", "at_most")
        ths, fpr, tinc, tpr, dev = _mixture_identity(s0, s_inc, s1, q)
        add("mixture_identity", 0.0, dev, 5 * np.sqrt(0.25 / trials) * 2, "max |TPR − ((1−q)FPR + q·TPR_inc)| (Eq. 23)",
            "at_most")
        wmae, noise, centers, emp, ok = _mixture_llr_fit(s0, s1, q)
        add("mixture_llr", 0.0, wmae, 0.05 + 2 * noise,
            "weighted |log(p1/p0) − ℓ_mix| over bins (Eq. 22; exact only if the score is Gaussian)", "at_most")
        add("canary_norm", mechanism.clip_norm, float(np.linalg.norm(v)), mechanism.clip_norm + 1e-12, "‖v_P‖₂ ≤ C",
            "at_most")
        mom = aux_moments(restrict(world.contributions("aux", mechanism, design), coords), audit.shrinkage)
        for s in ceiling_sigmas:
            mech_s = replace(mechanism, noise_multiplier=float(s))
            _, sig_s = null_moments(mom, pop.shape[0], mech_s, audit.ridge)
            add(f"mu_eff_ceiling_sigma{float(s):g}", 1 / float(s), mu_eff(v, sig_s), 1 / float(s) + 1e-9,
                f"plug-in μ_eff ≤ 1/σ at σ={s} (Eq. 20)", "at_most")
        f0 = simulate_scores_full(test, v_full, coords, w, m0, mechanism.noise_std, q, 0, full_path_trials, rng)
        pval = stats.ks_2samp(f0, simulate_scores(prob, 0, full_path_trials, rng)).pvalue  # after f0: same draws
        add("full_vs_scalar", 1.0, float(pval), 1e-3, "two-sample KS p-value, full histogram vs scalar path",
            "at_least")
        data[design.variant] = {"mu": mu, "h0": s0, "inc": s_inc, "h1": s1, "q": q, "thresholds": ths, "fpr": fpr,
                      "tpr_inc": tinc, "tpr": tpr, "bin_centers": centers[ok], "log_ratio": emp[ok],
                      "canary_id": design.canary_id}
    return rows, data


def _mixture_identity(s0: np.ndarray, s_inc: np.ndarray, s1: np.ndarray, q: float) -> tuple:
    """Thresholds at H0 quantiles 0.5–0.999, FPR, TPR_inc, TPR and max |TPR − ((1−q)·FPR + q·TPR_inc)| (Eq. 23)."""
    ths = np.quantile(s0, np.linspace(0.5, 0.999, 25))
    fpr, tinc, tpr = ((s[None, :] > ths[:, None]).mean(axis=1) for s in (s0, s_inc, s1))
    pred = (1 - q) * fpr + q * tinc
    return ths, fpr, tinc, tpr, float(np.max(np.abs(tpr - pred)))


def _mixture_llr_fit(s0: np.ndarray, s1: np.ndarray, q: float) -> tuple:
    """The empirical log(p1/p0) on 40 H0-quantile bins against ℓ_mix = log[(1−q) + q·e^ℓ] (Eq. 22): (weighted mean
    |error| over bins holding ≥ 200 scores of each, its noise level, bin centres, empirical log ratio, those bins)."""
    edges = np.quantile(s0, np.linspace(0.0, 1.0, 41))
    c0, _ = np.histogram(s0, edges)
    c1, _ = np.histogram(s1, edges)
    ok = (c0 >= 200) & (c1 >= 200)
    centers = 0.5 * (edges[1:] + edges[:-1])
    emp = np.log(np.maximum(c1, 1) / np.maximum(c0, 1))
    model = mixture_llr(centers, q)
    if not ok.any():
        return float("nan"), 0.0, centers, emp, ok
    wmae = float(np.average(np.abs(emp[ok] - model[ok]), weights=c0[ok]))
    noise = float(np.average(0.8 * np.sqrt(1 / c0[ok] + 1 / c1[ok]), weights=c0[ok]))  # E|N(0, s²)| ≈ 0.8 s
    return wmae, noise, centers, emp, ok
