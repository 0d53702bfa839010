"""Audit one implementation on a battery of designs, with checks of the implementation itself, at family-wise α
(§2.1 Steps 2–5): each of the n design audits flags at level 4γ (Eq. 28), the repeat and batch-vs-call checks at γ,
so γ = α / (4n + n_checks) (``battery_gamma``); the seed and two-stage checks cannot fire for a correct
implementation and spend no α. A design's ``info["claim"]`` settings are audited at them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import Sequence

import numpy as np

from pe_kit.audit.accounting import epsilon_theory
from pe_kit.audit.blackbox import DEFAULT_DELTA, audit_implementation, look_sizes, spec_statistic
from pe_kit.audit.outcome import Audit
from pe_kit.audit.plan import Reach, announce_reach, audit_reach
from pe_kit.audit.release_checks import batch_call_check, repeat_check, seed_check, stage_check
from pe_kit.audit.release_runner import check_audit_arguments, implementation_name, seed_sequence
from pe_kit.settings import MechanismConfig
from pe_kit.settings.sections import row_columns
from pe_kit.progress import progress

__all__ = ["BatteryAudit", "audit_battery", "battery_gamma", "design_claim", "BATTERY_TRIALS"]

#: trials per hypothesis per split of each battery audit by default
BATTERY_TRIALS = 20_000


@dataclass(frozen=True)
class BatteryAudit:
    """The battery's verdict on one implementation: ``flagged`` (any design flagged or check failed) and its
    ``reasons``; ``epsilon_lower`` (the largest of the designs audited at the claim), ``mu_eff`` (the base design's);
    ``checks`` (``seed_*``, ``repeat_*``, ``batch_call_*``, ``stage_*``); the per-design ``audits`` (``info`` with
    ``axis``, ``setting``, sizes, mechanism); ``reach`` (``audit.plan.Reach`` at γ)."""

    implementation: str
    flagged: bool
    reasons: tuple
    epsilon_lower: float
    epsilon_theory: float
    mu_eff: float
    alpha: float
    gamma: float
    delta: float
    trials: int
    checks: dict
    audits: tuple
    seconds: float
    reach: Reach | None = None

    @property
    def rows(self) -> tuple:
        """The per-design rows (``Audit.row``)."""
        return tuple(a.row for a in self.audits)

    @property
    def violation(self) -> bool:
        """Some design's ε_lower exceeds ε_theory."""
        return any(a.violation for a in self.audits)

    def outcome(self) -> Audit:
        """The audit of the design with the largest ε_lower among those audited at the claim (or, when only a design
        at its own claim is flagged, of that design), with ``battery_flagged`` and ``battery_reasons`` added."""
        at_claim = [a for a in self.audits if a.info.get("at_claim", True)]
        flagged_off = [a for a in self.audits if a.violation and not a.info.get("at_claim", True)]
        pool = flagged_off if flagged_off and not any(a.violation for a in at_claim) else at_claim
        worst = max(pool, key=lambda a: a.epsilon_lower)
        return replace(worst, info={**worst.info, **self._verdict()})

    def _verdict(self) -> dict:
        return {"battery_flagged": self.flagged, "battery_reasons": "; ".join(self.reasons)}

    def as_rows(self) -> list[dict]:
        """The per-design rows, each with the battery's ``battery_flagged`` and ``battery_reasons``."""
        return [{**r, **self._verdict()} for r in self.rows]


def battery_gamma(alpha: float, designs, release) -> float:
    """γ = α / (4·n + n_checks) for n designs (or ``designs`` an int); n_checks is 1, plus 1 when ``release`` has
    ``release_batch``. Raises ValueError on α outside (0, 1) or fewer than one design."""
    n = designs if isinstance(designs, (int, np.integer)) else len(designs)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha} must lie in (0, 1)")
    if n < 1:
        raise ValueError(f"designs={designs!r} must hold at least one design")
    return float(alpha) / (4 * int(n) + 1 + int(callable(release) and hasattr(release, "release_batch")))


