"""Render ``docs/results.md`` (and the README's headline block): the measured tables and orderings of the committed reference runs, rendered from
their ``results.csv`` and ``run.json`` (``docs/paper_run/<part>/``) so that no number in the docs can drift from
the CSV it came from.

``python scripts/docs_results.py`` writes the file (``--check`` only compares); ``tests/test_docs_results.py``
regenerates it and fails on any byte of difference. Sections: the runs (notebooks, wall time, date, provenance notes from each ``run.json``), the Table 2 /
Table 4 analogue per part beside the paper's values (:mod:`pe_kit.report.paper_compare`), the Fig. 1 σ and q sweeps,
ε_lower against trials, the App. E checks, the multi-round audit (Fig. 2, Eq. 36), the one-run audits and the
black-box audit of seeded bugs.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pandas as pd

from pe_kit.report.paper_compare import BANK_LABEL, comparison_markdown, comparison_table, format_count as _count
from pe_kit.report.tables import markdown_table

__all__ = ["PART_ORDER", "read_part", "headline_markdown", "table4_markdown", "docs_results_markdown", "write_docs_results",
           "DEFAULT_OUT", "main"]

#: the order in which parts are shown (others follow alphabetically)
PART_ORDER = ("long", "short", "long-bankB", "short-bankB", "quick", "checks", "multi", "onerun")
#: where ``python scripts/docs_results.py`` writes, relative to the repository root
DEFAULT_OUT = Path("docs") / "results.md"

def _f(v, fmt: str = ".3f") -> str:
    return "" if v is None or pd.isna(v) else format(float(v), fmt)


def read_part(folder: str | Path) -> tuple[pd.DataFrame, dict]:
    """One committed part: its ``results.csv`` (DataFrame, read with ``low_memory=False``) and ``run.json`` (dict,
    ``{}`` when absent).

    Raises:
        FileNotFoundError: ``folder/results.csv`` is missing (the message names it).
    """
    folder = Path(folder)
    csv = folder / "results.csv"
    if not csv.is_file():
        raise FileNotFoundError(f"{csv} not found: a part folder needs the results.csv that pe-kit reproduce wrote")
    meta = json.loads((folder / "run.json").read_text()) if (folder / "run.json").is_file() else {}
    return pd.read_csv(csv, low_memory=False), meta


def _parts(root: Path) -> list[str]:
    have = sorted(d.name for d in root.iterdir() if (d / "results.csv").is_file()) if root.is_dir() else []
    return [p for p in PART_ORDER if p in have] + [p for p in have if p not in PART_ORDER]


def _exp(df: pd.DataFrame, *names: str) -> pd.DataFrame:
    """The rows of the named experiments, as a compact copy (a slice of a wide CSV frame is fragmented)."""
    return (df[df["experiment"].isin(names)] if "experiment" in df.columns else df.iloc[:0]).copy()


def _rule(rows: pd.DataFrame) -> str:
    """The threshold rule of a part's rows, as a column-header phrase: rows that record no rule (no
    ``calibration_rule`` column) used the argmax rule (docs/threshold_rules.md)."""
    if "calibration_rule" not in rows or rows["calibration_rule"].isna().all():
        return "argmax rule"
    names = sorted({str(r).split(">")[0] for r in rows["calibration_rule"].dropna()})
    return "/".join(n.replace("_", "-") for n in names) + " rule"


def headline_markdown(parts: dict) -> str:
    """One table for a first look: per variant, the paper's Table 2 (Yelp / Sentiment140) beside ε_lower
    "max / median" on bank A of every part with notebook 04's rows at the paper's mechanism (arm by arm; others are
    in the per-part tables, ``paper_compare.mechanism_words``), each column headed by its sizes.

    Args: parts: part name → (results.csv frame, run.json dict), as :func:`read_part` gives. Returns markdown ("" when
    no part has notebook 04's rows)."""
    from pe_kit.attack.variants import VARIANTS
    from pe_kit.report.paper_compare import PAPER_TABLE2

    columns, theory = [], set()
    for name, (df, _) in parts.items():
        tab = comparison_table(_exp(df, "table2"))
        if tab.empty:
            continue
        rule = _rule(_exp(df, "table2"))
        for arm, cell in tab[(tab["bank"] == "bankA") & (tab["mechanism_note"] == "")].groupby("arm", sort=False):
            first = cell.iloc[0]
            theory |= set(cell["epsilon_theory"].round(3))
            head = (f"`{name}`, {arm} arm (N = {_count(first['n_test'])}, {_count(first['trials'])} trials, "
                    f"{'/'.join(map(str, sorted(set(cell['canaries']))))} canaries, {rule})")
            columns.append((head, {r.variant: f"{_f(r.max)} / {_f(r.median)}" for r in cell.itertuples()}))
    if not columns:
        return ""
    lines = ["| variant | paper Table 2 (max): Yelp / Sentiment140 | " + " | ".join(h for h, _ in columns) + " |",
             "|" + "---|" * (len(columns) + 2)]
    for v in VARIANTS:
        if any(v in c for _, c in columns):
            lines.append(f"| {v} | {_f(PAPER_TABLE2['Yelp'][v])} / {_f(PAPER_TABLE2['Sentiment140'][v])} | "
                         + " | ".join(c.get(v, "") for _, c in columns) + " |")
    same = f" ε_theory = {theory.pop():.3f} in every column (the paper's: 1.695)." if len(theory) == 1 else ""
    return ("Bank A (label-only text), ε_lower as max / median over each variant's canaries (the paper's Table 2 is "
            f"the max over five).{same} The long arm stands in for Yelp, the short arm for Sentiment140.\n\n"
            + "\n".join(lines) + "\n")


def table4_markdown(parts: dict) -> str:
    """The paper's Table 4 analogue arm by arm: ε_lower "max / median" per variant on bank A, bank B and the public
    bank, joined across a part and its ``-bankB`` part (e.g. ``short`` and ``short-bankB``, which audit the same
    canaries on the same splits), beside the paper's Table 4 columns A and B.

    Args: parts: part name → (results.csv frame, run.json dict), as :func:`read_part` gives. Returns markdown, ``""``
    when no arm has bank-B rows at its bank-A rows' sizes (test users and trials; a public-bank column at other sizes
    is left out): cells of other sizes would not compare like with like."""
    from pe_kit.attack.variants import VARIANTS
    from pe_kit.report.paper_compare import ARM_DATASET, PAPER_TABLE4

    out, skipped = [], []
    for arm, dataset in ARM_DATASET.items():
        names = [n for n in (arm, f"{arm}-bankB") if n in parts]
        tabs = [t[(t["arm"] == arm) & (t["mechanism_note"] == "")]
                for t in (comparison_table(_exp(parts[n][0], "table2")) for n in names) if not t.empty]
        if not tabs:
            continue
        # a bank audited in both parts: the first part's rows (the -bankB part's own bank-A rows do not overwrite)
        tab = pd.concat(tabs, ignore_index=True).drop_duplicates(["bank", "variant"], keep="first")
        if tab.empty or "bankB" not in set(tab["bank"]):
            continue
        sizes = {b: (g["n_test"].max(), g["trials"].max()) for b, g in tab.groupby("bank")}
        ref = sizes.get("bankA", sizes["bankB"])
        banks = [b for b in ("bankA", "bankB", "public") if b in sizes and _same_sizes(sizes[b], ref)]
        if "bankB" not in banks:
            skipped.append(f"{arm} arm: bank B's rows were audited at other sizes (N, trials) than bank A's")
            continue
        differ = _world_mismatch(parts, names, arm, banks)
        if differ:
            skipped.append(f"{arm} arm: {differ}")
            continue
        cells = {b: {r.variant: f"{_f(r.max)} / {_f(r.median)}" for r in tab[tab["bank"] == b].itertuples()}
                 for b in banks}
        cols = [("paper A", {v: _f(x) for v, x in PAPER_TABLE4[f"{dataset} A"].items()}), ("bank A", cells.get("bankA")),
                ("paper B", {v: _f(x) for v, x in PAPER_TABLE4[f"{dataset} B"].items()}), ("bank B", cells.get("bankB")),
                ("public bank (not the paper's)", cells.get("public"))]
        cols = [(h, c) for h, c in cols if c is not None]
        theory = _f(tab["epsilon_theory"].max())
        out.append(f"{arm} arm (paper: {dataset}; parts {', '.join(f'`{n}`' for n in names)}): N = "
                   f"{_count(ref[0])}, {_count(ref[1])} trials per hypothesis, ε_theory = {theory}; the same canaries "
                   "in every column.\n\n| variant | " + " | ".join(h for h, _ in cols) + " |\n|"
                   + "---|" * (len(cols) + 1) + "\n")
        for v in VARIANTS:
            if any(v in c for h, c in cols if not h.startswith("paper")):
                out.append(f"| {v} | " + " | ".join(c.get(v, "") for _, c in cols) + " |\n")
        out.append("\n")
    note = "".join(f"Not joined: {s_}; the columns would not compare like with like.\n\n" for s_ in skipped)
    if not out:
        return note
    return (note + "ε_lower as max / median over each variant's canaries (the paper's Table 4 is the max over five). Bank A: "
            "label-only SmolLM2 text; bank B: SmolLM2 text from a label and three public posts (the paper's two "
            "generated banks, App. C); the public bank: real posts of bloggers in no split, a third bank of the "
            "kit's own.\n\n" + "".join(out))


def _same_sizes(a: tuple, b: tuple) -> bool:
    """Equal (N, trials) pairs, where a size missing from both (NaN) counts as equal."""
    return all(x == y or (pd.isna(x) and pd.isna(y)) for x, y in zip(a, b))


def _world_mismatch(parts: dict, names: list[str], arm: str, banks: list[str]) -> str:
    """Why the banks' rows of one arm do not audit the same canaries ("" when they do): for each bank, the rows of
    the first part in ``names`` that has it; compared are each variant's set of ``canary_id`` (variants in both),
    ``epsilon_theory`` and, where recorded, the study's seed, data, record cap and token cap."""
    rows = {}
    for n in names:
        t2 = _exp(parts[n][0], "table2")
        if "study_arm" not in t2 or "bank_source" not in t2:
            continue
        t2 = t2[t2["study_arm"] == arm]
        for b in banks:
            if b not in rows and (t2["bank_source"] == b).any():
                rows[b] = t2[t2["bank_source"] == b]
    ref_bank = "bankA" if "bankA" in rows else "bankB"
    ref = rows.get(ref_bank)
    if ref is None:
        return ""
    for b, r in rows.items():
        if b == ref_bank:
            continue
        if "canary_id" in ref and "canary_id" in r:
            for v in sorted(set(ref["variant"]) & set(r["variant"])):
                if set(ref.loc[ref["variant"] == v, "canary_id"].astype(str)) != set(
                        r.loc[r["variant"] == v, "canary_id"].astype(str)):
                    return f"{v}'s canaries on {b} are not those on {ref_bank}"
        for col in ("epsilon_theory", "study_seed", "study_data", "study_record_cap", "study_max_seq_length"):
            if col in ref and col in r:
                a, c = _values(ref[col]), _values(r[col])
                if a and c and a != c:
                    return f"{col} differs between {ref_bank} ({'/'.join(sorted(a))}) and {b} ({'/'.join(sorted(c))})"
    return ""


def _values(col: pd.Series) -> set[str]:
    """A column's distinct non-missing values as text (numbers to 6 decimals, so 1.6950 and 1.695 agree)."""
    num = pd.to_numeric(col, errors="coerce")
    if num.notna().all():
        return {f"{x:.6g}" for x in num.dropna()}
    return set(col.dropna().astype(str))


def _runs_table(parts: dict, link: str) -> str:
    rows = []
    for name, (df, meta) in parts.items():
        preset = meta.get("preset", {}) or {}
        nbs = ", ".join(s["notebook"][:2] for s in meta.get("statuses", []) if s.get("status") == "ran")
        data = preset.get("data") or "bundled Blogs sample"
        secs = f"{meta['seconds']:,.0f} s" if isinstance(meta.get("seconds"), (int, float)) else ""
        prov = str(meta.get("provenance", "")).replace("|", "/").replace("\n", " ")
        rows.append([f"[`{name}`]({link}/{name}/results.md)", nbs, str(preset.get("name", "")), f"`{data}`", secs,
                     str(meta.get("finished", "")), prov])
    return markdown_table(pd.DataFrame(rows, columns=["part", "notebooks", "preset", "data", "wall time", "finished",
                                                      "provenance"]))


def _votes_section(df: pd.DataFrame) -> str:
    """Where ordinary's and exact's votes land: the share of a canary's vote mass on its inspected coordinates P
    (``canary_votes_on_P``), ‖v_P‖ (``canary_norm``) and μ_eff, median (min–max) over each variant's canaries."""
    t2 = _exp(df, "table2")
    need = {"canary_votes_on_P", "canary_norm", "mu_eff", "study_arm", "bank_source", "variant"}
    if t2.empty or not need <= set(t2.columns):
        return ""
    t2 = t2[t2["variant"].isin(["ordinary", "exact"])]
    if t2.empty:
        return ""
    rows = [[str(arm), str(bank), str(variant)]
            + [f"{_f(g[c].median())} ({_f(g[c].min(), '.2f')}–{_f(g[c].max(), '.2f')})"
               for c in ("canary_votes_on_P", "canary_norm", "mu_eff")]
            for (arm, bank, variant), g in t2.groupby(["study_arm", "bank_source", "variant"], sort=False)]
    return ("An exact canary's inspected coordinates P are its copies in the bank; each record's copy takes one of its "
            "k votes and the others go to bank texts outside P, so only part of its vote mass lands on P. An "
            "ordinary canary's P is its whole top-k support. Median (min–max) over each variant's canaries:\n\n"
            + markdown_table(pd.DataFrame(rows, columns=["arm", "bank", "variant", "share of votes on P", "‖v_P‖",
                                                         "μ_eff"])) + "\n")


def _sweep_section(df: pd.DataFrame) -> str:
    from pe_kit.attack.variants import NONCE_VARIANTS, VARIANTS

    out = []
    for name, col, label in (("sigma_sweep", "mech_noise_multiplier", "σ (q = 0.1)"),
                             ("q_sweep", "mech_sample_rate", "q (σ = 1)")):
        sw = _exp(df, name)
        if sw.empty:
            continue
        order = [v for v in VARIANTS if v in set(sw["variant"])]
        canaries = ", ".join(f"{v} {sw.loc[sw['variant'] == v, 'canary_id'].iloc[0]}" for v in order)
        out.append(f"{label} sweep: N = {_count(sw['study_n_test'].max())} test and "
                   f"{_count(sw['study_n_calibration'].max())} calibration users, {sw['study_arm'].iloc[0]} arm, "
                   f"{BANK_LABEL.get(sw['bank_source'].iloc[0], sw['bank_source'].iloc[0])}, one canary per variant ({canaries}), "
                   f"{_count(sw['trials'].max())} trials per hypothesis. Cells: ε_lower [95 % band of the point "
                   "estimate]; a band above ε_theory is no violation (the band is around the point estimate, "
                   "ε_lower is its lower end at the audit's γ).\n\n")
        out.append(f"| {label.split()[0]} | ε_theory | " + " | ".join(order) + " |\n|" + "---|" * (len(order) + 2) + "\n")
        below = highest = settings = 0
        for value, grp in sw.groupby(col, sort=True):
            by = grp.set_index("variant")
            cells = [f"{_f(by.loc[v, 'epsilon_lower'])} [{_f(by.loc[v, 'epsilon_ci_low'], '.2f')}–"
                     f"{_f(by.loc[v, 'epsilon_ci_high'], '.2f')}]" if v in by.index else "" for v in order]
            out.append(f"| {value:g} | {_f(by['epsilon_theory'].max())} | " + " | ".join(cells) + " |\n")
            settings += 1
            below += bool((by["epsilon_lower"] < by["epsilon_theory"]).all())
            nonce = by[by.index.isin(NONCE_VARIANTS)]["epsilon_lower"]
            natural = by[~by.index.isin(NONCE_VARIANTS)]["epsilon_lower"]
            highest += bool(len(nonce) and len(natural) and nonce.min() > natural.max())
        out.append(f"\nEvery ε_lower below ε_theory at {below} of {settings} settings; nonce the highest variant at "
                   f"{highest} of {settings}.\n\n")
    return "".join(out)


def _tightness_section(df: pd.DataFrame) -> str:
    t = _exp(df, "tightness")
    if t.empty:
        return ""
    lines = [f"{t['variant'].iloc[0]} canary {t['canary_id'].iloc[0]}, μ_eff = {_f(t['mu_eff'].iloc[0])}; expected: "
             "the ε_lower the Gaussian score model gives at that μ_eff and trial count (Eqs. 16–19, 28–30).\n\n"
             "| trials per hypothesis | ε_lower | expected ε_lower | ε_theory |\n|---|---|---|---|\n"]
    for r in t.sort_values("trials").itertuples(index=False):
        lines.append(f"| {_count(r.trials)} | {_f(r.epsilon_lower)} | {_f(r.epsilon_expected)} | "
                     f"{_f(r.epsilon_theory)} |\n")
    return "".join(lines) + "\n"


def _llr_line(df: pd.DataFrame) -> str:
    llr = _exp(df, "llr_check")
    if llr.empty:
        return ""
    ok = llr["passed"].astype(str).str.lower().isin(("true", "1", "1.0"))
    failed = ", ".join(sorted(set(llr.loc[~ok, "check"].astype(str))))
    return (f"App. E checks (notebook 03): {int(ok.sum())} of {len(llr)} pass"
            + (f"; failing: {failed}" if failed else "") + ".\n\n")


def _multiround_section(df: pd.DataFrame) -> str:
    audit, gain = _exp(df, "fig2_multiround_audit"), _exp(df, "fig2_multiround_gain")
    if audit.empty and gain.empty:
        return ""
    a = audit.set_index(audit["releases"].astype(int)) if not audit.empty else pd.DataFrame()
    g = gain.set_index(gain["round"].astype(int)) if not gain.empty else pd.DataFrame()
    first = (audit if not audit.empty else gain).iloc[0]
    head = (f"T = {int(first['pe_rounds'])} releases at q = {_f(first.get('mech_sample_rate', float('nan')), 'g')}, "
            f"σ = {_f(first.get('mech_noise_multiplier', float('nan')), 'g')}, one {first['variant']} canary, "
            f"N = {_count(first.get('study_n_test'))} test and {_count(first.get('study_n_calibration'))} calibration "
            f"users, {_count(first.get('audit_trials'))} trials per hypothesis, {int(first['n_pe_seeds'])} PE seeds "
            "(MAUVE: mean over seeds; gain = DP run − random-retention control, 95 % interval over seeds).\n\n")
    rows = ["| t | ε_theory | composed μ_eff | ε_lower frozen banks | ε_lower adaptive | MAUVE DP | MAUVE control | gain "
            "[95 % CI] | gain significant |\n|---|---|---|---|---|---|---|---|---|\n"]
    for t in sorted(set(a.index) | set(g.index)):
        ar = a.loc[t] if t in a.index else {}
        gr = g.loc[t] if t in g.index else {}
        gain_cell = (f"{_f(gr['gain'], '+.3f')} [{_f(gr['ci_low'], '+.3f')}, {_f(gr['ci_high'], '+.3f')}]"
                     if len(gr) else "")
        rows.append(f"| {t} | {_f(ar.get('epsilon_theory'))} | {_f(ar.get('mu_eff_composed'))} | "
                    f"{_f(ar.get('epsilon_lower_frozen'))} | {_f(ar.get('epsilon_lower_adaptive'))} | "
                    f"{_f(gr.get('treated_mean'))} | {_f(gr.get('control_mean'))} | {gain_cell} | "
                    f"{gr.get('significant', '') if len(gr) else ''} |\n")
    tail = ""
    if not audit.empty:
        worst = max((audit["epsilon_lower_frozen"] / audit["epsilon_theory"]).max(),
                    (audit["epsilon_lower_adaptive"] / audit["epsilon_theory"]).max())
        below = bool(((audit["epsilon_lower_frozen"] < audit["epsilon_theory"])
                      & (audit["epsilon_lower_adaptive"] < audit["epsilon_theory"])).all())
        changed = float(audit["frac_retention_changed"].max())
        tail = (f"\nEvery ε_lower below ε_theory at every prefix: {'holds' if below else 'does not hold'} (largest "
                f"ratio ε_lower / ε_theory {worst:.2f}). Largest share of trials in which the canary changed the "
                f"retained set: {changed:g}"
                + (" (so the frozen and adaptive audits score the same releases; their difference is that of two "
                   "independent audits)" if changed == 0 else "") + ".\n")
    return head + "".join(rows) + tail + "\n"


def _one_run_section(df: pd.DataFrame) -> str:
    rows = _exp(df, "one_run", "multi_trial")
    if rows.empty:
        return ""
    lines = ["| q | variant | method | m | correct / guesses | ε_lower | μ_lower | ε_theory | trials |\n"
             "|---|---|---|---|---|---|---|---|---|\n"]
    rows = rows.assign(_multi=rows["experiment"] == "multi_trial")
    for r in rows.sort_values(["mech_sample_rate", "variant", "_multi", "m", "method"],
                              ascending=[False, True, True, True, True], kind="stable").itertuples(index=False):
        cg = f"{int(r.correct)} / {int(r.guesses)}" if pd.notna(r.correct) and pd.notna(r.guesses) else ""
        lines.append(f"| {r.mech_sample_rate:g} | {r.variant} | {r.method} | {_count(r.m)} | {cg} | {_f(r.epsilon_lower)} | "
                     f"{_f(r.mu_lower)} | {_f(r.epsilon_theory)} | {_count(r.trials) if pd.notna(r.trials) else ''} |\n")
    return "".join(lines) + "\n"


def _published_section(df: pd.DataFrame) -> str:
    """The one-run bounds on their published idealised game (``one_run_published`` rows), and the idealised game at
    this run's sizes (``one_run_idealised``: median (min–max) over repeats)."""
    pub, ideal = _exp(df, "one_run_published"), _exp(df, "one_run_idealised")
    out = []
    if not pub.empty:
        games = pub["note"].astype(str).str.extract(r"(\d+) games")[0].dropna()
        out.append("Mahloujifar, Melis & Chaudhuri (ICML 2025): App. B's correct guesses c and Table 1's ε on their "
                   f"idealised Gaussian game{f', {games.iloc[0]} games per σ' if len(games) else ''}; `within`: "
                   "|published − reproduced| ≤ tolerance (the Monte-Carlo spread).\n\n"
                   "| method | setting | published | reproduced | tolerance | within |\n|---|---|---|---|---|---|\n")
        for r in pub.itertuples(index=False):
            out.append(f"| {r.method} | {r.setting} | {r.published:g} | {_f(r.reproduced)} | {_f(r.tolerance)} | "
                       f"{r.within} |\n")
        out.append("\n")
    if not ideal.empty:
        out.append("The idealised game at this run's sizes (no PE; per-canary Gaussian LLR at μ = 1/σ), ε_lower median "
                   "(min–max) over repeats:\n\n| q | m | method | repeats | ε_lower | ε_theory |\n|---|---|---|---|---|---|\n")
        for (q, m, method), g in ideal.groupby(["mech_sample_rate", "m", "method"], sort=True):
            e = g["epsilon_lower"]
            out.append(f"| {q:g} | {_count(m)} | {method} | {len(g)} | {_f(e.median())} ({_f(e.min(), '.2f')}–"
                       f"{_f(e.max(), '.2f')}) | {_f(g['epsilon_theory'].max())} |\n")
        out.append("\n")
    return "".join(out)


def _blackbox_section(df: pd.DataFrame) -> str:
    impl, ctrl = _exp(df, "implementation_audit"), _exp(df, "implementation_controls")
    if impl.empty:
        return ""
    lines = [f"{_count(impl['trials'].max())} trials per hypothesis, δ = {_f(impl['delta'].iloc[0], 'g')}, "
             f"ε_theory = {_f(impl['epsilon_theory'].max())}.\n\n"
             "| implementation | design | breaks the guarantee | flagged | ε_lower | smallest trials that flag it |\n"
             "|---|---|---|---|---|---|\n"]
    for r in impl.itertuples(index=False):
        lines.append(f"| {r.implementation} | {r.design} | {r.expected_violation} | {r.violation} | "
                     f"{_f(r.epsilon_lower)} | {_count(r.trials_needed) if pd.notna(r.trials_needed) else ''} |\n")
    if not ctrl.empty:
        # the count of flags: `times_flagged` where rows carry it (`flagged` is then a bool), else `flagged`
        counts = ctrl["times_flagged"] if "times_flagged" in ctrl and ctrl["times_flagged"].notna().any() else ctrl["flagged"]
        flagged = int(pd.to_numeric(counts, errors="raise").sum())
        lines.append(f"\nRe-audits of the implementations that keep the guarantee: {flagged} flagged in "
                     f"{int(ctrl['repeats'].sum())} re-audits ({int(ctrl['repeats'].max())} each), largest ε_lower "
                     f"{_f(ctrl['epsilon_lower_max'].max())}.\n")
    return "".join(lines) + "\n"


def docs_results_markdown(root: str | Path = Path("docs") / "paper_run", link: str = "paper_run") -> str:
    """Render ``docs/results.md`` from every part folder under ``root`` that holds a ``results.csv``.

    Args:
        root: the folder of committed parts (default ``docs/paper_run``, relative to the working directory).
        link: how the rendered file links to ``root`` (relative to where the file is written).

    Returns:
        markdown str, a pure function of the parts' ``results.csv`` and ``run.json`` bytes (no clock, no paths
        of this machine).

    Raises:
        FileNotFoundError: ``root`` holds no part with a ``results.csv``.
    """
    root = Path(root)
    names = _parts(root)
    if not names:
        raise FileNotFoundError(f"no part folder with a results.csv under {root}; run scripts/paper_run.sh PART first")
    parts = {n: read_part(root / n) for n in names}
    out = ["# Measured results of the committed runs\n\n",
           "Generated by `python scripts/docs_results.py` from `docs/paper_run/*/results.csv` and `run.json`; do not edit by "
           "hand (`tests/test_docs_results.py` regenerates it and fails on any difference). ε_lower is the audit's "
           "95 %-confidence lower bound (Eq. 28 with Clopper–Pearson endpoints, Eqs. 29–30), ε_theory the "
           "accountant's ε (Opacus PRV) at the same σ, q, δ; μ_eff is a canary's effective signal √(vᵀΣ⁻¹v) (Eq. 15), "
           "at most 1/σ (Eq. 20). The paper reports the max over five canaries; the median and range show how far "
           "single canaries differ.\n"]
    head = headline_markdown(parts)
    if head:
        out.append("\n## Headline: ε_lower beside the paper's Table 2\n\n" + head)
    out += ["\n## The runs\n\n", _runs_table(parts, link)]
    t4 = table4_markdown(parts)
    if t4:
        out.append("\n## Table 4 analogue: bank A beside bank B\n\n" + t4)
    t2 = [(n, _exp(df, "table2")) for n, (df, _) in parts.items() if not _exp(df, "table2").empty]
    if t2:
        out.append("\n## ε_lower per variant beside the paper's Table 2 and Table 4 (notebook 04)\n")
        for name, rows in t2:
            out.append(f"\n### Part `{name}`\n\n" + comparison_markdown(comparison_table(rows), heading="####"))
    for title, render in (("Where ordinary and exact canaries' votes land (notebook 04)", _votes_section),
                          ("Fig. 1 analogue: σ and q sweeps (notebook 05)", _sweep_section),
                          ("ε_lower against trials (notebook 05)", _tightness_section),
                          ("App. E checks (notebook 03)", _llr_line),
                          ("Multi-round audit and utility (Fig. 2 analogue, notebook 06)", _multiround_section),
                          ("One-run audits of one PE release (notebook 08)", _one_run_section),
                          ("One-run bounds on the idealised game (notebook 08)", _published_section),
                          ("Black-box audit of seeded bugs (notebook 07)", _blackbox_section)):
        bodies = [(n, render(df)) for n, (df, _) in parts.items()]
        bodies = [(n, b) for n, b in bodies if b]
        if bodies:
            out.append(f"\n## {title}\n")
            out.extend(f"\n### Part `{n}`\n\n{b}" for n, b in bodies)
    return "".join(out).rstrip("\n") + "\n"


def write_docs_results(root: str | Path = Path("docs") / "paper_run", out: str | Path = DEFAULT_OUT) -> Path:
    """Write :func:`docs_results_markdown` of ``root`` to ``out`` (UTF-8) and return ``out``; the link to the parts
    is made relative to ``out``'s folder. Raises FileNotFoundError as :func:`docs_results_markdown`."""
    import os

    out = Path(out)
    link = Path(os.path.relpath(Path(root).resolve(), out.resolve().parent)).as_posix()
    text = docs_results_markdown(root, link=link)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


#: the markers around the README's generated headline table (:func:`readme_with_headline`)
README_MARKERS = ("<!-- headline: generated by `python scripts/docs_results.py`; do not edit -->", "<!-- /headline -->")


def readme_with_headline(readme: str, root: str | Path = Path("docs") / "paper_run") -> str:
    """``readme`` with the block between :data:`README_MARKERS` replaced by :func:`headline_markdown` of the parts
    under ``root``, so the README's headline cannot drift from the committed CSVs.

    Args: readme: the README's text; root: the folder of committed parts. Returns: the new text.

    Raises:
        ValueError: ``readme`` lacks the two markers (the message names them).
        FileNotFoundError: ``root`` holds no part with a ``results.csv``.
    """
    start, end = README_MARKERS
    if start not in readme or end not in readme:
        raise ValueError(f"README has no generated headline block: put {start!r} and {end!r} on lines of their own")
    names = _parts(Path(root))
    if not names:
        raise FileNotFoundError(f"no part folder with a results.csv under {root}; run scripts/paper_run.sh PART first")
    head = headline_markdown({n: read_part(Path(root) / n) for n in names})
    before, rest = readme.split(start, 1)
    return before + start + "\n" + head.rstrip("\n") + "\n" + end + rest.split(end, 1)[1]


def _readme_beside(out: Path) -> Path | None:
    """The README whose headline block is kept in step with ``out``: the ``README.md`` beside the ``docs/`` folder
    that ``out`` is written to; None for any other ``out``."""
    docs = out.resolve().parent
    readme = docs.parent / "README.md"
    return readme if docs.name == "docs" and readme.is_file() else None


def main(argv=None) -> int:
    """Write (or with ``--check`` compare) ``--out`` and the README headline from ``--paper-run``'s parts.

    Returns 0 when written or matching, 1 when ``--check`` finds a difference, 2 when a part cannot be read."""
    ap = argparse.ArgumentParser(description="Render docs/results.md from the committed runs' results.csv and run.json.")
    ap.add_argument("--paper-run", default="docs/paper_run", help="the folder of committed run parts")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="where to write (default: docs/results.md)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if --out differs from the CSVs")
    args = ap.parse_args(argv)
    out = Path(args.out)
    readme = _readme_beside(out)
    try:
        if args.check:
            link = Path(os.path.relpath(Path(args.paper_run).resolve(), out.resolve().parent)).as_posix()
            same = out.is_file() and out.read_text(encoding="utf-8") == docs_results_markdown(args.paper_run, link=link)
            print(f"{out} {'matches' if same else 'differs from'} {args.paper_run}/*/results.csv"
                  + ("" if same else "; run python scripts/docs_results.py to regenerate it"), file=sys.stderr)
            if readme is not None:
                text = readme.read_text(encoding="utf-8")
                if readme_with_headline(text, args.paper_run) != text:
                    print(f"{readme}'s headline differs from {args.paper_run}/*/results.csv; run python "
                          "scripts/docs_results.py to regenerate it", file=sys.stderr)
                    same = False
            return 0 if same else 1
        print(f"wrote {write_docs_results(args.paper_run, out)}")
        if readme is not None:
            readme.write_text(readme_with_headline(readme.read_text(encoding="utf-8"), args.paper_run), encoding="utf-8")
            print(f"wrote the headline of {readme}")
    except (FileNotFoundError, ValueError) as exc:
        print(f"docs_results: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
