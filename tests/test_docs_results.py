"""docs/results.md is generated from the committed runs' results.csv / run.json, byte for byte; the paper comparison
and the orderings it prints are checked against the paper's Table 2 / Table 4 and hand-built cells."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from docs_results import docs_results_markdown
from pe_kit.report.paper_compare import (PAPER_TABLE2, PAPER_TABLE4, comparison_table, orderings, orderings_line,
                                         paper_value)
from docs_results import main

ROOT = Path(__file__).resolve().parents[1]
PAPER_RUN = ROOT / "docs" / "paper_run"


def test_docs_results_md_is_what_the_committed_csvs_give():
    committed = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    fresh = docs_results_markdown(PAPER_RUN, link="paper_run")
    assert fresh == committed, "docs/results.md differs from docs/paper_run/*/results.csv: run `python scripts/docs_results.py`"


def test_cli_check_passes_on_the_committed_file_and_fails_on_a_drifted_csv(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["--check"]) == 0
    # one number changed in one CSV: the committed docs no longer match, and regenerating shows the new number
    runs = tmp_path / "docs" / "paper_run"
    shutil.copytree(PAPER_RUN / "long", runs / "long")
    df = pd.read_csv(runs / "long" / "results.csv", low_memory=False)
    i = df.index[(df["experiment"] == "table2") & (df["variant"] == "ordinary") & (df["bank_source"] == "bankA")]
    df.loc[i[0], "epsilon_lower"] = 1.5
    df.to_csv(runs / "long" / "results.csv", index=False)
    out = tmp_path / "docs" / "results.md"
    shutil.copy(ROOT / "docs" / "results.md", out)
    assert main(["--check", "--paper-run", str(runs), "--out", str(out)]) == 1
    assert main(["--paper-run", str(runs), "--out", str(out)]) == 0
    assert "| ordinary | 5 | 1.500 |" in out.read_text(encoding="utf-8")


def test_paper_values_are_the_papers_tables():
    # Table 2 (§4) and Table 4 (App. C) as printed in the paper
    assert PAPER_TABLE2["Yelp"]["ordinary"] == 0.268 and PAPER_TABLE2["Sentiment140"]["paraphrase-mu_eff"] == 0.682
    assert PAPER_TABLE4["Sentiment140 B"]["exact"] == 0.587 and PAPER_TABLE4["Yelp A"]["nonce"] == 1.038
    assert paper_value("2", "long", "bankA", "nonce-norm") == 1.110
    assert paper_value("2", "short", "public", "nonce") is None  # Table 2 has bank A only
    assert paper_value("4", "short", "public", "exact") == 0.587  # the public bank plays the paper's bank B
    with pytest.raises(ValueError, match="table"):
        paper_value("3", "long", "bankA", "nonce")


def test_comparison_table_reads_the_long_arm_run():
    df = pd.read_csv(PAPER_RUN / "long" / "results.csv", low_memory=False)
    t2 = df[df["experiment"] == "table2"]
    tab = comparison_table(t2)
    row = tab[(tab["bank"] == "bankA") & (tab["variant"] == "ordinary")].iloc[0]
    raw = t2[(t2["bank_source"] == "bankA") & (t2["variant"] == "ordinary")]["epsilon_lower"]
    assert row["canaries"] == 5 and row["max"] == raw.max() and row["median"] == raw.median()
    assert round(row["max"], 3) == 0.908 and row["paper_table2"] == 0.268 and row["paper_table4"] == 0.247
    assert row["n_test"] == 600 and row["trials"] == 10 ** 6


def _cell(arm, bank, maxima, medians=None, theory=1.695):
    medians = medians or maxima
    return [{"arm": arm, "bank": bank, "variant": v, "max": m, "median": medians[v], "epsilon_theory": theory}
            for v, m in maxima.items()]


def test_orderings_cell_by_cell():
    good = {"ordinary": 0.2, "exact": 0.3, "paraphrase-mu_eff": 0.5, "nonce": 1.0, "nonce-norm": 1.1}
    bad = {"ordinary": 0.6, "exact": 0.3, "paraphrase-mu_eff": 1.2, "nonce": 1.0, "nonce-norm": 1.8}
    tab = pd.DataFrame(_cell("long", "bankA", good) + _cell("short", "public", bad))
    found = {(o["claim"], o["statistic"]): o for o in orderings(tab)}
    assert found[("every ε_lower below ε_theory", "max")]["held"] == 1
    assert found[("every ε_lower below ε_theory", "max")]["detail"] == "short/public"
    assert found[("nonce variants highest", "max")]["held"] == 1  # short/public: paraphrase-μ_eff 1.2 > nonce 1.0
    assert found[("ordinary < exact < paraphrase-μ_eff < nonce", "max")]["held"] == 1
    line = orderings_line(orderings(tab))
    assert "holds in 1 of 2 (not in short/public)" in line


def test_committed_orderings_match_the_runs():
    """The orderings docs/results.md states for the long arm: nonce highest everywhere, the paper's
    ordinary < exact < paraphrase-μ_eff < nonce on bank A only."""
    df = pd.read_csv(PAPER_RUN / "long" / "results.csv", low_memory=False)
    found = {(o["claim"], o["statistic"]): o for o in orderings(comparison_table(df[df["experiment"] == "table2"]))}
    assert found[("every ε_lower below ε_theory", "max")]["held"] == 2
    assert found[("nonce variants highest", "median")]["held"] == 2
    # the cap-256 rerun: ordinary's max (0.908, one canary) is above exact's on bank A too
    assert found[("ordinary < exact < paraphrase-μ_eff < nonce", "max")]["detail"] == "long/bankA, long/public"


def test_results_md_leads_with_the_answer_and_raises_no_performance_warning():
    """results.md opens with the Table-2/4 analogue beside the paper and the orderings line, before the settings
    and the per-canary detail; rendering the committed quick run's 437 rows gives no pandas PerformanceWarning."""
    import warnings

    from pe_kit.report.results import summary_markdown

    df = pd.read_csv(PAPER_RUN / "quick" / "results.csv", low_memory=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.PerformanceWarning)
        md = summary_markdown(df, {"preset": "quick"})
    sections = [line for line in md.splitlines() if line.startswith("## ")]
    assert sections[:2] == ["## The answer: ε_lower per variant beside the paper's Table 2 and Table 4",
                            "## Settings of this run"]
    answer = md.split("## Settings of this run")[0]
    assert "Orderings of the paper's Table 2 (per arm × bank cell): every ε_lower below ε_theory (max): holds in 4 of 4" \
        in answer
    # long arm, bank A of the committed quick run (Gaussian-model rule; 0.181 / 0.159 with the argmax rule); μ_eff 0.579
    assert "| ordinary | 5 | 0.170 | 0.143 | 0.11–0.17 | 0.579 | 0.268 | 0.247 |" in answer
    assert answer.index("Orderings") < answer.index("| variant |")


def test_format_count():
    from pe_kit.report.paper_compare import format_count

    assert [format_count(v) for v in (290, 1000, 20000, 1e5, 2e5, 10 ** 6, 5e6, 1638, None, float("nan"))] == [
        "290", "1,000", "20,000", "10⁵", "2·10⁵", "10⁶", "5·10⁶", "1,638", "?", "?"]
    with pytest.raises(ValueError):
        format_count("many")


def test_headline_puts_each_bank_a_run_beside_table_2():
    from docs_results import headline_markdown, read_part

    parts = {n: read_part(PAPER_RUN / n) for n in ("long", "quick")}
    md = headline_markdown(parts)
    rows = {line.split(" | ")[0][2:]: line for line in md.splitlines() if line.startswith("| ")}
    # paper Yelp / Sentiment140, then long (bank A), quick long arm, quick short arm: max / median
    # both parts are the reruns with the Gaussian-model rule (long at cap 256: 0.418 / 0.264 at cap 64; argmax gave
    # 0.420 / 0.223 on long, 0.181 / 0.159 and 0.169 / 0.157 on quick)
    assert rows["ordinary"] == "| ordinary | 0.268 / 0.252 | 0.908 / 0.338 | 0.170 / 0.143 | 0.166 / 0.136 |"
    assert "gaussian-model rule" in md and "argmax rule" not in md
    assert rows["nonce"].startswith("| nonce | 1.049 / 1.052 | 0.915 / 0.894 |")
    assert "ε_theory = 1.695 in every column" in md
    assert headline_markdown({"onerun": read_part(PAPER_RUN / "onerun")}) == ""  # no notebook 04 rows


