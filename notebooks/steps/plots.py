"""Figures of notebooks 01–05, each a function of tidy rows returning a Figure. Paper analogues: Fig. 1
(:func:`plot_sweep`), Tables 2 / 4 (:func:`plot_epsilon_heatmap`), Table 3 (:func:`plot_encoder_ablation`), App. E
(:func:`plot_score_distributions`, :func:`plot_mixture_checks`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["set_style", "save_figure", "plot_vote_norms", "plot_release", "plot_design", "plot_score_distributions",
           "plot_mixture_checks", "plot_epsilon_heatmap", "plot_epsilon_by_canary", "plot_sweep",
           "plot_encoder_ablation", "plot_tightness", "variant_palette"]


def _rotate(ax, degrees: int = 30) -> None:
    """Rotate x tick labels, anchored at their right end."""
    for label in ax.get_xticklabels():
        label.set_rotation(degrees)
        label.set_horizontalalignment("right")
        label.set_rotation_mode("anchor")


def set_style() -> None:
    """Seaborn's ``whitegrid`` theme at notebook-friendly sizes."""
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook", font_scale=0.9)


def variant_palette(variants: Sequence[str]) -> dict:
    """Stable colours: real-canary variants in blues/greens, nonce variants in reds (dict name → RGB)."""
    import seaborn as sns

    from pe_kit.attack.variants import ALL_VARIANTS as VARIANTS  # Table 1, then beyond-paper variants

    cols = sns.color_palette("tab10", len(VARIANTS))
    return {v: cols[VARIANTS.index(v) % len(cols)] if v in VARIANTS else (0.4, 0.4, 0.4) for v in variants}


def _order(variants) -> list[str]:
    """The variants present, in Table 1's order, then those beyond the paper (``ALL_VARIANTS``); others left out."""
    from pe_kit.attack.variants import ALL_VARIANTS

    present = set(variants)
    return [v for v in ALL_VARIANTS if v in present]


def _need(df: pd.DataFrame, cols: Sequence[str], who: str, hint: str = "") -> None:
    """Raise ValueError naming the columns of ``cols`` that ``df`` lacks."""
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{who} needs columns {missing}{hint}")


def _count_range(counts: pd.Series) -> str:
    """``"5"`` when every count is 5, else ``"3–5"``."""
    return f"{counts.min()}" if counts.min() == counts.max() else f"{counts.min()}–{counts.max()}"


def _trials(df: pd.DataFrame) -> str:
    """``", 1,000,000 trials per hypothesis"`` (the rows' largest budget), ``""`` without a ``trials`` column."""
    return f", {int(df['trials'].max()):,} trials per hypothesis" if "trials" in df.columns else ""


def _ticks_at(axis, values, fmt: str) -> None:
    """Major ticks of ``axis`` at the distinct ``values`` only, labelled with the ``str.format`` pattern ``fmt``."""
    from matplotlib.ticker import FixedLocator, NullLocator, StrMethodFormatter

    axis.set_major_locator(FixedLocator(sorted(pd.unique(values))))
    axis.set_major_formatter(StrMethodFormatter(fmt))
    axis.set_minor_locator(NullLocator())


def save_figure(fig, output_dir: str | Path, name: str) -> list[Path]:
    """Write ``fig`` as ``<output_dir>/figures/<name>.png`` (150 dpi) and ``.pdf``; ValueError for an empty or
    path-like name."""
    if not name or "/" in name or "\\" in name:
        raise ValueError(f"name={name!r} must be a plain file stem such as '04_audit_heatmap'")
    folder = Path(output_dir) / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}.png", folder / f"{name}.pdf"]
    for p in paths:
        tmp = p.with_name(p.stem + ".tmp" + p.suffix)
        fig.savefig(tmp, dpi=150, bbox_inches="tight")
        tmp.replace(p)
    return paths


def plot_vote_norms(h_norms: np.ndarray, clip_norm: float):
    """Histogram of users' ‖h̄_u‖₂ (``h_norms``) before clipping, with the clip threshold C (Eq. 1)."""
    from matplotlib.ticker import MaxNLocator

    h = np.asarray(h_norms, float)
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ax.hist(h, bins=40, color="C0", alpha=0.8)
    ax.axvline(clip_norm, color="C3", ls="--", label=f"clip norm C = {clip_norm:g}")
    ax.set(xlabel="‖h̄_u‖₂ (normalized votes, before clipping)", ylabel="users",
           title=f"{(h > clip_norm).mean():.0%} of {h.size} users are clipped (‖h̄_u‖₂ > C, Eq. 1)")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)  # inside, it hid the C line
    fig.tight_layout()
    return fig


