"""Notebook 08's figure: one-run ε_lower against the number of canaries m, one panel per sampling rate q, beside the
kit's multi-trial ε_lower and ε_theory.

Rows come from ``pe_kit.study.one_run.one_run_study`` (experiments ``one_run`` and ``multi_trial``). The bounds are
Steinke et al. (2023) and the f-DP bound of Mahloujifar, Melis & Chaudhuri (ICML 2025); the multi-trial value is the
kit's calibrated-threshold audit (Eq. 28) of one canary of the same bank.
"""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import pandas as pd

__all__ = ["plot_epsilon_vs_m"]


def plot_epsilon_vs_m(df: pd.DataFrame, qs: Sequence[float] | None = None):
    """ε_lower of each (variant, bound) against m (log axis), one panel per q, with ε_theory (dashed) and the
    multi-trial ε_lower (dotted) of the same q.

    Args:
        df: rows with ``mech_sample_rate``, ``experiment`` (``one_run`` / ``multi_trial``), ``variant``, ``method``,
            ``m``, ``epsilon_lower``, ``epsilon_theory`` and, on the multi-trial rows, ``releases``.
        qs: the panels' sampling rates, in order (default: every q of the rows, largest first).

    Returns:
        matplotlib Figure; the legend sits below the panels (inside, it covered ε_theory).

    Raises:
        ValueError: no one-run rows, or a q in ``qs`` without a multi-trial row (the message names the q).
    """
    runs = df[df["experiment"] == "one_run"]
    if runs.empty:
        raise ValueError("no one-run rows (experiment 'one_run'); pass the rows of pe_kit.study.one_run.one_run_study")
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
