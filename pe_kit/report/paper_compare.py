"""The audit's answer beside the paper's: ε_lower per variant next to Table 2 (§4: bank A, five canaries, 10⁶
trials, σ = 1, q = 0.1, δ = 10⁻⁵, ε_theory = 1.695) and Table 4 (App. C: banks A and B), and which of the paper's
orderings hold. The kit's ``public`` bank is not the paper's bank B, only the nearest published arm.
"""
from __future__ import annotations

from typing import Mapping

import pandas as pd

from pe_kit.attack.variants import BEYOND_PAPER_VARIANTS
from pe_kit.report.tables import _fmt, markdown_table

__all__ = ["PAPER_MECHANISM", "mechanism_words", "PAPER_TABLE2", "PAPER_TABLE4", "ARM_DATASET", "BANK_LETTER",
           "BANK_LABEL", "paper_value", "comparison_table", "orderings", "orderings_line", "comparison_markdown",
           "format_count", "NATURAL_ORDER", "variant_order"]

#: the mechanism of the paper's Tables 2 and 4 (§4): only rows audited at it are shown beside the paper's values
PAPER_MECHANISM = {"mech_top_k": 5, "mech_clip_norm": 0.1, "mech_noise_multiplier": 1.0, "mech_sample_rate": 0.1}


def mechanism_words(row: Mapping) -> str:
    """A results row's mechanism in words when it is not the paper's (and whether C never binds, Eqs. 1, 20); ``""``
    for the paper's or without ``mech_*``."""
    got = {k: row.get(k) for k in PAPER_MECHANISM}
    if any(v is None or pd.isna(v) for v in got.values()) or all(
            abs(float(got[k]) - v) < 1e-12 for k, v in PAPER_MECHANISM.items()):
        return ""
    k, c, sigma, q = (float(got[n]) for n in PAPER_MECHANISM)
    words = (f"Mechanism k = {k:g}, C = {c:g}, σ = {sigma:g}, q = {q:g} is not the paper's (k = 5, C = 0.1, σ = 1, "
             "q = 0.1), so the paper's Table 2 and Table 4 values are not shown beside it.")
    if k ** -0.5 <= c:
        words += (f" C never binds: a user's vote vector has norm at most 1/√k = {k ** -0.5:.3f} ≤ C = {c:g}, so no "
                  f"contribution is clipped and every canary's μ_eff is at most 1/(√k·σ·C) = "
                  f"{1 / (k ** 0.5 * sigma * c):.3f} (not 1/σ): ε_lower stays near 0 by construction, whatever the "
                  "canary.")
    return words


#: Table 2 of the paper (label-only bank A, max over five canaries, 10⁶ trials; ε_theory = 1.695).
PAPER_TABLE2 = {
    "Yelp": {"ordinary": 0.268, "exact": 0.371, "paraphrase": 0.276, "paraphrase-norm": 0.316,
             "paraphrase-mu_eff": 0.560, "nonce": 1.049, "nonce-norm": 1.110, "nonce-mu_eff": 1.110},
    "Sentiment140": {"ordinary": 0.252, "exact": 0.363, "paraphrase": 0.599, "paraphrase-norm": 0.327,
                     "paraphrase-mu_eff": 0.682, "nonce": 1.052, "nonce-norm": 1.088, "nonce-mu_eff": 1.086},
}
#: Table 4 of the paper (App. C): the same for bank A and the in-distribution bank B.
PAPER_TABLE4 = {
    "Yelp A": {"ordinary": 0.247, "exact": 0.313, "paraphrase": 0.276, "paraphrase-norm": 0.316,
               "paraphrase-mu_eff": 0.560, "nonce": 1.038, "nonce-norm": 1.110, "nonce-mu_eff": 1.110},
    "Yelp B": {"ordinary": 0.295, "exact": 0.304, "paraphrase": 0.297, "paraphrase-norm": 0.457,
               "paraphrase-mu_eff": 0.439, "nonce": 1.047, "nonce-norm": 1.120, "nonce-mu_eff": 0.958},
    "Sentiment140 A": {"ordinary": 0.475, "exact": 0.363, "paraphrase": 0.599, "paraphrase-norm": 0.327,
                       "paraphrase-mu_eff": 0.682, "nonce": 1.018, "nonce-norm": 1.088, "nonce-mu_eff": 1.086},
    "Sentiment140 B": {"ordinary": 0.429, "exact": 0.587, "paraphrase": 0.759, "paraphrase-norm": 0.871,
                       "paraphrase-mu_eff": 0.932, "nonce": 1.014, "nonce-norm": 1.063, "nonce-mu_eff": 0.977},
}
#: the paper's dataset each data arm stands in for
ARM_DATASET = {"long": "Yelp", "short": "Sentiment140"}
#: the paper's bank each kit bank stands in for (Table 4)
BANK_LETTER = {"bankA": "A", "bankB": "B", "public": "B"}
#: how the kit's banks are named in tables
BANK_LABEL = {"bankA": "bank A (label-only SmolLM2 text)",
              "bankB": "bank B (SmolLM2 text from a label and three public posts)",
              "public": "public bank (other users' texts)"}