def plot_release(y: np.ndarray, votes: np.ndarray, canary_v: np.ndarray, noise_std: float):
    """The canary's contribution against the noise σC, and the release ``y`` against ``votes`` (Eq. 1)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.9))
    cv = np.sort(np.asarray(canary_v, float)[np.asarray(canary_v) > 0])[::-1]
    # log scale: each v_j is far below σC; a filled step keeps every coordinate visible
    x = np.arange(cv.size + 1) - 0.5
    axes[0].fill_between(x, np.r_[cv, cv[-1:]] if cv.size else x * 0, step="post", color="C2", alpha=0.8, lw=0,
                         label="canary's contribution v_j")
    axes[0].axhline(noise_std, color="C3", ls="--", label=f"noise std σC = {noise_std:g}")
    if cv.size and cv.min() > 0 and noise_std > 0:
        axes[0].set_yscale("log")
        axes[0].set_ylim(min(cv.min(), noise_std) / 3, max(cv.max(), noise_std) * 3)
        axes[0].set_xlim(-0.5, cv.size - 0.5)
    axes[0].set(xlabel="canary's voted coordinates (sorted)", ylabel="canary contribution v_j (log scale)",
                title=f"canary: {cv.size} coordinates, ‖v‖₂ = {np.linalg.norm(cv):.3f}")
    axes[0].legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    order = np.argsort(np.asarray(votes))[::-1]
    axes[1].plot(np.asarray(y)[order], ".", ms=1.5, alpha=0.5, color="C0", label="release Y = votes + noise")
    axes[1].plot(np.asarray(votes)[order], "-", color="k", lw=1, label="votes Σ I_u v_u")
    axes[1].set(xlabel="bank coordinate (sorted by votes)", ylabel="histogram value",
                title=f"one release (Eq. 1) over p = {np.asarray(y).size} candidates")
    # legends sit below the panels: inside, they covered release points
    axes[1].legend(markerscale=6, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def plot_design(df: pd.DataFrame):
    """Per variant: each canary's μ_eff against the ceiling 1/σ, and its vote share on P."""
    _need(df, ["variant", "mu_eff", "mu_eff_ceiling", "canary_votes_on_P"], "plot_design")
    import seaborn as sns

    order = _order(df["variant"])
    pal = variant_palette(order)
    ceiling = float(df["mu_eff_ceiling"].max())
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    panels = ((axes[0], "mu_eff", "max", "μ_eff", "μ_eff (Eq. 15)", 1.2 * ceiling),
              (axes[1], "canary_votes_on_P", "mean", "votes on P", "share of canary votes on P", 1.08))
    for ax, y, stat, name, label, top in panels:
        sns.barplot(df, x="variant", y=y, hue="variant", order=order, palette=pal, errorbar=None, estimator=stat,
                    ax=ax, alpha=0.5, legend=False)
        sns.stripplot(df, x="variant", y=y, order=order, color="k", size=4, ax=ax)
        ax.set(xlabel="", ylabel=label, ylim=(0, top), title=f"{name}: bar = {stat} over canaries, dots = each canary")
        _rotate(ax)
    axes[0].axhline(ceiling, color="C3", ls="--", label=f"ceiling 1/σ = {ceiling:.3g} (Eq. 20)")
    axes[0].legend(loc="upper left", fontsize=8, framealpha=0.9)
    fig.suptitle(f"Probe design per variant ({_count_range(df.groupby('variant').size())} canaries each)")
    fig.tight_layout()
    return fig


