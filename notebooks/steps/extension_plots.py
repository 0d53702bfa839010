"""Figures of notebooks 06–08 from tidy rows: multi-round PE (Fig. 2 analogue), seeded bugs, one-run audits."""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from steps.plots import _need, _trials

__all__ = ["plot_multiround", "plot_mutant_suite", "plot_epsilon_vs_m"]


def plot_multiround(df: pd.DataFrame, audit: pd.DataFrame | None = None, gain: pd.DataFrame | None = None):
    """Fig. 2 analogue: MAUVE of each bank S^(t) and ε_theory / ε_lower after t releases (Eq. 36), from
    ``multiround_study`` rows ``df`` and optional ``MultiroundResult.audit`` / ``.gain`` rows (None: ``df``'s ε).
    Raises ValueError naming a missing column."""
    from matplotlib.ticker import MaxNLocator

    hint = ": pass the rows of multiround_study"
    _need(df, ["round", "mauve_mean", "mech_noise_multiplier", "mech_sample_rate", "study_n_test"]
          + (["epsilon_theory", "epsilon_lower"] if audit is None else []), "plot_multiround", hint)
    if audit is not None and len(audit):
        _need(audit, ["releases", "epsilon_theory", "epsilon_lower_frozen"], "plot_multiround", hint)
    d = df.sort_values("round")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10.5, 4.2))
    _utility_panel(ax1, d, gain)
    _privacy_panel(ax2, d, audit)
    for ax in (ax1, ax2):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    r = d.iloc[-1]
    T = int(d["round"].max())
    extra = []
    if "audit_delta" in d.columns:
        extra.append(f"δ = {float(r['audit_delta']):g}")
    if "trials" in d.columns and pd.notna(r.get("trials")):
        extra.append(f"{int(r['trials']):,} trials per hypothesis")
    if "variant" in d.columns:
        extra.append(f"canary: {r['variant']}")
    fig.suptitle(f"Multi-round PE (Fig. 2 analogue): σ = {float(r['mech_noise_multiplier']):g}, "
                 f"q = {float(r['mech_sample_rate']):g}, T = {T}, N = {int(r['study_n_test'])} users"
                 + (f", {', '.join(extra)}" if extra else ""), fontsize=10)
    fig.tight_layout()
    return fig


def _utility_panel(ax, d: pd.DataFrame, gain: pd.DataFrame | None) -> None:
    """Fig. 2's left panel: MAUVE per round, DP run and control (mean ± sd over PE seeds), or one run ± mauve_sd."""
    arms = (("dp", "DP histogram retention"), ("control", "random retention (σ → ∞)"))
    if "arm" in d.columns:
        for arm, label in arms:
            a = d[d["arm"] == arm].groupby("round")["mauve_mean"]
            if a.ngroups:
                ax.errorbar(a.mean().index, a.mean(), yerr=a.std().fillna(0), marker="o", capsize=3, label=label)
        spread = "mean ± sd over PE seeds"
    else:
        ax.errorbar(d["round"], d["mauve_mean"], yerr=d.get("mauve_sd"), marker="o", capsize=3, label=arms[0][1])
        spread = "mean ± sd over k-means seeds"
    ax.set(xlabel="PE round t (bank S⁽ᵗ⁾; t = 0: the initial bank)", ylabel="MAUVE vs held-out records")
    title = f"utility ({spread})"
    if gain is not None and len(gain):
        last = gain.sort_values("round").iloc[-1]
        title += (f"\nDP − control at t = {int(last['round'])}: {last['gain']:+.3f} "
                  f"[{last['ci_low']:+.3f}, {last['ci_high']:+.3f}]")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="best")


def _privacy_panel(ax, d: pd.DataFrame, audit: pd.DataFrame | None) -> None:
    """Fig. 2's right panel: ε_theory and ε_lower after t releases (frozen-bank and adaptive audits, Eq. 36)."""
    if audit is None:
        p = d[d["round"] > 0].drop_duplicates("round")
        x, theory, frozen, adaptive = p["round"], p["epsilon_theory"], p["epsilon_lower"], None
    else:
        p = audit.sort_values("releases")
        x, theory, frozen = p["releases"], p["epsilon_theory"], p["epsilon_lower_frozen"]
        adaptive = p["epsilon_lower_adaptive"] if "epsilon_lower_adaptive" in p.columns else None
    ax.plot(x, theory, marker="s", label="ε_theory (PRV accountant)")
    ax.plot(x, frozen, marker="o", label="ε_lower (composed audit, Eq. 36)" if adaptive is None
            else "ε_lower, frozen banks (Eq. 36)")
    if adaptive is not None:
        ax.plot(x, adaptive, marker="^", ls="--", label="ε_lower, adaptive (Eq. 36, realised banks)")
    ax.set(xlabel="releases t", ylabel="ε", ylim=(0, None))
    ax.set_title("privacy after t releases (one canary)", fontsize=9)
    ax.legend(fontsize=8, loc="best")