#: how each kit bank relates to the paper's bank it is compared with
BANK_NOTE = {"bankA": "bank A", "bankB": "bank B",
             "public": "nearest arm bank B, which is generated text, not real posts"}
#: the paper's Table 2 ordering of the natural variants and nonce (§4: ordinary < exact < paraphrase-μ_eff < nonce)
NATURAL_ORDER = ("ordinary", "exact", "paraphrase-mu_eff", "nonce")


def paper_value(table: str, arm: str, bank: str, variant: str) -> float | None:
    """The paper's ε_lower for a kit cell (``arm``, ``bank`` mapped by :data:`ARM_DATASET`, :data:`BANK_LETTER`) in
    ``table`` ``"2"`` or ``"4"``, or None without an analogue. Raises ValueError for another ``table``."""
    dataset, letter = ARM_DATASET.get(str(arm)), BANK_LETTER.get(str(bank))
    if str(table) == "2":
        return PAPER_TABLE2.get(dataset, {}).get(variant) if letter == "A" else None
    if str(table) == "4":
        return PAPER_TABLE4.get(f"{dataset} {letter}", {}).get(variant) if dataset and letter else None
    raise ValueError(f"table={table!r}: use '2' (paper Table 2) or '4' (paper Table 4)")


def variant_order(names) -> list[str]:
    """The distinct ``names`` in Table 1's order, then the others sorted (e.g. ``composed-mu_eff``)."""
    from pe_kit.attack.variants import VARIANTS

    names = set(names)
    return [v for v in VARIANTS if v in names] + sorted(n for n in names if n not in VARIANTS)


def comparison_table(t2: pd.DataFrame) -> pd.DataFrame:
    """One row per (arm, bank, variant) of notebook 04's ``table2`` rows: ε_lower over canaries (``max``, the paper's
    statistic, ``median``, ``min``) beside ``paper_table2`` / ``paper_table4`` (NaN without an analogue or at another
    mechanism, then ``mechanism_note`` says why), with sizes. Rows lacking a key or ε_lower are left out."""
    need = ("study_arm", "bank_source", "variant", "epsilon_lower")
    if t2 is None or t2.empty or not set(need) <= set(t2.columns):
        return pd.DataFrame()
    d = t2.dropna(subset=list(need))
    rows = []
    for (arm, bank), cell in d.groupby(["study_arm", "bank_source"], sort=False):
        for v in variant_order(cell["variant"].unique()):
            e = cell.loc[cell["variant"] == v]
            eps = e["epsilon_lower"].astype(float)
            words = mechanism_words(e.iloc[0].to_dict())
            rows.append({"arm": arm, "bank": bank, "variant": v, "canaries": int(len(e)), "max": eps.max(),
                         "median": eps.median(), "min": eps.min(),
                         "mu_eff_median": e["mu_eff"].median() if "mu_eff" in e else float("nan"),
                         "epsilon_theory": e["epsilon_theory"].max() if "epsilon_theory" in e else float("nan"),
                         "paper_table2": None if words else paper_value("2", arm, bank, v),
                         "paper_table4": None if words else paper_value("4", arm, bank, v), "mechanism_note": words,
                         **{out: (e[col].max() if col in e else float("nan"))
                            for out, col in (("trials", "trials"), ("n_test", "study_n_test"),
                                             ("n_calibration", "study_n_calibration"))}})
    if not rows:  # every row lacked an arm, bank, variant or ε_lower
        return pd.DataFrame()
    return pd.DataFrame(rows).astype({"paper_table2": float, "paper_table4": float})


