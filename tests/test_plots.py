"""Figures: each plot function draws what its rows say, and save_figure writes non-empty PNG + PDF."""
import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from pe_kit.report import plots  # noqa: E402
from pe_kit.report.results import add_epsilon_interval, table_epsilon


def _audit_rows():
    rows = []
    for arm in ("long", "short"):
        for bank in ("bankA", "public"):
            for i, (variant, eps) in enumerate((("ordinary", 0.25), ("exact", 0.35), ("nonce", 1.05))):
                for c in range(2):
                    rows.append({"study_arm": arm, "bank_source": bank, "variant": variant,
                                 "epsilon_lower": eps - 0.05 * c, "epsilon_theory": 1.695, "mu_eff": 0.6 + 0.2 * i,
                                 "mu_eff_ceiling": 1.0, "canary_votes_on_P": 1.0 if variant != "exact" else 0.5,
                                 "test_true_pos": 120_000, "test_false_pos": 40_000, "test_n_h1": 10**6,
                                 "test_n_h0": 10**6, "audit_delta": 1e-5, "mech_noise_multiplier": 1.0,
                                 "mech_sample_rate": 0.1, "study_model": "all-MiniLM-L6-v2", "trials": 10**6})
    return pd.DataFrame(rows)


def test_save_figure_writes_png_and_pdf(tmp_path):
    fig = plots.plot_vote_norms(np.linspace(0.05, 0.4, 50), 0.1)
    paths = plots.save_figure(fig, tmp_path, "01_mechanism_vote_norms")
    assert [p.name for p in paths] == ["01_mechanism_vote_norms.png", "01_mechanism_vote_norms.pdf"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[1].read_bytes()[:5] == b"%PDF-"
    assert all(p.stat().st_size > 5000 for p in paths)
    with pytest.raises(ValueError, match="name"):
        plots.save_figure(fig, tmp_path, "a/b")
    # the title reports the clipped share: values above C = 0.1 out of 50 evenly spaced in [0.05, 0.4]
    assert fig.axes[0].get_title() == f"{(np.linspace(0.05, 0.4, 50) > 0.1).mean():.0%} of users are clipped"


def test_heatmap_annotates_the_table():
    df = _audit_rows()
    table = table_epsilon(df)
    assert list(table.columns) == ["ordinary", "exact", "nonce", "epsilon_theory"]
    assert table.loc[("long", "bankA"), "nonce"] == pytest.approx(1.05)  # max over the two canaries
    fig = plots.plot_epsilon_heatmap(table)
    texts = sorted({t.get_text() for t in fig.axes[0].texts})
    assert texts == ["0.250", "0.350", "1.050", "1.695"]
    with pytest.raises(ValueError, match="empty"):
        plots.plot_epsilon_heatmap(pd.DataFrame())


def test_design_by_canary_encoder_and_tightness_plots(tmp_path):
    df = _audit_rows()
    for fig, name in ((plots.plot_design(df), "design"), (plots.plot_epsilon_by_canary(df), "by_canary"),
                      (plots.plot_encoder_ablation(df), "encoders")):
        assert all(p.stat().st_size > 0 for p in plots.save_figure(fig, tmp_path, name))
    assert len(plots.plot_epsilon_by_canary(df).axes) == 4  # one panel per (arm, bank)
    with pytest.raises(ValueError, match="mu_eff"):
        plots.plot_design(df.drop(columns="mu_eff"))
    tight = pd.DataFrame({"variant": "nonce", "trials": [10**3, 10**4, 10**5], "epsilon_lower": [0.0, 0.1, 0.5],
                          "epsilon_expected": [0.0, 0.14, 0.55], "epsilon_theory": 1.695})
    fig = plots.plot_tightness(tight)
    assert fig.axes[0].get_xscale() == "log"
    line = fig.axes[0].lines[0]
    assert list(line.get_ydata()) == [0.0, 0.1, 0.5]


def test_sweep_plot_band_and_theory():
    rows = _audit_rows()
    rows = rows[(rows.study_arm == "short") & (rows.bank_source == "bankA")].copy()
    frames = []
    for s in (0.5, 1.0, 2.0):
        r = rows.copy()
        r["mech_noise_multiplier"] = s
        frames.append(r)
    df = add_epsilon_interval(pd.concat(frames))
    assert (df["epsilon_ci_low"] <= df["epsilon_point"]).all() and (df["epsilon_point"] <= df["epsilon_ci_high"]).all()
    fig = plots.plot_sweep(df, "noise_multiplier", ([0.5, 2.0], [6.6, 0.4]))
    ax = fig.axes[0]
    assert ax.get_xlabel() == "noise multiplier σ"
    assert len(ax.collections) == 3  # one 95% band per variant
    assert [line.get_label() for line in ax.lines][-1] == "ε_theory"
    with pytest.raises(ValueError, match="field"):
        plots.plot_sweep(df, "top_k")


def test_llr_plots_from_draws():
    rng = np.random.default_rng(0)
    mu, q = 1.0, 0.1
    h0 = rng.normal(-mu**2 / 2, mu, 20_000)
    inc = rng.normal(mu**2 / 2, mu, 20_000)
    ths = np.quantile(h0, np.linspace(0.5, 0.99, 10))
    d = {"nonce": {"mu": mu, "h0": h0, "inc": inc, "q": q, "thresholds": ths,
                   "fpr": (h0[None] > ths[:, None]).mean(1), "tpr_inc": (inc[None] > ths[:, None]).mean(1),
                   "tpr": (h0[None] > ths[:, None]).mean(1) * 0.9 + 0.1 * (inc[None] > ths[:, None]).mean(1),
                   "bin_centers": np.linspace(-2, 2, 10), "log_ratio": np.zeros(10)}}
    assert len(plots.plot_score_distributions(d).axes) == 1
    assert len(plots.plot_mixture_checks(d).axes) == 2
