"""Interactive explorer: how σ, q, the trial budget and the canary's μ_eff set ε_theory and the expected ε_lower of
a Gaussian-score audit (App. E.4–E.6, ``pe_kit.audit.expectations.expected_epsilon``). :func:`explorer_state` is
pure; :func:`explorer` wires ipywidgets sliders to it.
"""
from __future__ import annotations

import math

import numpy as np

from pe_kit.audit.accounting import epsilon_theory_or_inf
from pe_kit.settings import check_param, slider_range

__all__ = ["expected_epsilon_lower", "asymptotic_epsilon", "explorer_state", "explorer", "show_explorer"]


def _check(mu_eff: float, sample_rate: float, trials: int | None, gamma: float, delta: float) -> None:
    """ValueError unless q, trials, δ are valid settings, μ_eff ≥ 0 and γ in (0, 1)."""
    if not (np.isfinite(mu_eff) and mu_eff >= 0):
        raise ValueError(f"mu_eff={mu_eff!r} must be a finite number ≥ 0")
    check_param("sample_rate", sample_rate), check_param("delta", delta)
    if trials is not None:
        check_param("trials", trials)
    if not 0 < gamma < 1:
        raise ValueError(f"gamma={gamma!r} must lie in (0, 1), e.g. α/(4·5) = 0.0025")


def expected_epsilon_lower(mu_eff: float, sample_rate: float, trials: int, gamma: float = 0.0025,
                           delta: float = 1e-5) -> float:
    """Expected ε_lower, maximized over thresholds (≈0.99 at μ_eff=1, q=0.1, 10⁶ trials per hypothesis); ``gamma``:
    tail of each Clopper–Pearson bound. Raises ValueError naming an out-of-range argument."""
    from pe_kit.audit.expectations import expected_epsilon

    _check(mu_eff, sample_rate, trials, gamma, delta)
    return 0.0 if mu_eff == 0 else float(expected_epsilon(float(mu_eff), float(sample_rate), int(trials), gamma, delta))


def asymptotic_epsilon(mu_eff: float, sample_rate: float, delta: float = 1e-5) -> float:
    """The ε an infinitely long threshold audit converges to (Eq. 28 at exact rates): ≈1.685 at μ_eff=1, q=0.1."""
    from pe_kit.audit.expectations import expected_epsilon

    _check(mu_eff, sample_rate, None, 0.5, delta)
    return 0.0 if mu_eff == 0 else float(expected_epsilon(float(mu_eff), float(sample_rate), None, 0.0025, delta))


def explorer_state(sigma: float, sample_rate: float, trials: int, mu_eff: float | None = None, delta: float = 1e-5,
                   alpha: float = 0.05, n_canaries: int = 5) -> dict:
    """Everything the explorer shows for one slider position (a dict). ``mu_eff``: None = the ceiling 1/σ; values
    above it are capped (Eq. 20). γ = α / (4·n_canaries) (App. E.6). Raises ValueError naming an out-of-range
    argument."""
    if not (np.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma={sigma!r} must be > 0 (the noise multiplier)")
    alpha, n_canaries = check_param("alpha", alpha), check_param("n_canaries", n_canaries)
    if mu_eff is not None and not np.isfinite(mu_eff):
        raise ValueError(f"mu_eff={mu_eff!r} must be finite and ≥ 0, or None for the ceiling 1/σ")
    ceiling = 1.0 / float(sigma)
    mu = ceiling if mu_eff is None else float(mu_eff)
    capped = mu > ceiling
    mu = min(mu, ceiling)
    gamma = alpha / (4 * int(n_canaries))
    expected = expected_epsilon_lower(mu, sample_rate, trials, gamma, delta)  # checks q, trials, δ
    theory = epsilon_theory_or_inf(float(sigma), float(sample_rate), float(delta))
    return {"sigma": float(sigma), "sample_rate": float(sample_rate), "trials": int(trials), "delta": float(delta),
            "gamma": gamma, "mu_eff": mu, "mu_eff_ceiling": ceiling, "mu_eff_capped": bool(capped),
            "epsilon_theory": theory, "epsilon_lower_expected": expected,
            "epsilon_asymptotic": asymptotic_epsilon(mu, sample_rate, delta),
            "fraction_of_theory": expected / theory if theory and math.isfinite(theory) else float("nan")}


def _html(state: dict) -> str:
    cap = " (capped at the ceiling 1/σ)" if state["mu_eff_capped"] else ""
    rows = [("ε_theory (Opacus PRV, 1 release)", f"{state['epsilon_theory']:.3f}"),
            ("expected ε_lower", f"{state['epsilon_lower_expected']:.3f} "
                                  f"({100 * state['fraction_of_theory']:.0f}% of ε_theory)"),
            ("ε as trials → ∞", f"{state['epsilon_asymptotic']:.3f}"),
            ("μ_eff used", f"{state['mu_eff']:.3f}{cap}"), ("ceiling 1/σ", f"{state['mu_eff_ceiling']:.3f}"),
            ("γ per bound", f"{state['gamma']:.4g}"), ("trials per hypothesis", f"{state['trials']:,}")]
    body = "".join(f"<tr><td>{k}</td><td><b>{v}</b></td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def explorer(sigma: float = 1.0, sample_rate: float = 0.1, trials: int = 1_000_000, mu_eff: float | None = 1.0,
             delta: float = 1e-5, alpha: float = 0.05, n_canaries: int = 5, plot: bool = True):
    """An ipywidgets ``VBox``: sliders for σ, q, trials and μ_eff, a live table of :func:`explorer_state` and
    (``plot``) both ε against the trial budget; ``.state`` and ``.sliders`` for scripts. Slider ranges widen to hold
    the given values. Raises ValueError for out-of-range settings; ImportError without ipywidgets."""
    import ipywidgets as W

    explorer_state(sigma, sample_rate, trials, mu_eff, delta, alpha, n_canaries)  # refuse before a slider clamps

    common = dict(style={"description_width": "110px"}, layout=W.Layout(width="460px"), continuous_update=False)
    (s_lo, s_hi), (q_lo, q_hi), (t_lo, t_hi) = map(slider_range, ("noise_multiplier", "sample_rate", "trials"))
    s_sigma = W.FloatSlider(value=sigma, min=min(s_lo, sigma), max=max(s_hi, sigma), step=0.05, readout_format=".4g",
                            description="σ (noise)", **common)
    s_q = W.FloatLogSlider(value=sample_rate, base=10, min=min(math.log10(q_lo), math.floor(math.log10(sample_rate))),
                           max=math.log10(q_hi), step=0.05, description="q (sampling)", **common)
    s_t = W.FloatLogSlider(value=trials, base=10, min=min(math.log10(t_lo), math.floor(math.log10(trials))),
                           max=max(math.log10(t_hi), math.ceil(math.log10(trials))), step=0.25, description="trials",
                           **common)
    mu_eff = 1.0 / sigma if mu_eff is None else mu_eff  # None: the ceiling 1/σ, as explorer_state
    s_mu = W.FloatSlider(value=mu_eff, min=0.0, max=max(3.4, mu_eff, 1.0 / s_sigma.min), step=0.01,
                         description="μ_eff", **common)
    table = W.HTML()
    out = W.Output()
    box = W.VBox([s_sigma, s_q, s_t, s_mu, table, out])

    def update(*_):
        st = explorer_state(s_sigma.value, s_q.value, int(round(s_t.value)), s_mu.value, delta, alpha, n_canaries)
        box.state = st
        table.value = _html(st)
        if plot:
            import matplotlib.pyplot as plt

            ts = np.unique(np.round(np.logspace(s_t.min, s_t.max, 19)).astype(np.int64))
            ys = [expected_epsilon_lower(st["mu_eff"], st["sample_rate"], int(t), st["gamma"], delta) for t in ts]
            out.clear_output(wait=True)
            with out:
                fig, ax = plt.subplots(figsize=(5.2, 3.0))
                ax.semilogx(ts, ys, "o-", ms=3, label="expected ε_lower")
                ax.axhline(st["epsilon_theory"], color="k", ls="--", lw=1, label="ε_theory")
                ax.axhline(st["epsilon_asymptotic"], color="gray", ls=":", lw=1, label="trials → ∞")
                ax.axvline(st["trials"], color="C3", lw=0.8)
                ax.set(xlabel="trials per hypothesis", ylabel="ε", ylim=(0, None))
                ax.legend(fontsize=8, loc="lower right")
                fig.tight_layout()
                plt.show()

    for s in (s_sigma, s_q, s_t, s_mu):
        s.observe(update, names="value")
    box.sliders = {"sigma": s_sigma, "sample_rate": s_q, "trials": s_t, "mu_eff": s_mu}
    update()
    return box


def show_explorer(sigma: float = 1.0, sample_rate: float = 0.1, trials: int = 1_000_000, mu_eff: float = 1.0,
                  **kwargs):
    """Display the explorer (``kwargs`` go to :func:`explorer`) and return it, or, with ``PE_KIT_HEADLESS`` set, a
    static :func:`explorer_state` table and None."""
    from IPython.display import HTML, display

    from pe_kit.progress import headless

    if headless():
        keep = {k: v for k, v in kwargs.items() if k in ("delta", "alpha", "n_canaries")}
        display(HTML(_html(explorer_state(sigma, sample_rate, trials, mu_eff, **keep))))
        return None
    panel = explorer(sigma=sigma, sample_rate=sample_rate, trials=trials, mu_eff=mu_eff, **kwargs)
    display(panel)
    return panel