def test_comparison_markdown_marks_the_beyond_paper_variant():
    """A composed-mu_eff row says it is beyond the paper (its paper columns are empty for that reason)."""
    from pe_kit.report.paper_compare import comparison_markdown

    df = pd.read_csv(PAPER_RUN / "long" / "results.csv", low_memory=False)
    t2 = df[(df["experiment"] == "table2") & (df["variant"] == "exact")].copy()
    both = pd.concat([t2, t2.assign(variant="composed-mu_eff")])
    md = comparison_markdown(comparison_table(both))
    assert "| composed-mu_eff *(beyond the paper)* |" in md and "| exact |" in md
    assert "beyond the paper" not in comparison_markdown(comparison_table(t2))


def test_table4_joins_a_part_and_its_bank_b_part_arm_by_arm():
    """Table 4's analogue puts bank A, bank B and the public bank side by side for the arm of a part and its
    ``-bankB`` part, beside the paper's A and B columns; a bank audited at other sizes is left out, and no bank-B rows
    means no table."""
    from docs_results import read_part, table4_markdown

    df, meta = read_part(PAPER_RUN / "short")
    assert table4_markdown({"short": (df, meta)}) == ""                     # no bank-B rows yet
    t2 = df[(df["experiment"] == "table2") & (df["bank_source"] == "bankA")]
    fake_b = t2.assign(bank_source="bankB", epsilon_lower=t2["epsilon_lower"] / 2)
    md = table4_markdown({"short": (df, meta), "short-bankB": (fake_b, {})})
    rows = {line.split(" | ")[0][2:]: line for line in md.splitlines() if line.startswith("| ")}
    a = t2[t2["variant"] == "nonce"]["epsilon_lower"]
    pub = df[(df["experiment"] == "table2") & (df["bank_source"] == "public") & (df["variant"] == "nonce")]
    want = (f"| nonce | 1.018 | {a.max():.3f} / {a.median():.3f} | 1.014 | {a.max() / 2:.3f} / {a.median() / 2:.3f} | "
            f"{pub['epsilon_lower'].max():.3f} / {pub['epsilon_lower'].median():.3f} |")
    assert rows["nonce"] == want
    assert "short arm (paper: Sentiment140; parts `short`, `short-bankB`): N = 1,000, 10⁶ trials" in md
    assert "long arm" not in md
    assert "| variant | paper A | bank A | paper B | bank B | public bank (not the paper's) |" in md.splitlines()
    # bank B at other sizes than bank A: no table, rather than a comparison of unlike cells, and a note that says why
    other = fake_b.assign(trials=2 * 10 ** 5)
    note = table4_markdown({"short": (df, meta), "short-bankB": (other, {})})
    assert note.startswith("Not joined: short arm: bank B's rows were audited at other sizes") and "| nonce" not in note


