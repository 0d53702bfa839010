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
