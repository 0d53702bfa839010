"""Threshold rules side by side (issue 33): 1000 independent audits per μ_eff, every rule on the same trials.

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/bench_threshold_rule.py [--audits 1000] [--trials 1000000]
        [--mu 1,0.75,0.5,0] [--seed 0] [--save runs.csv] [--smoke]
    HF_HUB_OFFLINE=1 python benchmarks/bench_threshold_rule.py --combine a.csv b.csv   # pool saved runs

Setting: a nonce canary (no background voters: ℓ | H0 ~ N(−μ²/2, μ²), fixed inclusion N(+μ²/2, μ²), Eqs. 14–17)
with σ = 1, q = 0.1, δ = 1e-5, γ = 0.0025, ``--trials`` per hypothesis per split; μ_eff = 0 is a null canary
(H1 ≡ H0). Each audit draws, exactly as ``engine._audit_scalar`` with its exact ``multinomial`` method does
(``ThresholdGrid.for_problem`` grid, Binomial(n, q) inclusions, Multinomial bin counts): the calibration
histograms of H0 and H1 and — once, shared by every rule — the test histograms on the same grid. Every rule
calibrates through ``bounds.calibrate_from_counts`` (the streaming engine's own call, q passed as the engine
passes it) and so freezes a grid threshold; the test count above a grid threshold is then read off the test
histogram, which has exactly the law of the engine's exact test count at that threshold (a score falls on
a grid point with probability 0). So each rule's row is the distribution of a real audit with that rule,
and rows differ only by the rule, never by the draws.

Rules: ``argmax`` (the kit before issue 33), ``gaussian_model`` (the new default, with its
``anchored_argmax`` fallback counted in its row), ``anchored_argmax``, and three measured alternatives defined in
this script (not in ``pe_kit``, which keeps only the rules ``AuditConfig.threshold_rule`` can name):
``penalised`` (``Penalised``, γ_select = 1e-5), ``min_count`` (``MinCount``, 100 calibration false positives), and
``oracle``: ``Explicit`` at the Gaussian model's optimal threshold for the true μ_eff
(``expectations.expected_epsilon``), fixed before any trial (no row at μ = 0).
Columns: median, mean and sd of ε_lower; audits at exactly 0; audits above ε_theory (1.695 here); the
number that fell back (``gaussian_model`` only); the rule's own calibration time per audit (ms, CPU of this
process on a shared machine); the audits in the row. Time of the whole run is printed at the end. ``--save``
writes every audit's ε_lower per rule to 6 decimals (one row per audit: ``mu_eff``, ``seed``, ``audit``, one column per rule,
``gaussian_model_fell_back``), from which every column but the timing is recomputed; audits of a μ_eff may be
split over processes with distinct ``--seed`` s and ``--save``, then pooled with ``--combine`` (no timing).

Measured (this machine, 2 shared cores, ``nice -n 10``; 1000 audits per μ_eff, 10⁶ trials per hypothesis per
split, seed 0): see docs/threshold_rules.md for the table this script printed and docs/threshold_rules.csv for
its audits.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pe_kit.audit.accounting import epsilon_theory  # noqa: E402
from pe_kit.audit.bounds import calibrate_from_counts, epsilon_lower_from_counts  # noqa: E402
from pe_kit.audit.engine import ThresholdGrid, _gaussian_bin_probs  # noqa: E402
from pe_kit.audit.expectations import expected_epsilon  # noqa: E402
from pe_kit.audit.threshold_rules import (  # noqa: E402
    AnchoredArgmax,
    Argmax,
    CalibrationCounts,
    Choice,
    GaussianModel,
    ThresholdRule,
    _masked_argmax,
)
from pe_kit.audit.trials import nonce_problem  # noqa: E402

Q, GAMMA, DELTA, SIGMA = 0.1, 0.0025, 1e-5, 1.0
RULES = ("argmax", "gaussian_model", "anchored_argmax", "penalised", "min_count", "oracle")


@dataclass(frozen=True)
class Penalised(ThresholdRule):
    """Maximum of calibrated ε with the stricter γ ``gamma_select`` (< γ) on calibration: Clopper–Pearson
    widths grow as counts shrink, so far-tail events pay more. The test split still uses the audit's γ.

    Raises:
        ValueError: for gamma_select outside (0, 0.5).
    """

    gamma_select: float = 1e-5
    name: ClassVar[str] = "penalised"

    def __post_init__(self) -> None:
        if not 0 < self.gamma_select < 0.5:
            raise ValueError(f"gamma_select={self.gamma_select} must lie in (0, 0.5); e.g. 1e-5")

    def select(self, counts: CalibrationCounts) -> Choice:
        i, d, _ = _masked_argmax(counts, self.gamma_select)
        return Choice(i, d, self.name)


@dataclass(frozen=True)
class MinCount(ThresholdRule):
    """Maximum of calibrated ε over events with min(FP, FN) ≥ ``min_false_positives`` on calibration.

    Raises:
        ValueError: for a negative floor.
    """

    min_false_positives: int = 100
    name: ClassVar[str] = "min_count"

    def __post_init__(self) -> None:
        if self.min_false_positives < 0:
            raise ValueError(f"min_false_positives={self.min_false_positives} must be ≥ 0")

    def select(self, counts: CalibrationCounts) -> Choice:
        i, d, _ = _masked_argmax(counts, counts.gamma, self.min_false_positives)
        return Choice(i, d, self.name)


@dataclass(frozen=True)
class Explicit(ThresholdRule):
    """A threshold fixed before any trial (e.g. the Gaussian model's optimum at a known μ_eff): the candidate
    nearest to ``threshold`` (ties → the lower), event ``direction``. Uses no calibration count."""

    threshold: float
    direction: int = 1
    name: ClassVar[str] = "explicit"

    def __post_init__(self) -> None:
        if self.direction not in (1, -1) or not math.isfinite(self.threshold):
            raise ValueError(f"Explicit(threshold={self.threshold}, direction={self.direction}): use a finite "
                             "threshold and direction +1 or -1")

    def select(self, counts: CalibrationCounts) -> Choice:
        return Choice(int(np.argmin(np.abs(counts.thresholds - self.threshold))), self.direction, self.name)


def _args():
    from _smoke import parse_args

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--audits", type=int, default=1000, help="independent audits per mu_eff")
    ap.add_argument("--trials", type=int, default=1_000_000, help="trials per hypothesis per split")
    ap.add_argument("--mu", default="1,0.75,0.5,0", help="comma list of mu_eff (0 = null canary)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", help="also append every audit's ε_lower per rule to this CSV (for --combine)")
    ap.add_argument("--combine", nargs="+", help="print the table of saved CSV runs (their audits pooled per "
                    "μ_eff and rule; runs must use distinct seeds) instead of running audits")
    return parse_args(ap, audits=10, trials=100_000, mu="1,0")


def _hist(rng, n, p0, p1, hypothesis):
    """Bin histogram of n scores (the engine's multinomial law): H1 mixes Binomial(n, q) inclusions."""
    if hypothesis == 0:
        return rng.multinomial(n, p0)
    k = int(rng.binomial(n, Q))
    return rng.multinomial(n - k, p0) + rng.multinomial(k, p1)


def _above(h):
    return h.sum() - np.cumsum(h)[:-1]


def run_mu(mu: float, audits: int, n: int, seed: int, eps_theory: float) -> list[tuple]:
    prob = nonce_problem(mu, Q)
    grid = ThresholdGrid.for_problem(prob, n)
    thr = grid.thresholds
    p0 = _gaussian_bin_probs(grid, -prob.offset, prob.noise_sd)
    p1 = _gaussian_bin_probs(grid, -prob.offset + prob.canary_shift, prob.noise_sd)
    rules = {"argmax": Argmax(), "gaussian_model": GaussianModel(), "anchored_argmax": AnchoredArgmax(),
             "penalised": Penalised(1e-5), "min_count": MinCount(100)}
    if mu > 0:
        rules["oracle"] = Explicit(expected_epsilon(mu, Q, n, GAMMA, DELTA, return_threshold=True)[1])
    eps = {k: np.zeros(audits) for k in rules}
    secs = {k: 0.0 for k in rules}
    fell_back = {k: np.zeros(audits, dtype=bool) for k in rules}
    rng = np.random.default_rng([seed, int(round(mu * 1e6))])
    for a in range(audits):
        fp, tp = _above(_hist(rng, n, p0, p1, 0)), _above(_hist(rng, n, p0, p1, 1))
        fp_t, tp_t = _above(_hist(rng, n, p0, p1, 0)), _above(_hist(rng, n, p0, p1, 1))
        for name, rule in rules.items():
            t0 = time.process_time()
            cal = calibrate_from_counts(thr, tp, fp, n, n, GAMMA, DELTA, rule=rule, sample_rate=Q)
            secs[name] += time.process_time() - t0
            fell_back[name][a] = ">" in cal.rule
            j = int(np.searchsorted(thr, cal.threshold))
            t, f = int(tp_t[j]), int(fp_t[j])
            if cal.direction == -1:
                t, f = n - t, n - f
            eps[name][a] = epsilon_lower_from_counts(t, f, n, n, GAMMA, DELTA)[0]
    return {name: (e, fell_back[name], secs[name]) for name, e in eps.items()}


def _rows(mu: float, runs: dict, eps_theory: float) -> list[tuple]:
    rows = []
    for name, (e, fell_back, secs) in runs.items():
        rows.append((mu, name, float(np.median(e)), float(e.mean()), float(e.std(ddof=1)), int((e == 0).sum()),
                     int((e > eps_theory).sum()), int(fell_back.sum()), 1e3 * secs / e.size, e.size))
    return rows


def _save(path: str, mu: float, seed: int, runs: dict) -> None:
    """Append one row per audit (μ_eff, seed, audit, ε_lower of each rule, the default rule's fallback)."""
    names = list(runs)
    new = not Path(path).exists() or Path(path).stat().st_size == 0
    with open(path, "a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["mu_eff", "seed", "audit", *RULES, "gaussian_model_fell_back"])
        for a in range(runs[names[0]][0].size):
            w.writerow([f"{mu:g}", seed, a, *(f"{runs[k][0][a]:.6f}" if k in runs else "" for k in RULES),
                        int(runs["gaussian_model"][1][a])])


def _combine(paths) -> dict:
    """{μ: {rule: (ε array, fell-back flags, seconds = nan)}} pooled over saved runs."""
    rows = [r for path in paths for r in csv.DictReader(open(path))]
    seen = {(r["mu_eff"], r["seed"], r["audit"]) for r in rows}
    if len(seen) != len(rows):
        raise SystemExit(f"--combine {' '.join(paths)}: an audit (mu_eff, seed, audit) appears twice; pool runs "
                         "of distinct seeds")
    out: dict = {}
    for mu in sorted({float(r["mu_eff"]) for r in rows}):
        mine = [r for r in rows if float(r["mu_eff"]) == mu]
        fb = np.array([r["gaussian_model_fell_back"] == "1" for r in mine])
        out[mu] = {k: (np.array([float(r[k]) for r in mine]), fb if k == "gaussian_model" else np.zeros_like(fb),
                       float("nan")) for k in RULES if mine[0][k] != ""}
    return out


def main() -> None:
    args = _args()
    eps_theory = epsilon_theory(SIGMA, Q, DELTA)
    header = ("| μ_eff | rule | median ε_lower | mean | sd | audits at exactly 0 | above ε_theory | fell back "
              "| rule ms/audit | audits |\n|---|---|---|---|---|---|---|---|---|---|")

    def show(mu, runs):
        for r in _rows(mu, runs, eps_theory):
            print(f"| {r[0]:g} | {r[1]} | {r[2]:.3f} | {r[3]:.3f} | {r[4]:.3f} | {r[5]} | {r[6]} | {r[7]} "
                  f"| {'–' if np.isnan(r[8]) else f'{r[8]:.1f}'} | {r[9]} |", flush=True)

    if args.combine:
        print(f"threshold rules, pooled from {len(args.combine)} saved runs; eps_theory={eps_theory:.3f}")
        print(header)
        for mu, runs in sorted(_combine(args.combine).items(), reverse=True):
            show(mu, runs)
        return
    mus = [float(x) for x in args.mu.split(",")]
    print(f"threshold rules: {args.audits} audits per mu_eff, {args.trials:,} trials per hypothesis per split, "
          f"sigma={SIGMA}, q={Q}, delta={DELTA}, gamma={GAMMA}, eps_theory={eps_theory:.3f}, seed={args.seed}")
    t0 = time.perf_counter()
    print(header)
    for mu in mus:
        runs = run_mu(mu, args.audits, args.trials, args.seed, eps_theory)
        show(mu, runs)
        if args.save:
            _save(args.save, mu, args.seed, runs)
    print(f"total wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
