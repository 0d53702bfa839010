"""Tables of audit results: ε_lower with Clopper–Pearson intervals, max / median / range over canaries (Table 2 /
Table 4 analogues), the population-shift check, truncation counts, and notebook 08's one-run tables.
``pe_kit.report.results`` re-exports them.
"""
from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

from pe_kit.audit.confusion import _log_ratio, clopper_pearson, epsilon_lower_from_counts

__all__ = ["markdown_table", "epsilon_interval", "add_epsilon_interval", "table_epsilon", "table_epsilon_spread",
           "spread_cells", "dropped_note", "population_shift_table", "SHIFT_COLUMNS", "SHIFT_ROWS_SHOWN",
           "truncation_table", "published_table", "one_run_table", "idealised_table", "PUBLISHED_TITLE",
           "ONE_RUN_TITLE", "IDEALISED_TITLE"]

_COUNT_COL = re.compile(r"(^|_)(trials|canaries|truncated|total|token_cap|coords|voters|users|seed|round|"
                        r"releases|participants|true_pos|false_pos|n_h1|n_h0|n_[a-z_]+|record_cap|bank_size|"
                        r"max_probes|top_k|rows|slot|index|m|k_plus|k_minus|guesses|correct|repeats?|copies)$")


def _fmt(v: Any, floatfmt: str = ".3f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, (float, np.floating)):
        return format(float(v), floatfmt)
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_table(df: pd.DataFrame, floatfmt: str = ".3f", index: bool = False) -> str:
    """DataFrame as a GitHub-flavoured markdown table (``index``: include the index); ``"(no rows)\\n"`` when empty."""
    if df is None or df.empty:
        return "(no rows)\n"
    d = df.reset_index() if index else df
    cols = [str(c) for c in d.columns]
    # count columns read back from CSV as floats (NaN elsewhere) print as integers
    whole = [bool(_COUNT_COL.search(str(c))) and pd.api.types.is_float_dtype(d[c])
             and bool((d[c].dropna() % 1 == 0).all()) for c in d.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in d.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(int(v) if w and isinstance(v, float) and not math.isnan(v) else v, floatfmt)
                                       for v, w in zip(row, whole)) + " |")
    return "\n".join(lines) + "\n"


def epsilon_interval(true_pos, false_pos, n_h1, n_h0, delta: float, level: float = 0.95):
    """(lower, point, upper) ε ≥ 0 of a frozen threshold test: Eq. 28 with Clopper–Pearson bounds at γ = (1 − level)/4
    (lower), at the empirical rates (point), with every bound flipped (upper). Raises ValueError for level ∉ (0, 1)."""
    if not 0 < level < 1:
        raise ValueError(f"level={level} must lie in (0, 1), e.g. 0.95")
    g = (1 - level) / 4
    tp, fp = np.asarray(true_pos, float), np.asarray(false_pos, float)
    n1, n0 = np.asarray(n_h1, float), np.asarray(n_h0, float)
    lo, _ = epsilon_lower_from_counts(tp, fp, n1, n0, g, delta)

    def _branch(num, den):  # log(num / den) of one branch of Eq. 28; +inf for den = 0, -inf for num ≤ 0
        return np.where((num > 0) & (den <= 0), np.inf, _log_ratio(num, den))

    def _eps(tpr, fpr, tnr, fnr):
        return np.maximum(0.0, np.maximum(_branch(tpr - delta, fpr), _branch(tnr - delta, fnr)))

    point = _eps(tp / n1, fp / n0, (n0 - fp) / n0, (n1 - tp) / n1)
    hi = _eps(clopper_pearson(tp, n1, g, "upper"), clopper_pearson(fp, n0, g, "lower"),
              clopper_pearson(n0 - fp, n0, g, "upper"), clopper_pearson(n1 - tp, n1, g, "lower"))
    conv = (lambda a: float(a)) if np.ndim(point) == 0 else (lambda a: np.asarray(a, float))
    return conv(lo), conv(point), conv(hi)


def add_epsilon_interval(df: pd.DataFrame) -> pd.DataFrame:
    """A copy with the 95 % :func:`epsilon_interval` (``epsilon_ci_low``, ``epsilon_point``, ``epsilon_ci_high``) of
    the ``test_*`` counts and ``audit_delta``. Raises ValueError naming a missing column."""
    need = ["test_true_pos", "test_false_pos", "test_n_h1", "test_n_h0", "audit_delta"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ValueError(f"add_epsilon_interval needs columns {missing}; pass rows from "
                         "pe_kit.study.world.audit_design")
    out = df.copy()
    out["epsilon_ci_low"], out["epsilon_point"], out["epsilon_ci_high"] = epsilon_interval(
        *(out[c].to_numpy(float) for c in need[:4]), out["audit_delta"].to_numpy(float))
    return out


def _table_rows(df: pd.DataFrame, index: list) -> tuple[pd.DataFrame, list, dict]:
    """The rows a variant table can place, the variants in order, and the count per reason (``missing_<column>``,
    ``unknown_variant``) of rows it cannot place, with a warning."""
    import warnings

    from pe_kit.attack.variants import ALL_VARIANTS

    reasons = {f"missing_{c}": df[c].isna() if c in df.columns else pd.Series(True, index=df.index)
               for c in [*index, "epsilon_lower"]}
    reasons["unknown_variant"] = ~df["variant"].isin(ALL_VARIANTS)
    dropped: dict[str, int] = {}
    keep = pd.Series(True, index=df.index)
    for reason, out in reasons.items():
        n = int((out & keep).sum())
        if n:
            dropped[reason] = n
        keep &= ~out
    if dropped:
        warnings.warn(f"{sum(dropped.values())} of {len(df)} audit rows have no table cell and are left out: "
                      + ", ".join(f"{k}={v}" for k, v in dropped.items()), stacklevel=3)
    kept = df[keep]
    order = [v for v in ALL_VARIANTS if v in set(kept["variant"])]
    return kept, order, dropped


def dropped_note(table: pd.DataFrame) -> str:
    """One sentence naming the rows a variant table left out (``table.attrs["dropped_rows"]``), or ``""``."""
    dropped = table.attrs.get("dropped_rows") or {}
    if not dropped:
        return ""
    return (f"{sum(dropped.values())} audit row(s) are not in this table: "
            + ", ".join(f"{v} with {k.replace('_', ' ')}" for k, v in dropped.items()) + ".")


def pool_generator_note(df: pd.DataFrame) -> str:
    """One sentence naming the generators of the paraphrase variants' pools, e.g. ``"Paraphrase pools: paraphrase 5 ×
    smollm2 (shipped)."``; ``""`` without such rows."""
    if "pool_generator" not in df.columns or "variant" not in df.columns:
        return ""
    rows = df[df["variant"].astype(str).str.startswith("paraphrase") & df["pool_generator"].notna()]
    if rows.empty:
        return ""
    source = rows["pool_source"] if "pool_source" in rows.columns else pd.Series("", index=rows.index)
    label = rows["pool_generator"].astype(str) + np.where(source.astype(str) == "shipped", " (shipped)", "")
    parts = [f"{variant} " + ", ".join(f"{n} × {g}" for g, n in labels.value_counts(sort=False).items())
             for variant, labels in label.groupby(rows["variant"], sort=False)]
    return "Paraphrase pools: " + "; ".join(parts) + "."


def table_epsilon(df: pd.DataFrame) -> pd.DataFrame:
    """Table 2 / 4 analogue: max ε_lower over canaries per (arm, bank) × variant, plus ``epsilon_theory``; rows
    fitting no cell are counted in ``attrs["dropped_rows"]`` with a ``UserWarning``."""
    return _variant_table(df, lambda g: g.max())


def table_epsilon_spread(df: pd.DataFrame) -> pd.DataFrame:
    """:func:`table_epsilon` with :func:`spread_cells` ("max / median (min–max)") for cells."""
    return _variant_table(df, spread_cells, lambda theory: theory.map("{:.3f}".format))


def _variant_table(df: pd.DataFrame, cells, theory=lambda s: s) -> pd.DataFrame:
    """``cells`` of each (arm, bank, variant) group of ε_lower, variants in Table 1's order, ``theory`` of the max
    ε_theory per row."""
    if df.empty:
        return pd.DataFrame()
    index = ["study_arm", "bank_source"]
    df, order, dropped = _table_rows(df, index)
    table = pd.DataFrame()
    if not df.empty:
        table = cells(df.groupby(index + ["variant"])["epsilon_lower"]).unstack("variant")
        table = table[[v for v in order if v in table.columns]]
        if "epsilon_theory" in df.columns:
            table["epsilon_theory"] = theory(df.groupby(index)["epsilon_theory"].max())
        table.columns.name = None
    table.attrs["dropped_rows"] = dropped
    return table


def spread_cells(grouped) -> pd.Series:
    """"max / median (min–max)" str cells of each group of a ``SeriesGroupBy``, e.g. ``"0.412 / 0.250 (0.10–0.41)"``."""
    return (grouped.max().map("{:.3f}".format) + " / " + grouped.median().map("{:.3f}".format) + " ("
            + grouped.min().map("{:.2f}".format) + "–" + grouped.max().map("{:.2f}".format) + ")")


#: Columns ``pe_kit.audit.bounds.population_shift`` puts on every audit row (rates, unitless).
SHIFT_COLUMNS = ("fpr_calibration", "fpr_calibration_lower", "fpr_calibration_upper", "fpr_test", "fpr_test_lower",
                 "fpr_test_upper", "population_shift")


def population_shift_table(df: pd.DataFrame, flagged_only: bool = False) -> pd.DataFrame:
    """Per canary (flagged first; ``flagged_only`` keeps those): its frozen threshold's FPR on calibration and test
    with intervals (``"1.20e-04 [9.1e-05, 1.6e-04]"``), ``epsilon_calibration``, ``epsilon_lower`` and the flag of
    ``pe_kit.audit.bounds.population_shift``; ``attrs``: ``checked``, ``flagged``. Empty without the check."""
    if df is None or df.empty or not set(SHIFT_COLUMNS) <= set(df.columns):
        out = pd.DataFrame()
        out.attrs.update(checked=0, flagged=0)
        return out
    d = df[df["population_shift"].notna()].copy()
    d["population_shift"] = d["population_shift"].astype(str).str.lower().isin(("true", "1", "1.0"))
    keys = [c for c in ("study_arm", "bank_source", "variant", "canary_id") if c in d.columns]
    out = d[keys].copy()
    for split in ("calibration", "test"):
        out[f"fpr_{split}"] = [f"{a:.2e} [{lo:.1e}, {hi:.1e}]" for a, lo, hi in
                               zip(d[f"fpr_{split}"], d[f"fpr_{split}_lower"], d[f"fpr_{split}_upper"])]
    for col, src in (("epsilon_calibration", "calibration_epsilon"), ("epsilon_lower", "epsilon_lower")):
        if src in d.columns:
            out[col] = d[src]
    out["population_shift"] = d["population_shift"]
    checked, flagged = len(out), int(out["population_shift"].sum())
    if flagged_only:
        out = out[out["population_shift"]]
    out = out.sort_values("population_shift", ascending=False, kind="stable").reset_index(drop=True)
    out.attrs.update(checked=checked, flagged=flagged)
    return out


#: results.md lists every canary's population-shift check up to this many canaries, else the flagged ones only.
SHIFT_ROWS_SHOWN = 60


_TRUNC_KEYS = ("study_arm", "study_bank", "study_model", "token_cap")
_TRUNC_COUNTS = ("records_truncated", "records_total", "bank_truncated", "bank_total")


def truncation_table(df: pd.DataFrame) -> pd.DataFrame:
    """Truncation counts per distinct world (arm, bank, encoder, token cap); empty without counts."""
    if df is None or df.empty or "token_cap" not in df.columns:
        return pd.DataFrame()
    cols = [c for c in (*_TRUNC_KEYS, *_TRUNC_COUNTS) if c in df.columns]
    out = df.loc[df["token_cap"].notna(), cols].drop_duplicates()
    keys = [c for c in _TRUNC_KEYS[:3] if c in out.columns]
    counts = [c for c in ("token_cap", *_TRUNC_COUNTS) if c in out.columns]
    if keys:  # rows without the world's names (e.g. notebook 03's checks) repeat a named world's counts
        anon = out[keys].isna().all(axis=1)
        named = set(map(tuple, out.loc[~anon, counts].itertuples(index=False)))
        out = out[~anon | ~pd.Series([tuple(r) in named for r in out[counts].itertuples(index=False)], index=out.index)]
    out = out.reset_index(drop=True)
    if "records_truncated" in out and "records_total" in out:
        out["records_truncated_share"] = out["records_truncated"] / out["records_total"].where(out["records_total"] > 0)
    return out


#: notebook 08's two bounds, shown even when empty (μ_lower is NaN for Steinke et al.'s rows)
ALWAYS = ("epsilon_lower", "mu_lower")
_COLUMNS = ("mech_sample_rate", "variant", "method", "m", "probe_share", "mu_eff", "k_plus", "k_minus", "correct",
            "guesses", "epsilon_lower", "mu_lower", "epsilon_theory", "trials", "releases", "seconds")

_PUBLISHED = ("table", "method", "setting", "published", "reproduced", "tolerance", "within", "note")

#: results.md's titles of notebook 08's tables
PUBLISHED_TITLE = (
    "One-run bounds against their published values (notebook 08, before anything PE-specific): Mahloujifar, Melis & "
    "Chaudhuri (ICML 2025), App. B's correct guesses c and Table 1's ε (theory, Steinke et al., f-DP) on their "
    "idealised Gaussian game. `within`: |published − reproduced| ≤ tolerance, the Monte-Carlo spread at this run's "
    "number of games (see `note`; the source used 100). At 100 games c, the theoretical ε and Steinke et al.'s "
    "column reproduce (σ = 0.5: 0.11 short) and the f-DP column does not (the kit is 0.1–0.9 lower; the settings "
    "tried are in notebook 08 and `notebooks/steps/one_run_checks.py`); with fewer games the tolerance is wider and an "
    "f-DP row can read `within` = True")
ONE_RUN_TITLE = (
    "One-run audits of one PE release (notebook 08): ε_lower (Steinke et al.) and μ_lower / ε_lower (f-DP) per "
    "sampling rate, variant and number of canaries m, beside the kit's multi-trial audit on the same bank (method "
    "multi_trial: m = 1 canary, `trials` per hypothesis, `releases` = 4·trials for the calibration and test splits "
    "under H0 and H1). `probe_share`: the share of the bank's p coordinates the m canaries' blocks take; `mu_eff`: "
    "median per-canary μ_eff (ceiling 1/σ); (`k_plus`, `k_minus`): the best pair of \"in\"/\"out\" guesses, with its "
    "`correct` of `guesses` (when ε_lower = 0, the first pair searched, (1, 0)); `seconds`: wall time of routing, "
    "release, scoring and bounds")
IDEALISED_TITLE = ("One-run audits on the idealised game (notebook 08: no PE, per-canary Gaussian LLR at μ = 1/σ): "
                   "median (min, max) over repeats")


def published_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Notebook 08's ``one_run_published`` rows with ``table`` ("App. B" or "Table 1") and ``_PUBLISHED`` columns."""
    rows = rows.copy()
    if "source" in rows.columns:
        rows["table"] = rows["source"].astype(str).str.rsplit(", ", n=1).str[-1]
    return rows[[c for c in _PUBLISHED if c in rows.columns]]


def one_run_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Notebook 08's ``one_run`` and ``multi_trial`` rows: the ``_COLUMNS`` holding a value, sorted by q (largest
    first), variant, then m and method, the multi-trial row last."""
    cols = [c for c in _COLUMNS if c in rows.columns and (rows[c].notna().any() or c in ALWAYS)]
    rows = rows.copy()  # a slice of the wide results.csv frame is fragmented: assign() on it warns
    rows["_multi"] = rows["experiment"] == "multi_trial"
    order = [c for c in ("mech_sample_rate", "variant", "_multi", "m", "method") if c in rows.columns]
    return rows.sort_values(order, ascending=[c != "mech_sample_rate" for c in order], kind="stable")[cols]


def idealised_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Notebook 08's ``one_run_idealised`` rows summarised over repeats per (q, m, method), q largest first."""
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
