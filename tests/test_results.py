"""Tidy rows, the step cache, markdown rendering and the ε confidence interval."""
import json

import numpy as np
import pandas as pd
import pytest

from pe_kit.audit.bounds import epsilon_lower_from_counts
from pe_kit.report.results import (
    StepCache,
    collect,
    epsilon_interval,
    markdown_table,
    summary_markdown,
    table_epsilon,
    tidy,
    write_rows,
)


def test_step_cache_reuses_and_recomputes(tmp_path):
    cache = StepCache(tmp_path / ".steps")
    calls = []

    def compute():
        calls.append(1)
        return {"epsilon_lower": 0.5, "arr": np.arange(3)}

    a = cache.get_or_compute(("audit", {"n": 1}, 0), compute)
    b = cache.get_or_compute(("audit", {"n": 1}, 0), compute)
    assert len(calls) == 1 and a["epsilon_lower"] == b["epsilon_lower"] == 0.5 and b["arr"] == [0, 1, 2]
    assert (cache.hits, cache.misses) == (1, 1)
    cache.get_or_compute(("audit", {"n": 2}, 0), compute)  # another key → computed
    assert len(calls) == 2
    path = cache.path("audit", {"n": 1}, 0)
    assert path.with_name(path.name + ".sha256").is_file()  # a verified entry of pe_kit.cache
    path.write_text("{truncated")  # a corrupt item is recomputed, not trusted
    assert cache.get_or_compute(("audit", {"n": 1}, 0), compute)["epsilon_lower"] == 0.5 and len(calls) == 3
    assert json.loads(path.read_text())["result"]["epsilon_lower"] == 0.5


def test_tidy_stamps_provenance_and_write_collect(tmp_path):
    params = {"output_dir": str(tmp_path), "preset": "tiny", "seed": 3, "variants": ["ordinary", "nonce"], "n_aux": 15}
    rows = tidy([{"variant": "nonce", "epsilon_lower": 0.4}], "04_audit", "table2", params)
    r = rows[0]
    assert (r["notebook"], r["experiment"], r["preset"], r["seed"]) == ("04_audit", "table2", "tiny", 3)
    assert r["param_variants"] == '["ordinary", "nonce"]' and r["param_n_aux"] == 15 and "param_output_dir" not in r
    assert r["version_numpy"] == np.__version__ and r["version_pe_kit"]
    write_rows(rows, tmp_path, "04_audit")
    write_rows(tidy([{"quantity": "users", "value": 25.0}], "01_mechanism", "mechanism", params), tmp_path, "01_mechanism")
    df = collect(tmp_path, ["01_mechanism", "02_probe_design", "04_audit"])
    assert list(df["notebook"]) == ["01_mechanism", "04_audit"] and list(df.columns[:5]) == [
        "notebook", "experiment", "preset", "seed", "version_pe_kit"]
    with pytest.raises(ValueError, match="04_audit"):
        write_rows([], tmp_path, "04_audit")


def test_markdown_table():
    df = pd.DataFrame({"variant": ["a|b", "nonce"], "eps": [0.12345, np.nan], "trials": [1e6, 2.0]})
    assert markdown_table(df) == ("| variant | eps | trials |\n|---|---|---|\n| a\\|b | 0.123 | 1000000 |\n"
                                  "| nonce |  | 2 |\n")
    assert markdown_table(pd.DataFrame()) == "(no rows)\n"


def test_epsilon_interval_brackets_the_point_and_matches_eq28():
    lo, pt, hi = epsilon_interval(120_000, 40_000, 10**6, 10**6, 1e-5)
    assert lo < pt < hi
    assert pt == pytest.approx(np.log((0.12 - 1e-5) / 0.04), rel=1e-6)  # point: Eq. 28 with raw rates
    assert lo == pytest.approx(epsilon_lower_from_counts(120_000, 40_000, 10**6, 10**6, 0.0125, 1e-5)[0])
    lo2, _, hi2 = epsilon_interval(120_000, 40_000, 10**6, 10**6, 1e-5, level=0.5)
    assert lo < lo2 and hi2 < hi  # narrower at a lower level
    assert epsilon_interval(0, 0, 1000, 1000, 1e-5)[:2] == (0.0, 0.0)  # no detections, no bound
    with pytest.raises(ValueError, match="level"):
        epsilon_interval(1, 1, 10, 10, 1e-5, level=1.5)