def plot_score_distributions(data: Mapping[str, Mapping]):
    """Per design of ``llr_checks``: ℓ histograms under H0 and inclusion, N(∓μ²/2, μ²) overlaid (Eqs. 16–17)."""
    n = max(1, len(data))
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 3.4), squeeze=False)
    for ax, (name, d) in zip(axes[0], data.items()):
        mu = float(d["mu"])
        lo, hi = -mu * mu / 2 - 4.5 * mu, mu * mu / 2 + 4.5 * mu
        bins = np.linspace(lo, hi, 80)
        ax.hist(d["h0"], bins=bins, density=True, alpha=0.45, color="C0", label="H0 (absent)")
        ax.hist(d["inc"], bins=bins, density=True, alpha=0.45, color="C3", label="H_inc (sampled)")
        x = np.linspace(lo, hi, 400)
        if mu > 0:
            ax.plot(x, stats.norm.pdf(x, -mu * mu / 2, mu), "C0-", lw=1.5, label="N(−μ²/2, μ²)")
            ax.plot(x, stats.norm.pdf(x, mu * mu / 2, mu), "C3-", lw=1.5, label="N(+μ²/2, μ²)")
        ax.set(title=f"{name}: μ_eff = {mu:.3f}", xlabel="score ℓ (Eq. 14)", ylabel="density")
        ax.legend(fontsize=7)
    fig.suptitle("LLR scores: histograms of simulated trials vs the Gaussian laws of Eqs. 16–17")
    fig.tight_layout()
    return fig


def plot_mixture_checks(data: Mapping[str, Mapping]):
    """Per design: (left) TPR against (1−q)·FPR + q·TPR_inc over thresholds (Eq. 23); (right) empirical
    log p1/p0 against ℓ_mix = log[(1−q) + q·e^ℓ] (Eq. 22). Returns Figure."""
    from pe_kit.audit.moments import mixture_llr

    n = max(1, len(data))
    fig, axes = plt.subplots(2, n, figsize=(5.2 * n, 6.4), squeeze=False)
    for j, (name, d) in enumerate(data.items()):
        pred = (1 - d["q"]) * d["fpr"] + d["q"] * d["tpr_inc"]
        ax = axes[0, j]
        ax.plot(pred, d["tpr"], "o", ms=3, label="thresholds")
        m = max(float(np.max(pred)), float(np.max(d["tpr"])))
        ax.plot([0, m], [0, m], "k--", lw=1, label="identity")
        ax.set(xlabel="(1−q)·FPR + q·TPR_inc", ylabel="TPR (eligible canary)",
               title=f"{name}: mixture identity (Eq. 23)")
        ax.legend(fontsize=7)
        ax = axes[1, j]
        x = np.asarray(d["bin_centers"])
        ax.plot(x, d["log_ratio"], "o", ms=3, label="log p1/p0 (histograms)")
        if x.size:
            xs = np.linspace(x.min(), x.max(), 200)
            ax.plot(xs, mixture_llr(xs, d["q"]), "C3-", label="ℓ_mix(ℓ)")
        ax.set(xlabel="score ℓ", ylabel="log likelihood ratio", title=f"{name}: ℓ_mix (Eq. 22)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_epsilon_heatmap(table: pd.DataFrame, title: str = "ε_lower (max over canaries) vs ε_theory"):
    """Annotated heatmap of a ``table_epsilon`` (Table 2 / 4 analogue). Raises ValueError if the table is empty."""
    import seaborn as sns

    if table is None or table.empty:
        raise ValueError("the ε table is empty: no audit rows to plot")
    t = table.copy().rename(columns={"epsilon_theory": "ε_theory"})
    t.index = [" / ".join(map(str, i)) if isinstance(i, tuple) else str(i) for i in t.index]
    vmax = float(np.nanmax(t.to_numpy(dtype=float)))
    fig, ax = plt.subplots(figsize=(1.2 * t.shape[1] + 2.5, 0.6 * t.shape[0] + 1.8))
    sns.heatmap(t.astype(float), annot=True, fmt=".3f", cmap="viridis", vmin=0, vmax=vmax, ax=ax,
                cbar_kws={"label": "ε"})
    ax.set(title=title, xlabel="", ylabel="")
    _rotate(ax)
    fig.tight_layout()
    return fig


def plot_epsilon_by_canary(df: pd.DataFrame):
    """ε_lower of every canary per variant, one panel per (arm, bank), with ε_theory and the attack ceiling."""
    import seaborn as sns

    groups = list(df.groupby(["study_arm", "bank_source"], sort=True))
    n = max(1, len(groups))
    # a grid of at most two panels per row: one row of four panels was 2727 px wide with unreadable labels
    ncols = min(2, n)
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.2 * ncols, 4.0 * nrows + 0.6), squeeze=False, sharey=True)
    order = _order(df["variant"])
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, ((arm, bank), g) in zip(axes.flat, groups):
        if "epsilon_ceiling" in g.columns and g["epsilon_ceiling"].notna().any():
            ceil = g.groupby("variant")["epsilon_ceiling"].max().reindex(order)
            ax.bar(range(len(order)), ceil.to_numpy(dtype=float), color="0.85", width=0.6, zorder=0,
                   label="ceiling at 1/μ_eff (number: tightness)")
            if "tightness" in g.columns:
                best = g.loc[g.groupby("variant")["epsilon_lower"].idxmax()].set_index("variant").reindex(order)
                for i, (c, t) in enumerate(zip(ceil.to_numpy(dtype=float), best["tightness"].to_numpy(dtype=float))):
                    if np.isfinite(c) and np.isfinite(t):
                        # inside the bar's top: above it, the number ran into the ε_theory line
                        ax.text(i, c, f"{t:.2f}", ha="center", va="top", fontsize=8, color="0.25")
        sns.stripplot(g, x="variant", y="epsilon_lower", hue="variant", order=order, palette=variant_palette(order),
                      size=6, ax=ax, legend=False)
        ax.axhline(g["epsilon_theory"].max(), color="k", ls="--", lw=1, label="ε_theory")
        ax.set(title=f"{arm} arm / {bank}", xlabel="", ylabel="ε_lower (one dot per canary)")
        _rotate(ax, 35)
    top = axes.flat[0].get_ylim()[1]
    axes.flat[0].set_ylim(-0.03 * top, top)  # (shared) dots at ε_lower = 0 are drawn whole, not cut in half
    handles, labels = axes.flat[0].get_legend_handles_labels()
    per = _count_range(df.groupby(["study_arm", "bank_source", "variant"]).size())
    fig.suptitle(f"ε_lower of every canary ({per} per variant{_trials(df)})")
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.tight_layout(rect=(0, 0.06 if nrows == 1 else 0.035, 1, 1))
    return fig


