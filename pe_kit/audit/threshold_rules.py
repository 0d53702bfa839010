"""Threshold rules: how the calibration split's counts choose the one event the test split bounds.

Source: §2.1 Step 5 of the paper (a threshold fixed on calibration trials, evaluated on fresh ones);
Eq. 28 with Eqs. 29–30 (the bounded ε each rule compares); the Gaussian pair of Eqs. 16–19 with hidden
participation (Eq. 23) for ``GaussianModel``. Style after ``jax_privacy.auditing`` (``ThresholdStrategy``
with frozen dataclasses ``Explicit``, ``Split``, ``Bonferroni``; Google DeepMind, Apache-2.0).

**Validity.** Every rule sees only the calibration split: the counts above each candidate threshold, the
trial counts n, γ, δ, the sample rate q of the mechanism and the calibration scores' moments. The test
split is drawn afterwards and bounds the single frozen event with the full γ, so any rule here — however
it uses the calibration trials — keeps the confidence of the test bound.

**Why not the plain argmax.** ``Argmax`` takes the largest
calibrated ε over 10³–10⁴ thresholds. Calibrated ε is a noisy function of the threshold, noisiest in the far
tail (few false positives), so the argmax favours far-tail thresholds where the calibration trials were
lucky; the test then sees that tail's true rates (winner's curse). It costs power, never validity. At
μ_eff = 1, q = 0.1, 10⁶ trials (``benchmarks/bench_threshold_rule.py``) the expected-ε curve drops steeply on
the tail side of its optimum (0.99 at 137 expected calibration false positives, 0.68 at 17) and gently on the
bulk side (0.88 at 850), so a rule should stay at or a little bulk-side of the optimum.

Rules (the alternatives measured beside them, ``penalised``, ``min_count`` and the fixed-threshold oracle, live in
``benchmarks/bench_threshold_rule.py``):

* ``GaussianModel(fallback, fit_sd)`` — the kit's default: the event the Gaussian model of Eqs. 16–19 would
  choose at the μ_eff the calibration trials show, located on the calibration scores by quantile; used only
  when the calibration counts agree with the model there, else ``fallback``.
* ``AnchoredArgmax(anchor_gamma, fraction)`` — the default's fallback: the maximum of calibrated ε over events
  whose min(FP, FN) is at least ``fraction`` × that of the choice at the stricter γ ``anchor_gamma``;
  model-free and scale-free.
* ``Argmax`` — the exact maximum of calibrated ε over both events {score > t} and {score ≤ t}; the rule of the
  committed runs made before the default (docs/threshold_rules.md, docs/composed.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy import special

from pe_kit.audit.confusion import best_threshold_from_counts, epsilon_lower_from_counts
from pe_kit.audit.expectations import _expected_eps_at, expected_epsilon

__all__ = ["CalibrationCounts", "Choice", "ThresholdRule", "Argmax", "AnchoredArgmax", "GaussianModel", "DEFAULT_RULE",
           "RULES", "rule_named", "moments_from_counts"]


@dataclass(frozen=True)
class CalibrationCounts:
    """Everything a rule may see: calibration-split counts, never a test trial.

    Attributes:
        thresholds: float64 (m,) strictly ascending candidate thresholds (score units).
        true_pos, false_pos: int64 (m,) #H1 / #H0 calibration trials with score > threshold (non-increasing).
        n_h1, n_h0: calibration trials per hypothesis. gamma: γ of each one-sided bound. delta: δ.
        sample_rate: q of the mechanism (needed by ``GaussianModel`` only; None: unknown).
        moments: (mean0, sd0, mean1, sd1) of the calibration scores under H0 / H1, or None.
    """

    thresholds: np.ndarray
    true_pos: np.ndarray
    false_pos: np.ndarray
    n_h1: int
    n_h0: int
    gamma: float
    delta: float
    sample_rate: float | None = None
    moments: tuple | None = None

    def event(self, direction: int) -> tuple[np.ndarray, np.ndarray]:
        """int64 (m,) (TP, FP) of the event {score > t} (+1) or {score ≤ t} (−1) at each threshold."""
        if direction == 1:
            return self.true_pos, self.false_pos
        return self.n_h1 - self.true_pos, self.n_h0 - self.false_pos

    def epsilon(self, index: int, direction: int) -> float:
        """Calibrated ε (Eq. 28) of one event."""
        tp, fp = self.event(direction)
        return float(epsilon_lower_from_counts(int(tp[index]), int(fp[index]), self.n_h1, self.n_h0,
                                               self.gamma, self.delta)[0])

    def small_count(self, index: int, direction: int) -> int:
        """min(FP, FN) of one event: the count whose Clopper–Pearson bound limits Eq. 28's branches."""
        tp, fp = self.event(direction)
        return int(min(fp[index], self.n_h1 - tp[index]))


