"""The public result of every top-level audit call (``pe_kit.audit_mechanism``, ``audit_scores``, ``audit_one_run``).

One frozen record with the fields a reader looks at first (ε_lower, ε_theory, μ_eff, the audited event's TPR and
FPR, its threshold and counts, the settings) and the full tidy ``row`` whose keys are the column names of the kit's
CSV files (``results.csv``; ``AuditResult.as_row`` and ``pe_kit.study.world.audit_design``), so a list of results
is a results table: ``pandas.DataFrame([r.as_row() for r in results])``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["AuditOutcome", "settings_of"]

#: How ``epsilon_lower`` was bounded: a calibrated threshold test bounded by Clopper–Pearson (Eq. 28, §2.1 Step 5), or
#: one of the two one-run bounds of ``pe_kit.audit.one_run`` (Steinke et al. 2023; Mahloujifar et al. 2024, f-DP).
METHODS = ("threshold", "steinke", "fdp")

#: Row keys that are settings (what produced the number), not measurements.
_SETTING_PREFIXES = ("mech_", "audit_", "study_")
_SETTING_KEYS = ("gamma", "variant", "canary_id", "canaries", "alpha", "delta", "sample_rate", "calibration_fraction",
                 "seed", "method")


def settings_of(row: Mapping[str, Any]) -> dict:
    """The settings part of a tidy row: every ``mech_*`` / ``audit_*`` / ``study_*`` column plus γ, the variant, the
    canary id, the split and the seed (whichever the row has)."""
    return {k: v for k, v in row.items() if k.startswith(_SETTING_PREFIXES) or k in _SETTING_KEYS}


@dataclass(frozen=True)
class AuditOutcome:
    """The outcome of one audit, as one CSV row (frozen: no attribute can be rebound).

    Attributes:
        method: one of :data:`METHODS`.
        epsilon_lower: the empirical lower bound on ε at δ (≥ 0; unitless, natural log).
        epsilon_theory: the accountant's ε for the audited mechanism (``accounting.epsilon_theory``: one
            Poisson-subsampled Gaussian release at σ, q, δ, add/remove of one user); NaN when the call was not told
            the mechanism (``audit_scores`` / ``audit_one_run`` without ``noise_multiplier``).
        mu_eff: the canary's effective signal μ_eff (Eq. 15; ≤ 1/σ, Eq. 20) when the kit built the statistic; for
            ``fdp`` the largest rejected μ (``mu_lower``); NaN when unknown (scores supplied by the user).
        tpr, fpr: point rates of the audited event on the evaluated trials (threshold: test split; one-run: the
            k₊ top-scored canaries guessed "in", as a share of the included / excluded canaries).
        threshold: score value of the audited event (score units of the statistic).
        direction: +1 the event is {score > threshold} (Eq. 28 as written), −1 {score ≤ threshold}
            (``audit.bounds`` module docstring; one-run: always +1).
        counts: int counts behind the bound: ``true_pos``, ``false_pos``, ``n_h1``, ``n_h0`` (threshold) or
            ``guesses``, ``correct``, ``k_plus``, ``k_minus``, ``m``, ``n_included`` (one-run).
        settings: what produced the number (:func:`settings_of` of ``row``).
        row: the full tidy row, keys as the kit's CSV columns (``epsilon_lower``, ``epsilon_theory``, ``mu_eff``,
            ``tpr``, ``fpr``, ``threshold``, ``test_true_pos`` …, ``mech_*``, ``audit_*``, ``gamma``).
    """

    method: str
    epsilon_lower: float
    epsilon_theory: float
    mu_eff: float
    tpr: float
    fpr: float
    threshold: float
    direction: int
    counts: Mapping[str, int] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    row: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method={self.method!r} is unknown; use one of {METHODS}")
        for name in ("counts", "settings", "row"):  # own copies: the caller's dicts cannot change a result
            object.__setattr__(self, name, dict(getattr(self, name)))

    def as_row(self) -> dict:
        """A copy of the tidy row (one line of a results CSV)."""
        return dict(self.row)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "AuditOutcome":
        """The outcome of a threshold audit from its tidy row (``AuditResult.as_row`` keys: ``test_true_pos`` …).

        Raises:
            KeyError: naming the first missing column when ``row`` is not a threshold-audit row.
        """
        counts = {k: int(row[f"test_{k}"]) for k in ("true_pos", "false_pos", "n_h1", "n_h0")}
        return cls(method="threshold", epsilon_lower=float(row["epsilon_lower"]),
                   epsilon_theory=float(row.get("epsilon_theory", math.nan)), mu_eff=float(row.get("mu_eff", math.nan)),
                   tpr=float(row["tpr"]), fpr=float(row["fpr"]), threshold=float(row["threshold"]),
                   direction=int(row.get("test_direction", 1)), counts=counts, settings=settings_of(row), row=row)
