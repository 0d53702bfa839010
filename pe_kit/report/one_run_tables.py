"""Notebook 08's tables in results.md: the published-value checks of both bounds (their idealised game), the one-run
audits of one PE release beside the multi-trial audit, and the one-run bounds on the idealised game summarised over
repeats.

Rows come from ``pe_kit.audit.one_run_checks.published_checks`` (experiment ``one_run_published``) and
``pe_kit.study.one_run`` (``one_run_rows``, ``multi_trial_row``, ``idealised_rows``): ε_lower of
Steinke et al. (2023) and ε_lower / μ_lower of the f-DP audit (Mahloujifar et al., ICML 2025) with the attaining
(k₊, k₋) and their counts. ``pe_kit.report.results.summary_markdown`` renders them (counts print as integers).
"""
from __future__ import annotations

import pandas as pd

__all__ = ["published_table", "one_run_table", "idealised_table", "ALWAYS", "PUBLISHED_TITLE"]

#: notebook 08's two bounds: shown even when one of them is empty (μ_lower is NaN for Steinke et al.'s rows)
ALWAYS = ("epsilon_lower", "mu_lower")
_COLUMNS = ("mech_sample_rate", "variant", "method", "m", "probe_share", "mu_eff", "k_plus", "k_minus", "correct",
            "guesses", "epsilon_lower", "mu_lower", "epsilon_theory", "trials", "releases", "seconds")

_PUBLISHED = ("table", "method", "setting", "published", "reproduced", "tolerance", "within", "note")

#: results.md's title of ``published_table``: what is and is not reproduced, and how to read ``within``
PUBLISHED_TITLE = (
    "One-run bounds against their published values (notebook 08, before anything PE-specific): Mahloujifar, Melis & "
    "Chaudhuri (ICML 2025), App. B's correct guesses c and Table 1's ε (theory, Steinke et al., f-DP) on their "
    "idealised Gaussian game. `within`: |published − reproduced| ≤ tolerance, the Monte-Carlo spread at this run's "
    "number of games (see `note`; the source used 100). At 100 games c, the theoretical ε and Steinke et al.'s "
    "column reproduce (σ = 0.5: 0.11 short) and the f-DP column does not (the kit is 0.1–0.9 lower; the settings "
    "tried are in notebook 08 and `pe_kit.audit.one_run_checks`); with fewer games the tolerance is wider and an "
    "f-DP row can read `within` = True")


def published_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The published-value checks of notebook 08 (experiment ``one_run_published``, rows of ``published_checks``).

    Args:
        rows: DataFrame of those rows (``source``, ``method``, ``setting``, ``published``, ``reproduced``,
            ``tolerance``, ``within``, ``note``).

    Returns:
        DataFrame with ``table`` (the part of the source: "App. B" or "Table 1", from ``source``) and the other
        columns of ``_PUBLISHED`` that exist, in the order published_checks wrote them.
    """
    rows = rows.copy()
    if "source" in rows.columns:
        rows["table"] = rows["source"].astype(str).str.rsplit(", ", n=1).str[-1]
    return rows[[c for c in _PUBLISHED if c in rows.columns]]


def one_run_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The one-run rows (experiment ``one_run``) and the multi-trial row (``multi_trial``) of notebook 08.

    Args:
        rows: DataFrame of those rows (as read back from ``results.csv``).

    Returns:
        DataFrame with the columns of ``_COLUMNS`` that hold a value (``epsilon_lower`` and ``mu_lower`` always),
        sorted by sampling rate q (largest first), variant, then the one-run rows by m and method before the
        multi-trial row of the same q and variant.
    """
    cols = [c for c in _COLUMNS if c in rows.columns and (rows[c].notna().any() or c in ALWAYS)]
    rows = rows.copy()  # a slice of the wide results.csv frame is fragmented: assign() on it warns
    rows["_multi"] = rows["experiment"] == "multi_trial"
    order = [c for c in ("mech_sample_rate", "variant", "_multi", "m", "method") if c in rows.columns]
    return rows.sort_values(order, ascending=[c != "mech_sample_rate" for c in order], kind="stable")[cols]


def idealised_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The idealised-game rows (experiment ``one_run_idealised``) summarised over repeats per (q, m, method).

    Args:
        rows: DataFrame of those rows.

    Returns:
        DataFrame: ``mech_sample_rate, m, method, repeats`` (int), ``epsilon_lower_median / _min / _max``,
        ``mu_lower_median`` and ``epsilon_theory`` (one value per q), q largest first.
    """
    keys = [c for c in ("mech_sample_rate", "m", "method") if c in rows.columns]
    spec = {"repeats": ("epsilon_lower", "size"), "epsilon_lower_median": ("epsilon_lower", "median"),
            "epsilon_lower_min": ("epsilon_lower", "min"), "epsilon_lower_max": ("epsilon_lower", "max")}
    if "mu_lower" in rows.columns:
        spec["mu_lower_median"] = ("mu_lower", "median")
    if "epsilon_theory" in rows.columns:
        spec["epsilon_theory"] = ("epsilon_theory", "max")
    agg = rows.groupby(keys, sort=True).agg(**spec).reset_index()
    if "mech_sample_rate" in agg.columns:
        agg = agg.sort_values(keys, ascending=[k != "mech_sample_rate" for k in keys], kind="stable")
    return agg