@dataclass(frozen=True)
class Choice:
    """A rule's decision: ``index`` into the ascending thresholds (−1: no event has calibrated ε > 0),
    ``direction`` (+1: {score > t}, −1: {score ≤ t}) and ``rule`` (the name of the rule that chose; a
    fallback reads ``"gaussian_model>anchored_argmax"``)."""

    index: int
    direction: int
    rule: str


class ThresholdRule:
    """Base class of threshold rules; ``select(counts) -> Choice`` sees only ``CalibrationCounts``."""

    name: ClassVar[str] = "rule"

    def select(self, counts: CalibrationCounts) -> Choice:  # pragma: no cover - interface
        raise NotImplementedError


def _masked_argmax(c: CalibrationCounts, gamma: float, min_small: float = 0.0) -> tuple[int, int, float]:
    """(index, direction, ε) maximizing Eq. 28 at ``gamma`` over both events whose min(FP, FN) ≥ ``min_small``
    (ties → direction +1, lowest threshold of the event's order); (−1, 1, 0.0) if none is positive."""
    best = (-1, 1, 0.0)
    for direction in (1, -1):
        tp, fp = c.event(direction)
        if direction == -1:  # counts of {score ≤ t} are non-increasing in descending threshold order
            tp, fp = tp[::-1], fp[::-1]
        idx = np.flatnonzero(np.minimum(fp, c.n_h1 - tp) >= min_small)
        if idx.size == 0:
            continue
        i, eps = best_threshold_from_counts(tp[idx], fp[idx], c.n_h1, c.n_h0, gamma, c.delta)
        if i >= 0 and eps > best[2]:
            j = int(idx[i])
            best = (j if direction == 1 else c.thresholds.size - 1 - j, direction, float(eps))
    return best


@dataclass(frozen=True)
class Argmax(ThresholdRule):
    """The exact maximum of calibrated ε (Eq. 28 at the audit's γ) over every candidate and both events —
    it favours lucky far-tail thresholds (module docstring: the winner's curse)."""

    name: ClassVar[str] = "argmax"

    def select(self, counts: CalibrationCounts) -> Choice:
        i, d, _ = _masked_argmax(counts, counts.gamma)
        return Choice(i, d, self.name)


@dataclass(frozen=True)
class AnchoredArgmax(ThresholdRule):
    """Maximum of calibrated ε over events whose min(FP, FN) ≥ ``fraction`` × that of the choice maximizing it at
    the stricter γ ``anchor_gamma``.

    The choice at the stricter γ (penalising small counts) is stable but bulk-side of the optimum; the floor lets
    the argmax move tailwards by at most a factor 1/fraction in false positives, which scales with the canary (few
    false positives for a strong one, thousands for a weak one) without a model. No such choice → ``Argmax``.

    Raises:
        ValueError: for anchor_gamma outside (0, 0.5) or fraction outside (0, 1].
    """

    anchor_gamma: float = 1e-5
    fraction: float = 0.5
    name: ClassVar[str] = "anchored_argmax"

    def __post_init__(self) -> None:
        if not 0 < self.anchor_gamma < 0.5:
            raise ValueError(f"anchor_gamma={self.anchor_gamma} must lie in (0, 0.5); e.g. 1e-5")
        if not 0 < self.fraction <= 1:
            raise ValueError(f"fraction={self.fraction} must lie in (0, 1]; e.g. 0.5")

    def select(self, counts: CalibrationCounts) -> Choice:
        ia, da, _ = _masked_argmax(counts, self.anchor_gamma)
        floor = self.fraction * counts.small_count(ia, da) if ia >= 0 else 0.0
        i, d, _ = _masked_argmax(counts, counts.gamma, floor)
        return Choice(i, d, self.name)


@dataclass(frozen=True)
class GaussianModel(ThresholdRule):
    """The event the Gaussian model (Eqs. 16–19, 23) picks at the calibration split's own μ_eff.

    Steps, all on calibration trials: (1) μ̂ = (mean1 − mean0)/(q·sd0) — under the model the H1 mean exceeds
    H0's by q·(w·v) and sd0 = μ in score units, so this is μ_eff in the calibration population's own
    scale (its sign gives the direction); (2) the model's optimal threshold at μ̂, q, n, γ, δ
    (``expectations.expected_epsilon``) and its expected false-positive count f* = n0·Φ̄(z*); (3) the candidate
    whose calibration false-positive count is nearest f* (a quantile, so H0's real location and scale are
    used, not the model's); (4) a fit check: the model's TP count there, n1·[(1−q)·f/n0 + q·Φ̄(z_f − μ̂)] with
    z_f = Φ̄⁻¹(f/n0), must match the calibration TP within ``fit_sd`` sd (binomial sd and μ̂'s sd, delta
    method). Any failure — q or moments unknown, μ̂ with no expected bound, the fit check, calibrated ε = 0 at
    the event — hands the choice to ``fallback`` (recorded as ``"gaussian_model>" + fallback name``).

    Why: a rule that reads the optimum off a smooth model of the whole calibration sample, not off the
    noisiest tail counts, has the spread of a threshold fixed in advance (measured by
    ``benchmarks/bench_threshold_rule.py``, table in docs/threshold_rules.md). Its model is one release's
    score ℓ (Eqs. 14–19); a sum of mixture LLRs over rounds (``composed``) is not it, and callers there pass no
    q. Misfit costs power only (the fit check then hands over to the fallback), never validity.

    Raises:
        ValueError: for fit_sd ≤ 0 or a fallback that is not a ``ThresholdRule``.
    """

    fallback: ThresholdRule = AnchoredArgmax()
    fit_sd: float = 4.0
    name: ClassVar[str] = "gaussian_model"

    def __post_init__(self) -> None:
        if not self.fit_sd > 0:
            raise ValueError(f"fit_sd={self.fit_sd} must be > 0 (model-fit tolerance in sd); e.g. 4")
        if not isinstance(self.fallback, ThresholdRule):
            raise ValueError(f"fallback={self.fallback!r} must be a ThresholdRule, e.g. AnchoredArgmax()")

    def _fallback(self, counts: CalibrationCounts) -> Choice:
        ch = self.fallback.select(counts)
        return Choice(ch.index, ch.direction, f"{self.name}>{ch.rule}")

    def select(self, counts: CalibrationCounts) -> Choice:
        c, q = counts, counts.sample_rate
        if q is None or c.moments is None or not 0 < q <= 1:
            return self._fallback(c)
        mean0, sd0, mean1, sd1 = (float(x) for x in c.moments)
        if not (sd0 > 0 and math.isfinite(mean1 - mean0)):
            return self._fallback(c)
        mu = (mean1 - mean0) / (q * sd0)
        direction, mu = (1 if mu >= 0 else -1), abs(mu)
        n = min(c.n_h0, c.n_h1)
        if not mu > 1e-6:
            return self._fallback(c)
        eps_model, a = expected_epsilon(mu, q, n, c.gamma, c.delta, return_threshold=True)
        if eps_model <= 0:
            return self._fallback(c)
        if a < 0 and float(_expected_eps_at(-a, mu, q, n, c.gamma, c.delta)) >= eps_model * (1 - 1e-9):
            a = -a  # a tie between the two branches (q = 1 makes the pair symmetric): the usual event, few FPs
        f_target = c.n_h0 * float(special.ndtr(-(a + mu * mu / 2) / mu))
        tp, fp = c.event(direction)
        j = int(np.argmin(np.abs(fp - f_target)))
        f, t = int(fp[j]), int(tp[j])
        if not 0 < f < c.n_h0:
            return self._fallback(c)
        z = -float(special.ndtri(f / c.n_h0))
        pred = c.n_h1 * ((1 - q) * f / c.n_h0 + q * float(special.ndtr(mu - z)))
        sd_mu = math.sqrt((sd0 ** 2 + max(sd1, 0.0) ** 2) / n) / (q * sd0)
        slope = c.n_h1 * q * math.exp(-0.5 * (z - mu) ** 2) / math.sqrt(2 * math.pi)
        sd_pred = math.sqrt(pred * max(1 - pred / c.n_h1, 0.0) + (slope * sd_mu) ** 2)
        if abs(t - pred) > self.fit_sd * sd_pred or c.epsilon(j, direction) <= 0:
            return self._fallback(c)
        return Choice(j, direction, self.name)


DEFAULT_RULE: ThresholdRule = GaussianModel()

#: The rules by name, as ``AuditConfig.threshold_rule`` names them (the names ``pe_kit.settings`` accepts).
RULES: dict[str, ThresholdRule] = {"gaussian_model": DEFAULT_RULE, "argmax": Argmax(),
                                   "anchored_argmax": AnchoredArgmax()}


def rule_named(name: str | ThresholdRule | None) -> ThresholdRule:
    """The ``ThresholdRule`` called ``name`` (a rule passes through; None → ``DEFAULT_RULE``).

    Raises:
        ValueError: for an unknown name (the message lists ``RULES``).
    """
    if name is None:
        return DEFAULT_RULE
    if isinstance(name, ThresholdRule):
        return name
    if name not in RULES:
        raise ValueError(f"threshold_rule={name!r} is unknown; use one of {sorted(RULES)}")
    return RULES[name]


def moments_from_counts(thresholds: np.ndarray, above: np.ndarray, n: int) -> tuple[float, float]:
    """(mean, sd) of scores known only through counts above ascending thresholds (a fine grid spanning them).

    Each bin (t_{j−1}, t_j] holds above_{j−1} − above_j scores, counted at its midpoint; the n − above_0
    scores ≤ t_0 at t_0 − step/2 and the above_{m−1} scores > t_{m−1} at t_{m−1} + step/2 (step = the nearest
    spacing). Exact up to the binning on the engine's grid (step sd/256, ±7 sd wide).

    Args: thresholds float (m ≥ 2,); above int (m,); n ≥ 1 trials. Returns: floats (mean, sd).
    """
    t = np.asarray(thresholds, dtype=np.float64)
    a = np.asarray(above, dtype=np.float64)
    if t.size < 2:
        return float(t[0]) if t.size else 0.0, 0.0
    mass = np.concatenate([[n - a[0]], a[:-1] - a[1:], [a[-1]]])
    mid = np.concatenate([[t[0] - (t[1] - t[0]) / 2], (t[:-1] + t[1:]) / 2, [t[-1] + (t[-1] - t[-2]) / 2]])
    mean = float(mass @ mid) / n
    var = float(mass @ (mid - mean) ** 2) / n
    return mean, math.sqrt(max(var, 0.0))
