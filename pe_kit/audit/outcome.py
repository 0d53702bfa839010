"""``Audit``: the one result type of every audit in the kit, and its results-CSV row
(``pandas.DataFrame([a.row for a in audits])`` is a results table).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Mapping

__all__ = ["Audit"]

#: How ``epsilon_lower`` was bounded: a calibrated threshold test (Eq. 28, §2.1 Step 5) or a one-run bound.
METHODS = ("threshold", "steinke", "fdp")

#: Row keys that are settings (what produced the number), not measurements.
_SETTING_PREFIXES = ("mech_", "audit_", "study_")
_SETTING_KEYS = ("gamma", "variant", "canary_id", "canaries", "alpha", "delta", "sample_rate", "calibration_fraction",
                 "seed", "method")

#: columns a set field gives (None: the audit has no such column)
_HEADLINE = ("epsilon_lower", "epsilon_theory", "mu_eff", "threshold", "tpr", "fpr")
#: one set of trials' columns (``calibration_*`` / ``test_*``): the event, Eq. 28 on its counts, the bounds at γ
_SPLIT = ("threshold", "epsilon", "branch", "true_pos", "false_pos", "n_h1", "n_h0", "tpr", "fpr", "tpr_lower",
          "fpr_upper", "tnr_lower", "fnr_upper", "direction", "rule")
_ONE_RUN_COUNTS = ("guesses", "correct", "k_plus", "k_minus", "m", "n_included")


@dataclass(frozen=True)
class Audit:
    """One audit's bound and what produced it (frozen; ``info`` is a read-only copy).

    Attributes:
        epsilon_lower: the empirical lower bound on ε at δ (≥ 0; natural log): Eq. 28 on these trials, or a one-run
            bound. epsilon_theory: ``accounting.epsilon_theory`` of the audited mechanism (NaN when not told it).
        mu_eff: μ_eff (Eq. 15; ≤ 1/σ, Eq. 20); for ``fdp`` the largest rejected μ.
        threshold, direction: the event A = {score > threshold} (+1, Eq. 28) or {score ≤ threshold} (−1); one-run:
            the k₊-th highest score. rule: the threshold rule that chose it (calibration records).
        tpr, fpr, true_pos, false_pos, n_h1, n_h0: A's point rates and counts, trials per hypothesis (one-run: the
            "in" guesses' rates). branch: the branch of Eq. 28 that gave ε (0: none, 1: TPR/FPR, 2: TNR/FNR).
        tpr_lower, fpr_upper, tnr_lower, fnr_upper: one-sided Clopper–Pearson bounds at γ (Eqs. 29–30). gamma, delta,
            method (one of :data:`METHODS`). calibration: the calibration trials' record, or None.
        info: the row's further columns, in order (``dataclasses.replace(a, info={**a.info, …})`` changes them).
    Fields left None have no column; gamma, delta and method are columns only where ``info`` lists them.
    """

    epsilon_lower: float
    epsilon_theory: float | None = None
    mu_eff: float | None = None
    threshold: float | None = None
    direction: int = 1
    rule: str = ""
    tpr: float | None = None
    fpr: float | None = None
    true_pos: int | None = None
    false_pos: int | None = None
    n_h1: int | None = None
    n_h0: int | None = None
    branch: int | None = None
    tpr_lower: float | None = None
    fpr_upper: float | None = None
    tnr_lower: float | None = None
    fnr_upper: float | None = None
    gamma: float = math.nan
    delta: float = math.nan
    method: str = "threshold"
    calibration: Audit | None = None
    info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method={self.method!r} is unknown; use one of {METHODS}")
        eps = self.epsilon_lower
        if not (isinstance(eps, numbers.Real) and not isinstance(eps, bool) and eps >= 0):
            raise ValueError(f"epsilon_lower={eps!r} must be a number ≥ 0 (natural log; 0 when the trials show no "
                             "leakage): pass the bound of Eq. 28 or of a one-run audit")
        # own read-only copy: neither the caller's dict nor a reader of the result can change it
        object.__setattr__(self, "info", MappingProxyType(dict(self.info)))

    def __reduce__(self):
        """Pickle and deep-copy through ``__init__``, ``info`` as a plain dict (a read-only view does not pickle)."""
        return _rebuild, (type(self), {f.name: getattr(self, f.name) for f in fields(self)} | {"info": dict(self.info)})

    def columns(self, prefix: str = "") -> dict:
        """This set of trials' columns (``threshold``, ``epsilon``, ``branch``, counts, rates, bounds, ``direction``,
        ``rule`` when set), each name after ``prefix``: the ``calibration_*`` / ``test_*`` columns of ``row``."""
        values = {k: getattr(self, k) for k in _SPLIT if k != "epsilon"} | {"epsilon": self.epsilon_lower}
        return {prefix + k: values[k] for k in _SPLIT if k != "rule" or self.rule}

    @property
    def row(self) -> dict:
        """The audit as one results-CSV row (a fresh dict): the headline fields that are set, the ``calibration_*`` and
        ``test_*`` columns of a calibrated audit (``columns``), then ``info``."""
        out = {k: getattr(self, k) for k in _HEADLINE if getattr(self, k) is not None}
        if self.calibration is not None:
            out |= self.calibration.columns("calibration_") | self.columns("test_")
        return out | self.info

    @property
    def violation(self) -> bool:
        """ε_lower > ε_theory: the audit shows more leakage than the accountant allows (False without ε_theory)."""
        return self.epsilon_theory is not None and bool(self.epsilon_lower > self.epsilon_theory)

    @property
    def counts(self) -> dict:
        """The int counts behind the bound: ``true_pos``, ``false_pos``, ``n_h1``, ``n_h0`` (threshold) or
        ``guesses``, ``correct``, ``k_plus``, ``k_minus``, ``m``, ``n_included`` (one-run)."""
        if self.method == "threshold":
            return {k: getattr(self, k) for k in ("true_pos", "false_pos", "n_h1", "n_h0")}
        return {k: self.info[k] for k in _ONE_RUN_COUNTS}

    @property
    def settings(self) -> dict:
        """What produced the number: the row's ``mech_*`` / ``audit_*`` / ``study_*`` columns, γ, variant, canary id,
        split and seed (whichever it has)."""
        return {k: v for k, v in self.row.items() if k.startswith(_SETTING_PREFIXES) or k in _SETTING_KEYS}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Audit":
        """The threshold audit whose ``row`` is ``row`` (every non-split column into ``info``; δ from ``delta`` or
        ``audit_delta``). Raises KeyError naming the first missing column of a calibrated threshold audit's row."""
        split = {f"{s}_{k}" for s in ("calibration", "test") for k in _SPLIT}
        cal = _split_record(row, "calibration_")
        head = {k: row[k] for k in _HEADLINE[1:] if k in row}
        own = _split_record(row, "test_")
        return cls(**{**own, **head, "epsilon_lower": row["epsilon_lower"], "gamma": row.get("gamma", math.nan),
                      "delta": row.get("delta", row.get("audit_delta", math.nan)),
                      "method": row.get("method", "threshold")},
                   calibration=cls(**cal), info={k: v for k, v in row.items() if k not in split and k not in _HEADLINE})


def _split_record(row: Mapping[str, Any], prefix: str) -> dict:
    """The fields of one set of trials from its prefixed columns (``Audit.columns``)."""
    out = {k: row[prefix + k] for k in _SPLIT if k != "epsilon" and prefix + k in row}
    return {**out, "epsilon_lower": row[prefix + "epsilon"]}


def _rebuild(cls, values: dict) -> Audit:
    return cls(**values)