def plot_sweep(df: pd.DataFrame, field: str, theory: tuple[Sequence[float], Sequence[float]] | None = None):
    """Fig. 1 analogue: ε_lower, the point estimate (Eq. 28) with its 95% band and ε_theory against ``field``
    (``"noise_multiplier"`` or ``"sample_rate"``, else ValueError); ``theory``: optional dense (x, ε_theory) curve."""
    if field not in ("noise_multiplier", "sample_rate"):
        raise ValueError(f"field={field!r} must be 'noise_multiplier' or 'sample_rate'")
    col = f"mech_{field}"
    fig, ax = plt.subplots(figsize=(8.6, 4.4))
    pal = variant_palette(sorted(set(df["variant"])))
    several = bool((df.groupby(["variant", col]).size() > 1).any())
    for k, (variant, raw) in enumerate(df.groupby("variant", sort=False)):
        keep = [c for c in (col, "epsilon_lower", "epsilon_point", "epsilon_ci_low", "epsilon_ci_high") if c in raw]
        g = raw[keep].groupby(col, as_index=False).max().sort_values(col)  # max over canaries at each setting
        c = pal[variant]
        if several:  # every canary, behind the max
            ax.plot(raw[col], raw["epsilon_lower"], ".", color=c, ms=5, alpha=0.45, zorder=1)
        if {"epsilon_ci_low", "epsilon_ci_high"} <= set(g.columns):
            ax.fill_between(g[col], g["epsilon_ci_low"], g["epsilon_ci_high"], color=c, alpha=0.2, lw=0)
        if "epsilon_point" in g.columns:
            ax.plot(g[col], g["epsilon_point"], "-", color=c, lw=1, alpha=0.8)
        # one marker shape and size per variant, unclipped: coinciding points (often at ε = 0) stay visible
        ax.plot(g[col], g["epsilon_lower"], "osD^v"[k % 5], color=c, ms=max(3.0, 7 - 1.5 * k), clip_on=False,
                zorder=3, label=f"{variant}: ε_lower" + (" (max; small dots: each canary)" if several else ""))
    if theory is None:
        t = df.groupby(col)["epsilon_theory"].max().sort_index()
        theory = (t.index, t.values)
    ax.plot(theory[0], theory[1], "k--", lw=1.2, label="ε_theory")
    sigma = field == "noise_multiplier"
    ax.set_xlabel("noise multiplier σ" if sigma else "sampling rate q")
    if not sigma:
        ax.set_xscale("log")
        _ticks_at(ax.xaxis, df[col], "{x:g}")
    ax.set_ylabel("ε")
    ax.set_ylim(bottom=0)
    fixed = []
    other, other_name = ("mech_sample_rate", "q") if sigma else ("mech_noise_multiplier", "σ")
    if other in df.columns and df[other].nunique() == 1:
        fixed.append(f"{other_name} = {float(df[other].iloc[0]):g}")
    if "trials" in df.columns:
        fixed.append(f"{int(df['trials'].max()):,} trials per hypothesis")
    n_can = df.groupby(["variant", col]).size().max()
    fixed.append(f"{n_can} canar{'y' if n_can == 1 else 'ies'} per variant")
    ax.set_title(f"ε vs {'σ' if sigma else 'q'} ({', '.join(fixed)})", fontsize=9)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles, _ = ax.get_legend_handles_labels()  # each variant's ε_lower marker, then ε_theory
    extra = [Line2D([], [], color="0.3", lw=1, label="point estimate: Eq. 28 at observed rates"),
             Patch(color="0.3", alpha=0.2, lw=0, label="95% band of the point estimate")]
    if several:
        extra.append(Line2D([], [], ls="", marker=".", color="0.3", alpha=0.45, label="each canary's ε_lower"))
    ax.legend(handles=handles + extra, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.text(0.01, 0.01, "ε_lower is the band's lower end at the audit's γ and must stay below ε_theory; the band "
             "rising above ε_theory is no violation.", fontsize=7, ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def plot_encoder_ablation(df: pd.DataFrame):
    """Table 3 analogue: per variant, one bar per encoder (max ε_lower over canaries) and a dot per canary.
    Raises ValueError with ``pe_kit.text.models.encoder_ablation_note`` when fewer than two encoders are in ``df``."""
    import seaborn as sns

    from pe_kit.text.models import encoder_ablation_note

    models = list(dict.fromkeys(df["study_model"].astype(str))) if "study_model" in df.columns else []
    note = encoder_ablation_note(models)
    if note is not None:
        raise ValueError(note)
    t = df.groupby(["variant", "study_model"], as_index=False)["epsilon_lower"].max()
    order = _order(t["variant"])
    fig, ax = plt.subplots(figsize=(max(6.0, 1.8 * len(order) + 3), 4.0))
    sns.barplot(t, x="variant", y="epsilon_lower", hue="study_model", hue_order=models, order=order, ax=ax, alpha=0.6)
    sns.stripplot(df, x="variant", y="epsilon_lower", hue="study_model", hue_order=models, order=order, dodge=True,
                  palette=["k"] * len(models), size=4, ax=ax, legend=False)
    if "epsilon_theory" in df.columns:
        ax.axhline(df["epsilon_theory"].max(), color="k", ls="--", lw=1, label="ε_theory")
    ax.set(ylabel="ε_lower", xlabel="")
    ax.set_title(f"Encoder ablation (Table 3 analogue): bar = max over canaries, dots = each canary{_trials(df)}",
                 fontsize=10)
    _rotate(ax)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def plot_tightness(df: pd.DataFrame):
    """ε_lower against trials per hypothesis (log scale), with the Gaussian-model expectation and ε_theory."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, (variant, g) in enumerate(df.groupby("variant", sort=False) if "variant" in df else [("", df)]):
        g = g.sort_values("trials")
        ax.semilogx(g["trials"], g["epsilon_lower"], "o-", color=f"C{i}", label=f"{variant} ε_lower", clip_on=False,
                    zorder=3)
        if "epsilon_expected" in g:
            ax.semilogx(g["trials"], g["epsilon_expected"], ":", color=f"C{i}",
                        label=f"{variant} expected (Gaussian model)")
    if "epsilon_theory" in df:
        ax.axhline(df["epsilon_theory"].max(), color="k", ls="--", lw=1, label="ε_theory")
    ax.set_xlabel("trials per hypothesis")
    _ticks_at(ax.xaxis, df["trials"], "{x:,.0f}")
    ax.set(ylabel="ε", ylim=(0, None))
    one_mu = "mu_eff" in df.columns and df["mu_eff"].nunique() == 1
    mu = f" (μ_eff = {float(df['mu_eff'].iloc[0]):.3f})" if one_mu else ""
    ax.set_title(f"ε_lower of one canary{mu} as the trial budget grows", fontsize=10)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig
