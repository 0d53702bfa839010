"""benchmarks/fidelity_mu_eff.py --compare: quick-size against paper-size μ_eff on the same canaries (issue 11)."""
import importlib.util
from pathlib import Path

import pandas as pd
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "fidelity_mu_eff.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("fidelity_mu_eff", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows():
    rows = []
    for variant, quick, paper in (("ordinary", (0.50, 0.60, 0.70), (0.46, 0.55, 0.68)),
                                  ("exact", (0.70, 0.80, 0.90), (0.60, 0.70, 0.85))):
        for j, (a, b) in enumerate(zip(quick, paper)):
            for n, mu in ((300, a), (1000, b)):
                rows.append({"token_cap": 64, "bank_size": 8192, "n_aux": 150, "n_test": n, "variant": variant,
                             "canary": j, "canary_id": f"{variant}-{j}", "mu_eff": mu})
    rows.append({**rows[-1], "canary_id": "only-at-1000"})  # a canary missing at the quick size is left out
    return pd.DataFrame(rows)


def test_compare_sizes_medians_and_per_canary_changes(bench):
    out = bench.compare_sizes(_rows(), {"n_test": 300}, {"n_test": 1000}, tolerance=0.05).set_index("variant")
    assert list(out.index) == ["ordinary", "exact"] and (out["canaries"] == 3).all()
    o, e = out.loc["ordinary"], out.loc["exact"]
    assert (o.mu_eff_quick, o.mu_eff_paper) == pytest.approx((0.60, 0.55))
    assert o.median_change == pytest.approx(-0.05) and bool(o.within)  # |−0.05| ≤ 0.05
    assert (o.canary_change_min, o.canary_change_median, o.canary_change_max) == pytest.approx((-0.05, -0.04, -0.02))
    assert e.median_change == pytest.approx(-0.10) and not bool(e.within)
    assert (e.canary_change_min, e.canary_change_max) == pytest.approx((-0.10, -0.05))


def test_compare_sizes_refuses_empty_or_ambiguous_settings(bench):
    df = _rows()
    with pytest.raises(ValueError, match="selects no row"):
        bench.compare_sizes(df, {"n_test": 290}, {"n_test": 1000})
    twice = pd.concat([df, df.assign(n_aux=300)])
    with pytest.raises(ValueError, match="more than once"):
        bench.compare_sizes(twice, {"n_test": 300}, {"n_test": 1000})
    assert bench.parse_size("token_cap=64, n_test=300,arm=long") == {"token_cap": 64, "n_test": 300, "arm": "long"}
    with pytest.raises(ValueError, match="key=value"):
        bench.parse_size("trials=5")


def test_committed_fidelity_csv_quick_vs_paper_ordinary_within_005(bench):
    """docs/fidelity_mu_eff_A.csv (p = 8192, 64-token cap): the ordinary median at N = 300, 150 aux users lies within
    0.05 of the N = 1000, 300 aux users value on the same five canaries; exact and paraphrase-μ_eff do not."""
    df = pd.read_csv(BENCH.parents[1] / "docs" / "fidelity_mu_eff_A.csv")
    quick = bench.parse_size("token_cap=64,bank_size=8192,n_aux=150,n_test=300")
    paper = bench.parse_size("token_cap=64,bank_size=8192,n_aux=300,n_test=1000")
    out = bench.compare_sizes(df, quick, paper).set_index("variant")
    assert (out["canaries"] == 5).all()
    assert out.loc["ordinary", "median_change"] == pytest.approx(-0.047, abs=0.001) and out.loc["ordinary", "within"]
    assert not out.loc["exact", "within"] and not out.loc["paraphrase-mu_eff", "within"]