def orderings(table: pd.DataFrame) -> list[dict]:
    """Which of the paper's orderings (§4, Table 2) hold per arm × bank cell of a :func:`comparison_table`: every
    ε_lower < ε_theory; nonce variants highest (max, median); :data:`NATURAL_ORDER` of the maxima. Returns dicts
    ``{"claim", "statistic", "cells", "held", "detail"}`` (``detail``: failing cells); claims no cell checks are left
    out."""
    if table is None or table.empty:
        return []
    from pe_kit.attack.variants import NONCE_VARIANTS

    claims = [("every ε_lower below ε_theory", "max"), ("nonce variants highest", "max"),
              ("nonce variants highest", "median"), ("ordinary < exact < paraphrase-μ_eff < nonce", "max")]
    result = {c: [0, 0, []] for c in claims}  # cells checked, cells held, cells failed
    for (arm, bank), cell in table.groupby(["arm", "bank"], sort=False):
        by = cell.set_index("variant")
        nonce, natural = by[by.index.isin(NONCE_VARIANTS)], by[~by.index.isin(NONCE_VARIANTS)]
        vals = [by.loc[v, "max"] for v in NATURAL_ORDER if v in by.index]
        checks = [bool((by["max"] < by["epsilon_theory"]).all()) if by["epsilon_theory"].notna().all() else None,
                  *(bool(nonce[stat].min() > natural[stat].max()) if len(nonce) and len(natural) else None
                    for stat in ("max", "median")),
                  all(a < b for a, b in zip(vals, vals[1:])) if len(vals) == len(NATURAL_ORDER) else None]
        for c, ok in zip(claims, checks):
            if ok is not None:
                result[c][0] += 1
                result[c][1] += int(ok)
                if not ok:
                    result[c][2].append(f"{arm}/{bank}")
    return [{"claim": c, "statistic": s, "cells": n, "held": h, "detail": ", ".join(f)}
            for (c, s), (n, h, f) in result.items() if n]


def orderings_line(found: list[Mapping]) -> str:
    """The orderings of :func:`orderings` in one line, e.g. ``"… every ε_lower below ε_theory (max): holds in 4 of 4;
    …"``; ``""`` for none."""
    if not found:
        return ""
    parts = [f"{o['claim']} ({o['statistic']}): holds in {o['held']} of {o['cells']}"
             + (f" (not in {o['detail']})" if o["detail"] else "") for o in found]
    return "Orderings of the paper's Table 2 (per arm × bank cell): " + "; ".join(parts) + "."


_SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def format_count(v) -> str:
    """A count as the tables write it: ``10⁶``, ``5·10⁶`` for round values ≥ 10⁵, else ``1,000``; ``"?"`` for None or
    NaN. Raises ValueError for a value that is not a number."""
    if v is None or pd.isna(v):
        return "?"
    v = int(float(v))
    digits = len(str(abs(v))) - 1
    if v >= 10 ** 5 and v % 10 ** digits == 0:
        lead = v // 10 ** digits
        return ("" if lead == 1 else f"{lead}·") + "10" + str(digits).translate(_SUPERSCRIPT)
    return f"{v:,}"


def comparison_markdown(table: pd.DataFrame, heading: str = "###") -> str:
    """:func:`comparison_table` as markdown: the :func:`orderings_line`, then one table per arm × bank under a line with
    its sizes and ε_theory (the paper's columns only at its mechanism); ``""`` for an empty table."""
    if table is None or table.empty:
        return ""
    out = []
    for (arm, bank), cell in table.groupby(["arm", "bank"], sort=False):
        dataset, letter = ARM_DATASET.get(str(arm), "?"), BANK_LETTER.get(str(bank), "?")
        first = cell.iloc[0]
        canaries = sorted(set(cell["canaries"]))
        note = str(first.get("mechanism_note", "") or "")
        label, paper_bank = BANK_LABEL.get(str(bank), str(bank)), BANK_NOTE.get(str(bank), "bank " + letter)
        out.append(f"{heading} {arm} arm, {label} (paper: {dataset}, {paper_bank})\n\n"
                   f"N = {format_count(first['n_test'])} test and {format_count(first['n_calibration'])} calibration "
                   f"users, {'/'.join(map(str, canaries))} canaries per variant, {format_count(first['trials'])} "
                   f"trials per hypothesis, ε_theory = {_fmt(cell['epsilon_theory'].max())}."
                   + (f" {note}" if note else "") + "\n\n")
        cols = {"variant": [f"{v} *(beyond the paper)*" if v in BEYOND_PAPER_VARIANTS else v for v in cell["variant"]],
                "canaries": [str(n) for n in cell["canaries"]], "ε_lower max": [_fmt(v) for v in cell["max"]],
                "median ε_lower": [_fmt(v) for v in cell["median"]],
                "min–max": [f"{_fmt(a, '.2f')}–{_fmt(b, '.2f')}" for a, b in zip(cell["min"], cell["max"])],
                "median μ_eff": [_fmt(v) for v in cell["mu_eff_median"]]}
        if not note:
            cols[f"paper Table 2 ({dataset})"] = [_fmt(v) for v in cell["paper_table2"]]
            cols[f"paper Table 4 ({dataset} {letter})"] = [_fmt(v) for v in cell["paper_table4"]]
        out.append(markdown_table(pd.DataFrame(cols)) + "\n")
    line = orderings_line(orderings(table))
    return (line + "\n\n" if line else "") + "".join(out).rstrip("\n") + "\n"