def test_summary_markdown_sections():
    rows = [{"experiment": "table2", "notebook": "04_audit", "study_arm": "long", "bank_source": "bankA",
             "variant": v, "epsilon_lower": e, "epsilon_theory": 1.695, "mu_eff": 0.7, "mu_eff_ceiling": 1.0,
             "trials": 1000} for v, e in (("nonce", 0.9), ("ordinary", 0.2), ("nonce", 1.0))]
    rows.append({"experiment": "mechanism", "notebook": "01_mechanism", "quantity": "users", "value": 25.0,
                 "note": "test split"})
    df = pd.DataFrame(rows)
    t = table_epsilon(df[df.experiment == "table2"])
    assert list(t.columns) == ["ordinary", "nonce", "epsilon_theory"] and t.iloc[0]["nonce"] == 1.0
    md = summary_markdown(df, {"preset": "tiny"}, ["figures/x.png"])
    assert "| long | bankA | 0.200 / 0.200 (0.20–0.20) | 1.000 / 0.950 (0.90–1.00) | 1.695 |" in md
    assert "| users | 25 | test split |" in md and "- [figures/x.png](figures/x.png)" in md


def test_results_md_says_which_generator_made_the_paraphrase_pools():
    """results.md's Table-2 section names each paraphrase variant's pool generator per canary (a mix when the
    `auto` route fell back to WordNet for canaries without a shipped pool); nothing for runs without the column."""
    base = {"experiment": "table2", "notebook": "04_audit", "study_arm": "long", "bank_source": "bankA",
            "epsilon_theory": 1.695, "mu_eff": 0.7, "mu_eff_ceiling": 1.0, "trials": 1000, "epsilon_lower": 0.3}
    rows = [{**base, "variant": "paraphrase-mu_eff", "pool_generator": g, "pool_source": s}
            for g, s in (("smollm2", "shipped"), ("smollm2", "shipped"), ("wordnet-synonyms", "generated"))]
    rows += [{**base, "variant": "ordinary"}]
    md = summary_markdown(pd.DataFrame(rows))
    assert "Paraphrase pools: paraphrase-mu_eff 2 × smollm2 (shipped), 1 × wordnet-synonyms." in md
    assert "Paraphrase pools" not in summary_markdown(pd.DataFrame([{**base, "variant": "ordinary"}]))


def test_llr_check_table_states_the_rule():
    """results.md shows what makes an LLR check pass (issue 14: 'expected 1 | observed 0.935 | passed True')."""
    df = pd.DataFrame([{"experiment": "llr_check", "notebook": "03_llr_checks", "check": "gaussian_ks", "variant": "nonce",
                        "expected": 0.0, "observed": 0.004, "abs_error": float("nan"), "tolerance": 0.01,
                        "rule": "at_most", "passed": True},
                       {"experiment": "llr_check", "notebook": "03_llr_checks", "check": "mean_h0", "variant": "nonce",
                        "expected": -0.5, "observed": -0.5004, "abs_error": 0.0004, "tolerance": 0.001,
                        "rule": "close", "passed": True},
                       {"experiment": "llr_check", "notebook": "03_llr_checks", "check": "full_vs_scalar",
                        "variant": "nonce", "expected": 1.0, "observed": 0.935, "abs_error": float("nan"),
                        "tolerance": 0.001, "rule": "at_least", "passed": True}])
    md = summary_markdown(df)
    assert "| at most: observed ≤ tolerance |" in md and "| abs(observed − expected) ≤ tolerance |" in md
    assert "| full_vs_scalar | nonce | 1 | 0.935 |  | at least: observed ≥ tolerance | 0.001 | True |" in md


def test_encoder_section_says_which_encoders_are_missing():
    """One encoder compares nothing: results.md names the missing Table 3 encoders and how to get them."""
    from pe_kit.text.models import mpnet_available

    row = {"experiment": "encoder", "notebook": "05_ablations", "variant": "nonce", "epsilon_lower": 0.3}
    md = summary_markdown(pd.DataFrame([{**row, "study_model": "all-MiniLM-L6-v2"}]))
    assert "Encoder comparison (Table 3 analogue) not drawn: 1 encoder audited (all-MiniLM-L6-v2)" in md
    assert "all-MiniLM-L12-v2: no offline package exists" in md
    if not mpnet_available():
        assert "all-mpnet-base-v2: PE_KIT_WITH_MPNET=1 bash scripts/bootstrap.sh" in md
    two = pd.DataFrame([{**row, "study_model": "all-MiniLM-L6-v2"}, {**row, "study_model": "all-mpnet-base-v2"}])
    assert "not drawn" not in summary_markdown(two)