def design_claim(design, mechanism: MechanismConfig, delta: float) -> tuple[MechanismConfig, float]:
    """``mechanism`` and ``delta`` with ``design.info["claim"]`` applied. Raises ValueError on a claim key that is
    neither ``delta`` nor a ``MechanismConfig`` field."""
    claim = dict((getattr(design, "info", None) or {}).get("claim", {}))
    delta = float(claim.pop("delta", delta))
    fields = {f.name for f in dataclasses.fields(mechanism)}
    if set(claim) - fields:
        raise ValueError(f"design {design.name!r} claims {sorted(set(claim) - fields)}, which are no MechanismConfig "
                         f"fields; use delta or {', '.join(sorted(fields))}")
    return dataclasses.replace(mechanism, **claim), delta


def _check_reasons(checks: dict, gamma: float, repeat_calls: int) -> list[str]:
    """What the failed implementation checks say (a ``BatteryAudit``'s reasons after the designs')."""
    reasons = []
    if checks["seed_flag"]:
        reasons.append("seed not honoured: " + ("same seed gave different releases" if not checks["seed_same_release"]
                                                else "different seeds gave the same release"))
    if checks["repeat_flag"]:
        reasons.append(f"repeated releases: {checks['repeat_largest']} of {repeat_calls} H0 releases equal, "
                       f"{checks['repeat_value_largest']} equal values in one coordinate, where their precision and "
                       f"support allow any one release probability ≤ {checks['repeat_allowed']:.2g} (p ≤ "
                       f"{checks['repeat_pvalue']:.2g} < γ/4 = {gamma / 4:.2g}): noise not fresh per release (a "
                       "constant or clock seed, none on an empty batch, or none on some coordinates)")
    if checks["batch_call_flag"]:
        reasons.append(f"release_batch ≠ release(...) on P: KS p = {checks['batch_call_pvalue']:.2g} < γ = {gamma:.2g}")
    if checks["stage_flag"]:
        reasons.append(f"two stages ≠ one call: snapshot deterministic = {checks['stage_deterministic']}, "
                       f"{checks['stage_equal_calls']} of {checks['stage_calls']} staged releases equal the one-call "
                       "form")
    return reasons


def _design_row(a: Audit, design, mech: MechanismConfig, at_claim: bool, alpha: float, checks: dict) -> Audit:
    """``a`` with the design's axis, setting, sizes, α, ``at_claim``, mechanism (``mech_*``) and the checks."""
    info = dict(getattr(design, "info", {}) or {})
    return replace(a, info={**a.info, "axis": info.get("axis", "base"), "setting": info.get("setting", "base"),
                            "n_users": len(design.test), "canary_records": len(design.canary),
                            "bank_size": int(np.shape(design.bank)[0]),
                            "canary_position": str(getattr(design, "canary_position", "last")), "alpha": float(alpha),
                            "at_claim": at_claim, **row_columns("mech", mech), **checks})


def _where(i: int, designs: Sequence) -> str:
    """"design 3 of 7 (records=1)": design i (1-based) of the battery, by its axis and setting."""
    info = dict(getattr(designs[i - 1], "info", {}) or {})
    label = "base" if info.get("axis", "base") == "base" else f"{info['axis']}={info.get('setting')}"
    return f"design {i} of {len(designs)} ({label})"


