"""Why the kit's f-DP column differs from Mahloujifar, Melis, Chaudhuri (ICML 2025, arXiv 2410.22235), Table 1.

Plays the source's idealised game (App. D, Algorithm 4: s_i = ±1, output s_i + N(0, (2σ)²), so μ = 1/σ; k₊ = k₋ =
c′/2; c = the mean over ``--repeats`` games, rounded down) and prints the f-DP bound at δ = 1e-5, best over a
geometric grid of 90 even c′ in [40, 30 000], under each setting tested (rows of the table in
``notebooks/steps/one_run_checks.py``):

  stated        the stated procedure: τ = 0.05, m of Table 1, Algorithm 3 with abstention (``mu_lower_fdp``)
  tau=0.1/0.2   another confidence τ
  delta=1e-6    μ from τ = 0.05, ε read at δ = 1e-6 (the default of Meta's privacy_guard FDPAnalysisNode)
  alg4          Algorithm 4's count exactly: c = 2 × the correct guesses among the c′/2 top outputs
  alg4_odd      Algorithm 4 at odd c′ + 1: top (c′+1)/2 outputs, c = ⌈c′ · precision⌉ per game
  k_plus_only   "in" for the c′ top outputs, no "out" guess
  bonferroni    τ = 0.05 / 90 per c′ (family-wise over the grid)
  nomax         Algorithm 3 as printed (h_i = f̄⁻¹(r_{i+1}), no max with h_{i+1}), near the stated best c′
  m_eq_cprime   no abstention, the audit told m = c′ (only the guessed canaries; not a valid test)
  pergame_*     the bound per game at the stated best c′ (mean, median, max over games), and per game at its
                own best c′ (mean, median: an oracle choice of c′)
  m=1e6, m=1e7  the stated procedure at other numbers of canaries (Figure 1 spans 10²–10⁷)

    PYTHONPATH=. python benchmarks/one_run_fdp_gap.py [--sigmas 0.5 1 2 4] [--repeats 100]

About 15 minutes for all four σ at 100 games on one core (m = 10⁷ plays 20 games).
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy import special

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "notebooks"))  # the notebooks' step modules (steps)

from pe_kit.audit.one_run import epsilon_from_mu, mu_lower_fdp  # noqa: E402
from steps.one_run_checks import TABLE1, guess_grid  # noqa: E402


def play(mu: float, m: int, guesses: np.ndarray, games: int, rng: np.random.Generator) -> dict:
    """Per-game correct counts (games, len(guesses)) of the guessers compared (Algorithm 4's game)."""
    k = int(guesses.max()) + 2
    out = {name: np.empty((games, guesses.size)) for name in ("split", "alg4", "alg4_odd", "k_plus_only")}
    half, odd = guesses // 2, guesses + 1
    for g in range(games):
        s = rng.random(m) < 0.5
        y = np.where(s, 1.0, -1.0) + rng.normal(0.0, 2.0 / mu, m)
        top = np.argpartition(-y, k)[:k]
        top = top[np.argsort(-y[top])]
        bottom = np.argpartition(y, k)[:k]
        bottom = bottom[np.argsort(y[bottom])]
        right_top, right_bottom = np.cumsum(s[top]), np.cumsum(~s[bottom])
        out["split"][g] = right_top[half - 1] + right_bottom[half - 1]
        out["alg4"][g] = 2 * right_top[half - 1]
        h = (odd + 1) // 2
        out["alg4_odd"][g] = np.ceil(odd * right_top[h - 1] / h)
        out["k_plus_only"][g] = right_top[guesses - 1]
    return out


def eps(mu_lower: float, delta: float = 1e-5) -> float:
    return epsilon_from_mu(mu_lower, 1.0, delta) if mu_lower > 0 else 0.0


def best(m: int, guesses, correct, bound) -> tuple[float, int]:
    vals = [bound(m, int(g), int(c)) for g, c in zip(guesses, correct)]
    j = int(np.argmax(vals))
    return float(vals[j]), int(guesses[j])


def rejects_as_printed(m: int, r: int, v: int, mu: float, tau: float) -> bool:
    """Algorithm 3 exactly as printed in the source (no max in line 5)."""
    h, rr = tau * (r - v) / m, tau * v / m
    for i in range(v - 1, -1, -1):
        h_new = float(special.ndtr(special.ndtri(min(rr, 1.0)) - mu))
        rr, h = rr + i / (r - i) * (h_new - h), h_new
    return rr + h > r / m


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sigmas", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0])
    ap.add_argument("--repeats", type=int, default=100)
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--other-ms", type=int, nargs="*", default=[10**6, 10**7], help="the stated rule at these m too")
    from _smoke import parse_args

    a = parse_args(ap, sigmas=[2.0], repeats=2, other_ms=[])
    for sigma in a.sigmas:
        t0, row, mu = time.perf_counter(), {}, 1 / sigma
        m = TABLE1[sigma]["m"]
        grid = guess_grid(m, lo=40, hi=30_000, n=90)
        per = play(mu, m, grid, a.repeats, np.random.default_rng([a.seed, int(sigma * 100), m]))
        c = {k: np.floor(v.mean(axis=0)).astype(int) for k, v in per.items()}
        fdp = lambda tau, delta=1e-5: (lambda mm, g, cc: eps(mu_lower_fdp(mm, g, cc, tau), delta))  # noqa: E731
        row["stated"], g_best = best(m, grid, c["split"], fdp(0.05))
        for tau in (0.1, 0.2):
            row[f"tau={tau}"] = best(m, grid, c["split"], fdp(tau))[0]
        row["delta=1e-6"] = best(m, grid, c["split"], fdp(0.05, 1e-6))[0]
        row["alg4"] = best(m, grid, c["alg4"], fdp(0.05))[0]
        row["alg4_odd"] = best(m, grid + 1, c["alg4_odd"], fdp(0.05))[0]
        row["k_plus_only"] = best(m, grid, c["k_plus_only"], fdp(0.05))[0]
        row["bonferroni"] = best(m, grid, c["split"], fdp(0.05 / grid.size))[0]
        j = int(np.flatnonzero(grid == g_best)[0])
        near = slice(max(0, j - 6), j + 7)
        mus = np.arange(0.01, 3.0, 0.005)
        row["nomax"] = best(m, grid[near], c["split"][near], lambda mm, g, cc: eps(max(
            [x for x in mus if rejects_as_printed(mm, g, cc, x, 0.05)], default=0.0)))[0]
        row["m_eq_cprime"] = best(m, grid, c["split"], lambda mm, g, cc: eps(mu_lower_fdp(g, g, cc, 0.05)))[0]
        games = np.array([eps(mu_lower_fdp(m, g_best, int(v), 0.05)) for v in per["split"][:, j]])
        row["pergame_mean"], row["pergame_median"], row["pergame_max"] = games.mean(), np.median(games), games.max()
        own = [best(m, grid, per["split"][g].astype(int), fdp(0.05))[0] for g in range(min(a.repeats, 50))]
        row["pergame_own_c'_mean"], row["pergame_own_c'_median"] = float(np.mean(own)), float(np.median(own))
        for m_other in a.other_ms:
            if m_other == m:
                continue
            games_m = a.repeats if m_other <= 10**6 else max(10, a.repeats // 5)
            per_m = play(mu, m_other, grid, games_m, np.random.default_rng([a.seed, int(sigma * 100), m_other]))
            row[f"m={m_other:.0e}"] = best(m_other, grid, np.floor(per_m["split"].mean(axis=0)).astype(int),
                                           fdp(0.05))[0]
        print(f"σ = {sigma:g} (m = {m:,}; published {TABLE1[sigma]['fdp']}; stated best c′ = {g_best}; "
              f"{time.perf_counter() - t0:.0f} s)")
        for k, v in row.items():
            print(f"  {k:24s} {v:7.3f}")


if __name__ == "__main__":
    main()
