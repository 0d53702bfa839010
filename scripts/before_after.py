"""A committed reference run before and after a change (e.g. of the threshold rule), one row per arm × bank ×
variant of notebook 04's audit: max ε_lower over the canaries (the paper's statistic), median, min, and the mean
calibration − test gap (calibration ε minus test ε_lower, averaged over the canaries: the winner's curse the
threshold rule is meant to remove), with the paper's Table 2 / Table 4 value beside the max where one exists.

Used for docs/threshold_rules.md and docs/paper_run/README.md; ``git show REV:docs/paper_run/PART/results.csv`` gives
the "before" table of a part from the history.
"""
from __future__ import annotations

import io
from typing import Sequence

import pandas as pd

from pe_kit.report.paper_compare import paper_value

__all__ = ["AUDIT_NOTEBOOK", "KEYS", "per_variant", "before_after", "before_after_markdown", "read_results"]

#: the notebook whose rows hold the per-canary audit (Table 2 / Table 4 analogue)
AUDIT_NOTEBOOK = "04_audit"
#: one row of the before/after table per these columns of results.csv
KEYS = ("study_arm", "study_bank", "variant")


def read_results(source) -> pd.DataFrame:
    """A results.csv as a DataFrame from a path, an open file or its text (``git show`` output).

    Raises:
        ValueError: the table has none of notebook 04's audit rows, or lacks a column of :data:`KEYS`,
            ``epsilon_lower`` or ``calibration_epsilon`` (it is not a ``pe-kit reproduce`` results.csv).
    """
    if isinstance(source, str) and "\n" in source:
        source = io.StringIO(source)
    table = pd.read_csv(source, low_memory=False)
    missing = [c for c in (*KEYS, "notebook", "epsilon_lower", "calibration_epsilon") if c not in table.columns]
    if missing:
        raise ValueError(f"results table lacks the column(s) {missing}: pass a results.csv written by pe-kit reproduce")
    return table


def per_variant(results: pd.DataFrame, notebook: str = AUDIT_NOTEBOOK) -> pd.DataFrame:
    """Per arm × bank × variant: ``max``, ``median``, ``min`` of ε_lower, ``gap`` (mean calibration ε − test
    ε_lower), ``canaries`` (rows), and ``rule`` (the calibration rule(s) recorded, ``;``-joined).

    Args:
        results: a results.csv table (``read_results``). notebook: the notebook whose rows are used.

    Raises:
        ValueError: no row of ``notebook`` has an ε_lower.
    """
    rows = results[(results["notebook"] == notebook) & results["epsilon_lower"].notna()].copy()
    if rows.empty:
        raise ValueError(f"no {notebook} rows with an epsilon_lower: is this the results.csv of a part that ran it?")
    rows = rows.assign(_gap=rows["calibration_epsilon"].astype(float) - rows["epsilon_lower"].astype(float))
    rule_col = "calibration_rule" if "calibration_rule" in rows.columns else None
    out = []
    for key, g in rows.groupby(list(KEYS), sort=False):
        eps = g["epsilon_lower"].astype(float)
        rule = ";".join(sorted({str(r) for r in g[rule_col].dropna()})) if rule_col else ""
        out.append({**dict(zip(KEYS, key)), "max": eps.max(), "median": eps.median(), "min": eps.min(),
                    "gap": g["_gap"].mean(), "canaries": len(g), "rule": rule or "argmax"})
    return pd.DataFrame(out)


def before_after(before: pd.DataFrame, after: pd.DataFrame, notebook: str = AUDIT_NOTEBOOK) -> pd.DataFrame:
    """:func:`per_variant` of both runs side by side (suffixes ``_before``, ``_after``), rows by arm and bank in the
    order they first appear and variants in Table 1's order; a variant present in one run only keeps NaN on the
    other side.

    Args:
        before, after: results.csv tables (``read_results``).
    """
    from pe_kit.attack.variants import ALL_VARIANTS

    a, b = per_variant(before, notebook), per_variant(after, notebook)
    t = b.merge(a, on=list(KEYS), how="outer", suffixes=("_after", "_before"), sort=False)
    order = {v: i for i, v in enumerate(ALL_VARIANTS)}
    arms = {x: i for i, x in enumerate(dict.fromkeys(t["study_arm"]))}
    banks = {x: i for i, x in enumerate(dict.fromkeys(t["study_bank"]))}
    rank = t.apply(lambda r: (arms[r["study_arm"]], banks[r["study_bank"]], order.get(r["variant"], len(order))), axis=1)
    return t.iloc[sorted(range(len(t)), key=lambda i: rank.iloc[i])].reset_index(drop=True)


def _fmt(x, signed: bool = False) -> str:
    if pd.isna(x):
        return "–"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def before_after_markdown(before: pd.DataFrame, after: pd.DataFrame, labels: Sequence[str] = ("argmax", "gaussian"),
                          notebook: str = AUDIT_NOTEBOOK, paper: bool = False) -> str:
    """The before/after table as markdown: ``max``, ``median``, ``min`` and the mean calibration − test gap, each
    as "before → after"; with ``paper=True`` a column with the paper's max (Table 2 for ``bankA``; for another bank
    Table 4's bank-B value as ``paper_compare.paper_value`` maps it, the nearest published arm, marked "(paper's bank
    B)" beside ``public``, which is not that bank; ``–`` where the paper has none).

    Args:
        before, after: results.csv tables. labels: the two runs' names in the header.
    """
    t = before_after(before, after, notebook)
    lb, la = labels
    head = ["arm", "bank", "variant", f"max {lb} → {la}", "median", "min", "mean calibration − test gap"]
    if paper:
        head.append("paper (max)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in t.iterrows():
        cells = [str(r["study_arm"]), str(r["study_bank"]), str(r["variant"])]
        cells += [f"{_fmt(r[f'{s}_before'])} → {_fmt(r[f'{s}_after'])}" for s in ("max", "median", "min")]
        cells.append(f"{_fmt(r['gap_before'], True)} → {_fmt(r['gap_after'], True)}")
        if paper:
            table = "2" if r["study_bank"] == "bankA" else "4"
            value = paper_value(table, r["study_arm"], r["study_bank"], r["variant"])
            other = r["study_bank"] == "public" and value is not None
            cells.append(_fmt(value) + (" (paper's bank B)" if other else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
