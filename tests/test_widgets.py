"""The explorer's pure computation (reference values from the paper and design.md) and its widget wiring."""
import math

import pytest

from pe_kit.report.widgets import (
    asymptotic_epsilon,
    expected_epsilon_lower,
    explorer,
    explorer_state,
)


def test_paper_operating_point():
    # design.md: μ_eff = 1, q = 0.1, γ = 0.0025, 10⁶ trials → ε_lower median ≈ 0.96 (0.72–1.32 over seeds)
    st = explorer_state(sigma=1.0, sample_rate=0.1, trials=1_000_000, mu_eff=1.0)
    assert st["epsilon_theory"] == pytest.approx(1.695, abs=0.003)
    assert st["gamma"] == pytest.approx(0.0025)
    assert 0.90 <= st["epsilon_lower_expected"] <= 1.05
    assert st["epsilon_asymptotic"] == pytest.approx(1.685, abs=0.01)  # just below ε_theory
    assert st["epsilon_lower_expected"] < st["epsilon_asymptotic"] < st["epsilon_theory"]
    assert st["fraction_of_theory"] == pytest.approx(st["epsilon_lower_expected"] / st["epsilon_theory"])


def test_more_trials_tighter_and_no_signal_no_bound():
    eps = [expected_epsilon_lower(1.0, 0.1, t) for t in (10**4, 10**5, 10**6, 10**7)]
    assert eps == sorted(eps) and eps[0] < 0.2 and eps[-1] > 1.3
    assert expected_epsilon_lower(0.0, 0.1, 10**6) == 0.0
    assert asymptotic_epsilon(0.0, 0.1) == 0.0
    # an ordinary Blogs canary (μ_eff ≈ 0.67, design.md) sits far below a nonce one
    assert expected_epsilon_lower(0.67, 0.1, 10**6) < 0.5 * expected_epsilon_lower(1.0, 0.1, 10**6)


def test_ceiling_caps_mu_eff():
    st = explorer_state(sigma=2.0, sample_rate=0.1, trials=10**6, mu_eff=3.0)
    assert st["mu_eff_capped"] and st["mu_eff"] == pytest.approx(0.5) and st["mu_eff_ceiling"] == pytest.approx(0.5)
    default = explorer_state(sigma=2.0, sample_rate=0.1, trials=10**6)
    assert default["mu_eff"] == pytest.approx(0.5) and not default["mu_eff_capped"]
    assert default["epsilon_lower_expected"] == pytest.approx(st["epsilon_lower_expected"])


def test_multiround_sigma_reference():
    st = explorer_state(sigma=1.1088, sample_rate=0.1, trials=10**6)
    assert st["epsilon_theory"] == pytest.approx(1.345, abs=0.003)  # App. D, one release


@pytest.mark.parametrize("kwargs, field", [
    (dict(sigma=0.0, sample_rate=0.1, trials=10), "sigma"),
    (dict(sigma=1.0, sample_rate=0.0, trials=10), "sample_rate"),
    (dict(sigma=1.0, sample_rate=0.1, trials=0), "trials"),
    (dict(sigma=1.0, sample_rate=0.1, trials=10, mu_eff=-1.0), "mu_eff"),
    (dict(sigma=1.0, sample_rate=0.1, trials=10, alpha=1.5), "alpha"),
])
def test_bad_input_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        explorer_state(**kwargs)


def test_widget_updates_live():
    panel = explorer(sigma=1.0, sample_rate=0.1, trials=10**6, mu_eff=1.0, plot=False)
    first = panel.state
    assert "1.695" in panel.children[4].value
    panel.sliders["sigma"].value = 2.0  # the observer recomputes on every change
    assert panel.state["sigma"] == 2.0 and panel.state["mu_eff_capped"]
    assert panel.state["epsilon_theory"] < first["epsilon_theory"]
    panel.sliders["trials"].value = 1e4
    assert panel.state["trials"] == 10_000
    assert math.isclose(panel.state["epsilon_lower_expected"],
                        expected_epsilon_lower(0.5, 0.1, 10_000, panel.state["gamma"], 1e-5))


def test_show_explorer_is_a_static_table_when_headless(monkeypatch):
    """pe-kit reproduce's kernels get PE_KIT_HEADLESS=1: the explorer is then an HTML table, no live widgets."""
    import IPython.display

    from pe_kit.report.widgets import show_explorer

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    monkeypatch.setenv("PE_KIT_HEADLESS", "1")
    assert show_explorer(sigma=1.0, sample_rate=0.1, trials=1_000_000, mu_eff=1.0) is None
    assert len(shown) == 1 and "<b>1.695</b>" in shown[0].data  # ε_theory at σ = 1, q = 0.1


