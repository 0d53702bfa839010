"""Threshold rules: how the calibration split's counts choose the one event the test split bounds.

§2.1 Step 5; Eq. 28 with Eqs. 29–30; the Gaussian pair of Eqs. 16–19, 23 for ``GaussianModel``. Every rule sees
only the calibration split, so any rule keeps the test bound's confidence; they differ in power
(docs/threshold_rules.md). Each chooses among both events {score > t} and {score ≤ t}.
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
    """Everything a rule may see: ``thresholds`` (strictly ascending), #H1 / #H0 calibration trials above each
    (``true_pos``, ``false_pos``), ``sample_rate`` q and ``moments`` (mean0, sd0, mean1, sd1) for ``GaussianModel``."""

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
    """A rule's decision: ``index`` into the thresholds (−1: no event has ε > 0), ``direction`` (+1: {score > t},
    −1: {score ≤ t}) and ``rule``, the name of the rule that chose (``"gaussian_model>anchored_argmax"``: fallback)."""

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
    """The exact maximum of calibrated ε (Eq. 28 at the audit's γ) over every candidate and both events."""

    name: ClassVar[str] = "argmax"

    def select(self, counts: CalibrationCounts) -> Choice:
        i, d, _ = _masked_argmax(counts, counts.gamma)
        return Choice(i, d, self.name)


@dataclass(frozen=True)
class AnchoredArgmax(ThresholdRule):
    """Maximum of calibrated ε over events whose min(FP, FN) ≥ ``fraction`` × that of the choice maximizing it at
    the stricter γ ``anchor_gamma`` (no such choice → ``Argmax``). Raises ValueError for anchor_gamma outside
    (0, 0.5) or fraction outside (0, 1]."""

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
    """The event the Gaussian model (Eqs. 16–19, 23) picks at the calibration split's own μ̂ = (mean1 − mean0)/(q·sd0):
    the candidate whose FP count is nearest the model's optimum (``expected_epsilon``), kept if the model's TP count
    there fits within ``fit_sd`` sd (delta method) and its ε > 0, else ``fallback`` decides.
    Raises ValueError for fit_sd ≤ 0 or a fallback that is not a ``ThresholdRule``.
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
    """The ``ThresholdRule`` called ``name`` (a rule passes through; None → ``DEFAULT_RULE``); ValueError if unknown."""
    if name is None:
        return DEFAULT_RULE
    if isinstance(name, ThresholdRule):
        return name
    if name not in RULES:
        raise ValueError(f"threshold_rule={name!r} is unknown; use one of {sorted(RULES)}")
    return RULES[name]


def moments_from_counts(thresholds: np.ndarray, above: np.ndarray, n: int) -> tuple[float, float]:
    """(mean, sd) of n scores known only through counts above ascending thresholds: each bin's scores at its
    midpoint, those below t_0 / above t_{m−1} half a step outside."""
    t = np.asarray(thresholds, dtype=np.float64)
    a = np.asarray(above, dtype=np.float64)
    if t.size < 2:
        return float(t[0]) if t.size else 0.0, 0.0
    mass = np.concatenate([[n - a[0]], a[:-1] - a[1:], [a[-1]]])
    mid = np.concatenate([[t[0] - (t[1] - t[0]) / 2], (t[:-1] + t[1:]) / 2, [t[-1] + (t[-1] - t[-2]) / 2]])
    mean = float(mass @ mid) / n
    var = float(mass @ (mid - mean) ** 2) / n
    return mean, math.sqrt(max(var, 0.0))