def plot_mutant_suite(df: pd.DataFrame, needed: pd.DataFrame | None = None):
    """ε_lower and band of each ``run_suite`` row against ε_theory, and the trials each violation ``needed``.
    Raises ValueError naming a missing column."""
    _need(df, ["implementation", "design", "epsilon_lower", "epsilon_ci_low", "epsilon_ci_high", "epsilon_theory",
               "violation", "expected_violation"], "plot_mutant_suite", ": pass rows of run_suite")
    d = df.reset_index(drop=True)
    labels = [f"{i} ({g})" for i, g in zip(d["implementation"], d["design"])]
    n_panels = 2 if needed is not None and len(needed) else 1
    fig, axes = plt.subplots(1, n_panels, figsize=(5.5 * n_panels + 1.5, 0.38 * len(d) + 1.6), squeeze=False)
    ax = axes[0][0]
    y = np.arange(len(d))[::-1]
    cap = float(np.nanmax(np.where(np.isfinite(d["epsilon_ci_high"]), d["epsilon_ci_high"], np.nan)))
    cap = max(cap if np.isfinite(cap) else 0.0, float(d["epsilon_lower"].max()), float(d["epsilon_theory"].max())) * 1.1
    hi = np.minimum(np.where(np.isfinite(d["epsilon_ci_high"]), d["epsilon_ci_high"], cap), cap)
    colours = np.where(d["violation"].astype(bool), "C3", "C0")
    for yi, lo_, hi_, c in zip(y, d["epsilon_ci_low"], hi, colours):
        ax.plot([lo_, hi_], [yi, yi], color=c, lw=3, alpha=0.35)
    ax.scatter(d["epsilon_lower"], y, c=list(colours), zorder=3, s=25)
    ax.axvline(float(d["epsilon_theory"].max()), color="k", ls="--", lw=1, label="ε_theory (claimed)")
    wrong = d["violation"].astype(bool) != d["expected_violation"].astype(bool)
    ax.set_yticks(y, [lab + ("  ✗" if w else "") for lab, w in zip(labels, wrong)], fontsize=8)
    lvl = f"{float(d['band_level'].iloc[0]):.4g}" if "band_level" in d.columns else "two-sided"
    ax.set_xlabel(f"ε_lower (band: {lvl} two-sided confidence)")
    ax.set_title(f"red: flagged (ε_lower > ε_theory){_trials(d)}\n✗: the verdict differs from the derivation",
                 fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    if n_panels == 2:
        ax2 = axes[0][1]
        nd = needed.reset_index(drop=True)
        t = nd["trials_needed"].astype(float)
        yy = np.arange(len(nd))[::-1]
        ax2.barh(yy, np.where(np.isfinite(t), t, 0.0), color="C3", alpha=0.7)
        for yi, ti in zip(yy, t):
            ax2.text(ti if np.isfinite(ti) else 1, yi, f" {int(ti):,}" if np.isfinite(ti) else " not flagged",
                     va="center", fontsize=7)
        ax2.set(xscale="log", xlim=(300, None), xlabel="trials per hypothesis to flag",
                title="trials each violation needed")
        ax2.set_yticks(yy, list(nd["implementation"]), fontsize=8)
    fig.tight_layout()
    return fig


def plot_epsilon_vs_m(df: pd.DataFrame, qs: Sequence[float] | None = None):
    """ε_lower of each (variant, bound) against m, one panel per q, beside ε_theory and the multi-trial ε_lower.
    Raises ValueError without one-run rows, or for a q without a multi-trial row."""
    runs = df[df["experiment"] == "one_run"]
    if runs.empty:
        raise ValueError("no one-run rows (experiment 'one_run'); pass the rows of steps.one_run.one_run_study")
    qs = list(qs) if qs is not None else sorted(runs["mech_sample_rate"].unique(), reverse=True)
    fig, axes = plt.subplots(1, len(qs), figsize=(5 * len(qs), 3.6), squeeze=False)
    for ax, q in zip(axes[0], qs):
        sub = runs[runs["mech_sample_rate"] == q]
        multi = df[(df["mech_sample_rate"] == q) & (df["method"] == "multi_trial")]
        if multi.empty:
            raise ValueError(f"q={q}: no multi-trial row (method 'multi_trial') to draw beside the one-run bounds")
        for k, ((variant, method), g) in enumerate(sub.groupby(["variant", "method"])):
            # distinct markers, sizes and dashes: series that coincide (e.g. all at 0) stay visible
            ax.plot(g["m"], g["epsilon_lower"], marker="osD^"[k % 4], ms=9 - 1.5 * (k % 4),
                    ls=["-", "--", "-.", ":"][k % 4], label=f"{variant} · {method}")
        ax.axhline(multi["epsilon_theory"].iloc[0], ls="--", c="k", label="ε_theory")
        ax.axhline(multi["epsilon_lower"].iloc[0], ls=":", c="grey",
                   label=f"multi-trial ({int(multi['releases'].iloc[0]):,} releases)")
        ms = sorted(sub["m"].unique())
        ax.set(xscale="log", xlabel="canaries m", ylabel="ε_lower", title=f"q = {q:g}")
        ax.minorticks_off()
        ax.set_xticks(ms, [str(int(m)) for m in ms])
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.suptitle("One-run audits: ε_lower against the number of canaries m")
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    return fig