@pytest.mark.parametrize("sigma, q, trials, mu_eff, eps_theory", [
    (0.1, 0.1, 10**6, 10.0, "84.051"),      # σ below the slider's 0.3 (was clamped to 0.3: ε_theory 14.99)
    (5.0, 0.1, 10**6, 0.2, "0.089"),        # σ above 3
    (1.0, 3e-4, 10**6, 1.0, None),          # q below 10⁻³
    (1.0, 0.1, 5 * 10**9, 1.0, "1.695"),    # trials above 10⁹
    (1.0, 0.1, 200, 1.0, "1.695"),          # trials below 10³
])
def test_explorer_shows_the_mechanism_it_was_given(sigma, q, trials, mu_eff, eps_theory):
    """ipywidgets clamps a value to its slider's range silently (ipywidgets#3294): each range widens instead."""
    panel = explorer(sigma=sigma, sample_rate=q, trials=trials, mu_eff=mu_eff, plot=False)
    assert {k: s.value for k, s in panel.sliders.items()} == {"sigma": sigma, "sample_rate": q, "trials": trials,
                                                              "mu_eff": mu_eff}
    assert panel.state == explorer_state(sigma, q, trials, mu_eff)
    if eps_theory is not None:
        assert f"<b>{eps_theory}</b>" in panel.children[4].value


def test_explorer_at_ten_times_less_noise():
    from pe_kit.audit.accounting import epsilon_one_release

    st = explorer(sigma=0.1, sample_rate=0.1, trials=10**6, mu_eff=10.0, plot=False).state
    # the PRV accountant within its eps_error of the exact one-release ε (84.039)
    assert st["epsilon_theory"] == pytest.approx(84.05, abs=0.005)
    assert st["epsilon_theory"] == pytest.approx(epsilon_one_release(0.1, 0.1, 1e-5), abs=0.02)


def test_explorer_mu_eff_none_is_the_ceiling_and_the_slider_reaches_it():
    panel = explorer(sigma=0.1, sample_rate=0.1, trials=10**6, mu_eff=None, plot=False)  # once a TypeError
    assert panel.sliders["mu_eff"].value == panel.sliders["mu_eff"].max == pytest.approx(10.0)
    assert panel.state["mu_eff"] == panel.state["mu_eff_ceiling"] == pytest.approx(10.0)
    assert explorer(sigma=0.1, mu_eff=1.0, plot=False).sliders["mu_eff"].max == pytest.approx(10.0)
    assert explorer(sigma=1.0, mu_eff=1.0, plot=False).sliders["mu_eff"].max == pytest.approx(3.4)
    for bad in (float("inf"), float("nan")):  # inf once built a slider with max=inf
        with pytest.raises(ValueError, match=rf"mu_eff={bad!r} must be finite and ≥ 0, or None for the ceiling 1/σ"):
            explorer(sigma=1.0, mu_eff=bad, plot=False)


def test_explorer_refuses_before_a_slider_clamps():
    with pytest.raises(ValueError, match=r"sample_rate=1.5 is out of range: use a number in \(0, 1\]"):
        explorer(sigma=1.0, sample_rate=1.5, plot=False)  # q's slider would have clamped it to 1


def test_notebook_05_explorer_follows_set_noise_multiplier(monkeypatch):
    """Notebook 05's explorer cell under ``--set mechanism.noise_multiplier=0.2``: σ = 0.2, μ_eff = 1/σ = 5."""
    import IPython.display

    from pe_kit.settings import Preset
    from pe_kit.settings import MechanismConfig
    from pe_kit.report.widgets import show_explorer

    monkeypatch.setattr(IPython.display, "display", lambda obj: None)
    monkeypatch.delenv("PE_KIT_HEADLESS", raising=False)
    P = Preset("x").with_values({"mechanism.noise_multiplier": 0.2}).view("05_ablations")
    mech = MechanismConfig.from_params(P)
    panel = show_explorer(sigma=mech.noise_multiplier, sample_rate=mech.sample_rate, trials=int(P["trials"]),
                          mu_eff=1 / mech.noise_multiplier, delta=P["delta"], alpha=P["alpha"], plot=False)
    assert panel.sliders["sigma"].value == 0.2 and panel.sliders["mu_eff"].value == 5.0
    assert panel.state == explorer_state(0.2, 0.1, P["trials"], 5.0, P["delta"], P["alpha"])
    assert panel.state["epsilon_theory"] == pytest.approx(28.06, abs=0.01)


def test_slider_ranges_come_from_the_declarations():
    """σ, q and trials sliders start from the ranges declared with their settings (pe_kit.settings), inside the
    declared type ranges, so the explorer and --set accept and refuse the same values."""
    from pe_kit.settings import PARAM_TYPES, slider_range

    s = explorer(plot=False).sliders
    assert (s["sigma"].min, s["sigma"].max) == slider_range("noise_multiplier") == (0.3, 3.0)
    assert (10 ** s["sample_rate"].min, 10 ** s["sample_rate"].max) == pytest.approx(slider_range("sample_rate"))
    assert (10 ** s["trials"].min, 10 ** s["trials"].max) == pytest.approx(slider_range("trials")) == (1e3, 1e9)
    q = PARAM_TYPES["sample_rate"]
    assert q.lo < slider_range("sample_rate")[0] and slider_range("sample_rate")[1] <= q.hi
