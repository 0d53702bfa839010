"""Notebook 07's seeded-bug suite: ``pe.mutants`` implementations, ``attack.bug_canaries`` designs, ``audit.blackbox``
audits → rows with verdicts, ε bands and trials needed (§2.1 Steps 2–5, Eq. 28, through the implementation)."""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from pe_kit.attack.bug_canaries import DESIGNS, design_for
from pe_kit.audit.blackbox import DEFAULT_DELTA, _audit_suite, spec_statistic, trials_needed
from pe_kit.settings import MechanismConfig, check_param
from pe_kit.pe.mutants import MUTANTS, all_implementations
from pe_kit.pe.release_protocol import ReferenceRelease
from pe_kit.report.results import epsilon_interval

__all__ = ["SUITE_MECHANISM", "SUITE_DELTA", "mutant_rows", "suite_cases", "run_suite", "trials_needed_rows",
           "control_repeats"]

#: the setting the suite audits at: the paper's k, C, σ, q
SUITE_MECHANISM = MechanismConfig(top_k=5, clip_norm=0.1, noise_multiplier=1.0, sample_rate=0.1)
#: δ of the suite: the claim holds at every δ of its curve, and at 10⁻³ (not 10⁻⁵) a √2 displacement shows at ≤ 10⁵
#: trials.
SUITE_DELTA = DEFAULT_DELTA


def mutant_rows(mechanism: MechanismConfig, n_users: int = 51) -> list[dict]:
    """One row per seeded mutant: ``implementation``, ``bug``, ``breaks the guarantee (derived)`` at ``mechanism``."""
    return [{"implementation": m.name, "bug": m.bug,
             "breaks the guarantee (derived)": m().breaks_guarantee(mechanism, n_users)} for m in MUTANTS]


def suite_cases(seed: int = 0, sizes: dict | None = None, implementations: Sequence | None = None) -> list[tuple]:
    """(release, design) pairs: each implementation with its bug's design, plus the reference on every other design."""
    impls = list(implementations) if implementations is not None else all_implementations()
    sizes = dict(sizes or {})
    key = [int(k) for k in np.atleast_1d(seed)]
    cases = [(impl, design_for(impl, np.random.default_rng(key + [i]), **sizes)) for i, impl in enumerate(impls)]
    used = {design.name for impl, design in cases if isinstance(impl, ReferenceRelease)}
    for j, name in enumerate(sorted(set(DESIGNS) - used)):
        cases.append((ReferenceRelease(), DESIGNS[name](np.random.default_rng(key + [100 + j]), **sizes)))
    return cases


def _row(audit, impl, level: float | None) -> dict:
    row = audit.row
    level = 1 - 4 * audit.gamma if level is None else level  # its lower end is then ε_lower itself
    lo, pt, hi = epsilon_interval(row["test_true_pos"], row["test_false_pos"], row["test_n_h1"], row["test_n_h0"],
                                  row["delta"], level)
    row.update({"bug": getattr(impl, "bug", "") or "none (reference)", "band_level": level, "epsilon_ci_low": lo,
                "epsilon_point": pt, "epsilon_ci_high": hi,
                "flag_correct": (row["violation"] == bool(row["expected_violation"]))})
    return row


def run_suite(trials: int, *, seed: int = 0, alpha: float = 0.05, delta: float = SUITE_DELTA,
              mechanism: MechanismConfig = SUITE_MECHANISM, sizes: dict | None = None, cases: Sequence | None = None,
              level: float | None = None) -> list[dict]:
    """Audit every case (family-wise α): ``Audit.row`` plus ``bug``, the Eq. 28 band at ``level`` (default 1 − 4γ),
    ``band_level`` and ``flag_correct``."""
    cases = list(cases) if cases is not None else suite_cases(seed, sizes)
    audits = _audit_suite(cases, mechanism, trials=trials, alpha=alpha, delta=delta, seed=[int(seed), 1])
    return [_row(a, impl, level) for a, (impl, _) in zip(audits, cases)]


def trials_needed_rows(ladder: Sequence[int] = (1_000, 3_000, 10_000, 30_000, 100_000), *, seed: int = 0,
                       alpha: float = 0.05, delta: float = SUITE_DELTA, mechanism: MechanismConfig = SUITE_MECHANISM,
                       sizes: dict | None = None, cases: Sequence | None = None) -> list[dict]:
    """Per guarantee-breaking case, the smallest rung of ``ladder`` flagging it (``trials_needed``; None: never)."""
    cases = list(cases) if cases is not None else suite_cases(seed, sizes)
    gamma = alpha / (4 * len(cases))
    out = []
    for i, (impl, design) in enumerate(cases):
        stat = spec_statistic(design, mechanism)
        if not impl.breaks_guarantee(mechanism, stat.n_users + 1):
            continue
        t0 = time.perf_counter()
        needed, runs = trials_needed(impl, design, mechanism, ladder=ladder, gamma=gamma, delta=delta,
                                     seed=[int(seed), 2, i], stat=stat)
        out.append({"implementation": impl.name, "design": design.name, "bug": impl.bug, "trials_needed": needed,
                    "epsilon_lower": runs[-1].epsilon_lower, "epsilon_theory": runs[-1].epsilon_theory,
                    "seconds": time.perf_counter() - t0, "rungs": len(runs)})
    return out


def control_repeats(repeats: int, trials: int, *, seed: int = 0, alpha: float = 0.05, delta: float = SUITE_DELTA,
                    mechanism: MechanismConfig = SUITE_MECHANISM, sizes: dict | None = None) -> list[dict]:
    """Re-audit each guarantee-keeping case ``repeats`` times with fresh designs and seeds; tally the flags."""
    repeats = check_param("repeats", repeats)
    tally: dict = {}
    for r in range(repeats):
        cases = suite_cases([int(seed), 7, r], sizes)
        keep = [(impl, d) for impl, d in cases if not impl.breaks_guarantee(mechanism, len(d.test) + 1)]
        # γ as in the full suite (a repeat of the same family)
        audits = _audit_suite(keep, mechanism, trials=trials, alpha=alpha * len(keep) / len(cases), delta=delta,
                              seed=[int(seed), 8, r])
        for a in audits:
            name, design = a.info["implementation"], a.info["design"]
            t = tally.setdefault((name, design), {"implementation": name, "design": design, "repeats": 0,
                                                  "times_flagged": 0, "epsilon_lower_max": 0.0,
                                                  "epsilon_theory": a.epsilon_theory})
            t["repeats"] += 1
            t["times_flagged"] += int(a.violation)
            t["epsilon_lower_max"] = max(t["epsilon_lower_max"], a.epsilon_lower)
    return list(tally.values())