def test_multiround_sections_show_arms_gain_and_both_audits():
    rows = [{"experiment": "fig2_multiround", "notebook": "06_multiround_mauve", "variant": "nonce", "arm": arm,
             "pe_seed": s, "round": t, "mauve_mean": 0.03 if arm == "dp" else 0.01, "epsilon_lower": None}
            for arm in ("dp", "control") for s in (0, 1) for t in (0, 1)]
    rows.append({"experiment": "fig2_multiround_gain", "notebook": "06_multiround_mauve", "round": 1, "gain": 0.019,
                 "ci_low": 0.014, "ci_high": 0.025, "n_seeds": 2})
    rows.append({"experiment": "fig2_multiround_audit", "notebook": "06_multiround_mauve", "releases": 1,
                 "epsilon_theory": 1.345, "epsilon_lower_frozen": 0.44, "epsilon_lower_adaptive": 0.53,
                 "frac_retention_changed": 0.0})
    md = summary_markdown(pd.DataFrame(rows))
    mr = md.split("Multi-round PE: MAUVE per round")[1].split("##")[0]
    header = next(line for line in mr.splitlines() if line.startswith("|"))
    assert [h.strip() for h in header.strip("|").split("|")][:4] == ["variant", "arm", "pe_seed", "round"]
    assert "epsilon_lower" not in mr  # no empty ε columns on the MAUVE rows
    assert "MAUVE gain of the DP feedback" in md and "0.019" in md and "0.014" in md
    audit = md.split("frozen-bank and adaptive audits")[1]
    assert "epsilon_lower_adaptive" in audit and "0.53" in audit and "1.345" in audit


def test_population_shift_per_canary_in_results_md():
    """Issue 11: results.md checks every canary's FPR at its frozen threshold, test split vs calibration split, and
    flags the canary when the two-sided Clopper–Pearson intervals are disjoint (counts: one is, one is not)."""
    from pe_kit.audit.bounds import clopper_pearson, population_shift, threshold_audit_from_counts
    from pe_kit.report.results import population_shift_table

    g, n = 0.0025, 100_000

    def row(cid, fp_cal, fp_test):
        cal = threshold_audit_from_counts(1.0, 900, fp_cal, n, n, g, 1e-5)
        tst = threshold_audit_from_counts(1.0, 900, fp_test, n, n, g, 1e-5)
        return {"experiment": "table2", "notebook": "04_audit", "study_arm": "long", "bank_source": "bankA",
                "variant": "nonce", "canary_id": cid, "epsilon_lower": tst.epsilon_lower, "calibration_epsilon": cal.epsilon_lower,
                "epsilon_theory": 1.695, "mu_eff": 0.99, "mu_eff_ceiling": 1.0, "trials": n,
                **population_shift(cal, tst, g)}

    df = pd.DataFrame([row("same", 10, 12), row("shifted", 10, 100)])
    t = population_shift_table(df)
    assert t.attrs == {"checked": 2, "flagged": 1} and list(t["canary_id"]) == ["shifted", "same"]
    assert list(t["population_shift"]) == [True, False]
    lo, hi = clopper_pearson(100, n, g, "lower"), clopper_pearson(100, n, g, "upper")
    assert t.loc[0, "fpr_test"] == f"{100 / n:.2e} [{lo:.1e}, {hi:.1e}]"
    assert hi > lo > clopper_pearson(10, n, g, "upper")  # the flagged canary's intervals are disjoint
    assert t.loc[0, "epsilon_calibration"] > t.loc[0, "epsilon_lower"]  # its bound on test collapses
    assert population_shift_table(df, flagged_only=True)["canary_id"].tolist() == ["shifted"]
    md = summary_markdown(df)
    assert "## Population shift per canary" in md and "**1 of 2 canaries flagged.**" in md
    assert "| long | bankA | nonce | shifted | 1.00e-04 [" in md and "| True |" in md and "| False |" in md
    assert population_shift_table(df.drop(columns=["fpr_test"])).attrs == {"checked": 0, "flagged": 0}


def test_encoder_table_shows_max_median_and_range():
    """Issue 11: every ε table shows the max over canaries (the paper's statistic) and the median and range."""
    rows = [{"experiment": "encoder", "notebook": "05_ablations", "variant": "nonce", "study_model": m,
             "epsilon_lower": e, "epsilon_theory": 1.695}
            for m, es in (("all-MiniLM-L6-v2", (0.2, 0.5, 0.9)), ("all-mpnet-base-v2", (0.1, 0.3, 0.4))) for e in es]
    md = summary_markdown(pd.DataFrame(rows))
    assert "max / median (min–max) ε_lower over canaries" in md
    assert "| nonce | 0.900 / 0.500 (0.20–0.90) | 0.400 / 0.300 (0.10–0.40) |" in md