def test_table4_refuses_to_join_other_canaries_or_another_setting():
    """The Table 4 analogue says "the same canaries in every column": a bank-B part whose canaries, seed or
    ε_theory differ from bank A's is not joined (a note says which), since its cells would compare other users."""
    from docs_results import read_part, table4_markdown

    df, meta = read_part(PAPER_RUN / "short")
    t2 = df[(df["experiment"] == "table2") & (df["bank_source"] == "bankA")]
    fake_b = t2.assign(bank_source="bankB")
    swapped = fake_b.assign(canary_id=fake_b["canary_id"].astype(str) + "x")
    md = table4_markdown({"short": (df, meta), "short-bankB": (swapped, {})})
    assert md.startswith("Not joined: short arm: ") and "'s canaries on bankB are not those on bankA" in md
    assert "| nonce" not in md
    for col, value in (("study_seed", 7), ("epsilon_theory", 5.084)):
        md = table4_markdown({"short": (df, meta), "short-bankB": (fake_b.assign(**{col: value}), {})})
        assert md.startswith(f"Not joined: short arm: {col} differs between bankA") and "| nonce" not in md


def test_table4_and_comparison_table_survive_rows_without_epsilon():
    """A part whose every ε_lower is missing has no cells: no KeyError, no table."""
    from docs_results import read_part, table4_markdown
    from pe_kit.report.paper_compare import comparison_table

    df, meta = read_part(PAPER_RUN / "short")
    empty = df.assign(epsilon_lower=float("nan"))
    assert comparison_table(empty[empty["experiment"] == "table2"]).empty
    assert table4_markdown({"short": (empty, meta), "short-bankB": (empty.assign(bank_source="bankB"), {})}) == ""


def test_table4_survives_parts_without_table2_rows_and_keeps_the_base_parts_bank_a():
    from docs_results import read_part, table4_markdown

    df, meta = read_part(PAPER_RUN / "short")
    assert table4_markdown({"short": (df[df["experiment"] != "table2"], meta)}) == ""
    t2 = df[(df["experiment"] == "table2") & (df["bank_source"] == "bankA")]
    fake_b = t2[t2["variant"] == "nonce"].assign(bank_source="bankB")
    also_a = t2[t2["variant"] == "nonce"].assign(epsilon_lower=99.0)
    md = table4_markdown({"short": (df[df["variant"] == "nonce"], meta),
                          "short-bankB": (pd.concat([also_a, fake_b]), {})})
    rows = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| variant")]
    assert len(rows) == 1 and rows[0].startswith("| nonce |") and "99.000" not in rows[0]


def test_another_mechanism_is_never_shown_beside_the_papers_columns_and_says_when_c_never_binds():
    """Rows audited at k = 3, C = 1 (the DPSDA mapping): no paper column, no headline column, and in words that C
    never binds (1/√3 = 0.577 ≤ C, so μ_eff ≤ 1/(√3·σ·C) = 0.577)."""
    from docs_results import headline_markdown
    from pe_kit.report.paper_compare import comparison_markdown

    df = pd.read_csv(PAPER_RUN / "long" / "results.csv", low_memory=False)
    t2 = df[(df["experiment"] == "table2") & (df["study_arm"] == "long") & (df["bank_source"] == "bankA")].copy()
    other = t2.assign(mech_top_k=3, mech_clip_norm=1.0)
    tab = comparison_table(other)
    assert tab["paper_table2"].isna().all() and tab["paper_table4"].isna().all()
    md = comparison_markdown(tab)
    assert "paper Table 2" not in md and "| variant | canaries | ε_lower max | median ε_lower | min–max | median μ_eff |\n" \
        "|---|---|---|---|---|---|\n" in md
    assert ("Mechanism k = 3, C = 1, σ = 1, q = 0.1 is not the paper's (k = 5, C = 0.1, σ = 1, q = 0.1), so the "
            "paper's Table 2 and Table 4 values are not shown beside it. C never binds: a user's vote vector has norm "
            "at most 1/√k = 0.577 ≤ C = 1, so no contribution is clipped and every canary's μ_eff is at most "
            "1/(√k·σ·C) = 0.577 (not 1/σ): ε_lower stays near 0 by construction, whatever the canary.") in md
    assert headline_markdown({"other": (other, {})}) == ""
    assert "paper Table 2 (Yelp)" in comparison_markdown(comparison_table(t2))  # the paper's mechanism keeps them