def audit_battery(release, designs: Sequence, mechanism: MechanismConfig, *, trials: int = BATTERY_TRIALS,
                  alpha: float = 0.05, delta: float = DEFAULT_DELTA, seed=0, looks: int = 1, check=None,
                  check_calls: int = 2_000, repeat_calls: int = 200, stats: Sequence | None = None, scheduler=None,
                  **options) -> BatteryAudit:
    """Audit ``release`` on every design (base first) and run the implementation checks (module docstring).

    ``seed``: design i's audit uses spawn child i, the checks children n, n + 1; ``check``: the checks' design
    (default: the smallest population), with ``check_calls`` / ``repeat_calls`` releases; ``stats``: precomputed
    ``spec_statistic`` per design; ``options``: further ``audit_implementation`` keywords. Returns ``BatteryAudit``.

    Raises as ``audit_implementation``, ValueError on an empty battery; an error of the release on design i
    propagates naming the design, with the finished designs as ``exc.partial`` (or None)."""
    if len(designs) == 0:
        raise ValueError("designs is empty: pass attack.design_battery.battery_designs(...)")
    check_audit_arguments(release, designs[0], mechanism)
    t0, name = time.perf_counter(), implementation_name(release)
    gamma = battery_gamma(alpha, designs, release)
    look_sizes(trials, looks)  # bad trials or looks refused before the checks
    reach = audit_reach(mechanism, int(trials), gamma=gamma / looks, delta=delta)
    show = options.get("show_progress") is not False
    if options.pop("announce", True):
        announce_reach(reach, mechanism, show=show)
    claims = [design_claim(d, mechanism, delta) for d in designs]
    stats = list(stats) if stats is not None else [spec_statistic(d, m) for d, (m, _) in zip(designs, claims)]
    seeds = seed_sequence(seed).spawn(len(designs) + 2)
    check = check if check is not None else min(designs, key=lambda d: (len(d.test), len(d.canary)))
    checks = {**seed_check(release, check, mechanism),
              **repeat_check(release, check, mechanism, n_releases=repeat_calls, gamma=gamma, seed=seeds[-1]),
              **batch_call_check(release, check, mechanism, spec_statistic(check, mechanism), n_call=check_calls,
                                 gamma=gamma, seed=seeds[-2], scheduler=scheduler,
                                 show_progress=options.get("show_progress")),
              **stage_check(release, check, mechanism)}
    rows, reasons = [], []
    verdict = partial(_battery_audit, name, mechanism, delta, stats[0], alpha, gamma, trials, checks, reach, t0)
    bar = progress(total=4 * int(trials) * len(designs), desc=name, unit="release") if show else None
    with bar if bar is not None else contextlib.nullcontext():
        for i, (d, st, s, (mech, dlt)) in enumerate(zip(designs, stats, seeds, claims), 1):
            if bar is not None:
                bar.describe(f"{name}: {_where(i, designs)}")
                bar.update(0)  # a line naming the design now started, with the battery's ETA
            try:
                a = audit_implementation(release, d, mech, trials=trials, gamma=gamma, delta=dlt, seed=s, looks=looks,
                                         stat=st, scheduler=scheduler, announce=False, **options)
            except Exception as exc:
                exc.partial = verdict(rows, reasons)
                exc.add_note(f"{name} raised on {_where(i, designs)}, {d.name!r}, in audit_implementation(release, "
                             f"design, …); the {len(rows)} designs finished before it are exc.partial")
                raise
            own = (mech, dlt) != (mechanism, delta)  # audited at the design's own claim
            rows.append(_design_row(a, d, mech, not own, alpha, checks))
            if a.violation:
                at = f" (at q = {mech.sample_rate:g}, δ = {dlt:g})" if own else ""
                reasons.append(f"{a.info['design']}: ε_lower {a.epsilon_lower:.2f} > ε_theory "
                               f"{a.epsilon_theory:.2f}{at}")
            if bar is not None:
                bar.update(4 * int(trials))
    return verdict(rows, reasons + _check_reasons(checks, gamma, repeat_calls))


def _battery_audit(name, mechanism, delta, base_stat, alpha, gamma, trials, checks, reach, t0, rows,
                   reasons) -> BatteryAudit | None:
    """The ``BatteryAudit`` of the designs finished so far (None when none has)."""
    if not rows:
        return None
    at_claim = [a.epsilon_lower for a in rows if a.info["at_claim"]]
    return BatteryAudit(implementation=name, flagged=bool(reasons), reasons=tuple(reasons),
                        epsilon_lower=max(at_claim, default=0.0),
                        epsilon_theory=float(epsilon_theory(mechanism.noise_multiplier, mechanism.sample_rate, delta)),
                        mu_eff=float(base_stat.mu_eff) if math.isfinite(base_stat.mu_eff) else math.nan,
                        alpha=float(alpha), gamma=gamma, delta=float(delta), trials=int(trials), checks=checks,
                        audits=tuple(rows), seconds=time.perf_counter() - t0, reach=reach)
