"""Published values of both one-run bounds on their idealised Gaussian game, and the kit's reproduction of them.

Source: Mahloujifar, Melis, Chaudhuri, "Auditing f-Differential Privacy in One Run" (ICML 2025, PMLR 267;
arXiv 2410.22235), §4.1–4.2, Table 1, App. B and App. D (Algorithm 4). Their idealised setting is "similar to that
used in Steinke et al. (2023)" and they audit the same guesses with both bounds, so Table 1 gives a published value
of *each* method on one idealised setting:

* **The game** (App. D, Algorithm 4; k = 2): m canaries, s_i ∈ {−1, +1} uniform, output s_i + N(0, (2σ)²) — an
  m-dimensional Gaussian mechanism with μ = 1/σ per canary. The adversary makes c′ guesses: "in" for the c′/2 highest
  outputs, "out" for the c′/2 lowest (Algorithm 4 scores the top c′/2 and doubles; by symmetry the bottom half has the
  same expected precision). c = the expected number of correct guesses (their mean over 100 runs).
* **App. B** ("Varying δ and confidence levels"): σ = 1, m = 10⁵, c′ = 1 500 → c = 1 429.
* **Table 1** (δ = 10⁻⁵, τ = 0.05, one test per (m, c′, c); c′ chosen for the best ε at δ = 10⁻⁵, its value not
  stated): per σ ∈ {0.5, 1, 2, 4} (m = 10⁵, 10⁵, 10⁵, 10⁶), the theoretical ε of the Gaussian mechanism, the ε lower
  bound of Steinke et al. (Thm 3.1 with δ > 0) and of the f-DP bound ("Ours").

The kit reproduces the game with ``audit.one_run.idealised_scores`` (its LLR is an increasing function of the
output, so the guesses are the same) and the abstaining guesser, the bounds with ``audit.one_run``; c′ is searched
on a grid and the best ε kept, as the paper did. Tolerances and the one column that does not reproduce are explained
in ``published_checks``.

**Why the f-DP column ("Ours") does not reproduce: the settings tried.** The source states its procedure in §4.1
("For each combination of m, c′ … we calculate (c) using Algorithm 4 … we then audit all tuples of (m, c, c′) using
the f-DP curves of the Gaussian mechanism. Then we find the c that achieves the highest empirical ϵ"), §3.1 (τ = 0.05,
"the accuracy of our audit … 0.95") and Table 1's caption (δ = 10⁻⁵). Its appendix code ("Auditing code":
``audit_rh_with_cap``, ``rh_with_cap``) is the recursion of ``audit.one_run.fdp_rejects`` line by line (h₀ = τ(c′−c)/m,
r₀ = τc/m, the max in h, i/(c′−i), reject when r + h > c′/m; ``tests/test_one_run.py`` checks it decision by
decision), as is the same routine in Meta's ``privacy_guard`` (``FDPAnalysisNode``, whose default is δ = 10⁻⁶).
``benchmarks/one_run_fdp_gap.py`` (seed 4, 100 games per σ, 90 even c′ in [40, 30 000]) gives, at δ = 10⁻⁵:

=====================================================  =====  =====  =====  =====
setting (f-DP ε_lower, best over c′)                   σ=0.5  σ=1    σ=2    σ=4
=====================================================  =====  =====  =====  =====
published (Table 1; m = 10⁵, 10⁵, 10⁵, 10⁶)            8.16   3.61   1.59   0.82
stated: τ = 0.05, c = 100-game mean, k₊ = k₋ = c′/2    7.39   3.33   1.49   0.73
τ = 0.1 (confidence 90 %)                              7.84   3.51   1.58   0.76
τ = 0.2 (confidence 80 %)                              8.36   3.72   1.68   0.80
μ at τ = 0.05, ε read at δ = 10⁻⁶                      8.17   3.73   1.69   0.84
Algorithm 4's count: c = 2 × correct of the c′/2 top   7.39   3.37   1.49   0.73
Algorithm 4 at odd c′ (per-game ⌈c′·precision⌉)        7.53   3.42   1.49   0.73
k₊ = c′, k₋ = 0 (only "in" guesses)                    6.81   3.09   1.36   0.68
Bonferroni over the 90 c′ (τ = 0.05/90 each)           5.51   2.53   1.11   0.56
Algorithm 3 as printed (no max in line 5)              7.39   3.32   1.47   0.73
no abstention, audit told m = c′ (not a valid test)    11.02  6.10   2.86   1.53
per game at the stated c′: mean of 100                 7.50   3.36   1.50   0.73
per game at the stated c′: max of 100                  8.64   4.36   1.79   0.85
per game at its own best c′ (oracle): mean of 50       7.85   3.54   1.67   0.78
m = 10⁶ (Table 1's m for σ = 4)                        7.87   3.52   1.61   0.73
m = 10⁷ (20 games)                                     8.10   3.74   1.69   0.77
=====================================================  =====  =====  =====  =====

No single setting reproduces all four values: the kit's own Monte-Carlo spread of the stated value is ≈ 0.1 at
σ = 0.5 and ≈ 0.03 at σ ≥ 1 (seed 0 in ``published_checks``: 7.27, 3.35, 1.49, 0.73). Each candidate fits some rows and
misses others by more than that: τ = 0.1 is within 0.1 at σ = 1, 2 and 0.32 short at σ = 0.5 (τ = 0.2: 0.20 over
at σ = 0.5, 0.11 over at σ = 1); δ = 10⁻⁶ hits σ = 0.5 and 4 and is 0.10–0.12 over at σ = 1, 2; m = 10⁷ hits σ = 0.5
and is 0.13 over at σ = 1 and 0.05 short at σ = 4; a per-game oracle c′ is 0.31 short at σ = 0.5 and 0.08 over at
σ = 2. The published μ is 4–10 % above the stated procedure's, the size of the change from τ = 0.05 to τ ≈ 0.1–0.2,
or from δ = 10⁻⁵ to 10⁻⁶; the source states neither. Telling the audit m = c′ (the appendix's no-abstention
``audit_rh`` fed only the guessed canaries) overshoots ε_theory (11.02 > 9.997 at σ = 0.5), so it is not the
procedure behind the table. ``published_checks`` therefore keeps
the stated settings (τ = 0.05, δ = 10⁻⁵, Table 1's m) and reports the f-DP column as not reproduced.
"""
from __future__ import annotations

import numpy as np

from pe_kit.audit.one_run import epsilon_from_mu, epsilon_lower_steinke, idealised_scores, mu_lower_fdp
from pe_kit.settings import COUNT, ParamSpec, check_param

__all__ = ["TABLE1", "APP_B", "SOURCE", "idealised_correct", "guess_grid", "best_over_guesses", "published_checks"]

SOURCE = "Mahloujifar, Melis, Chaudhuri, ICML 2025 (arXiv 2410.22235)"

#: Table 1 of the source: σ → m, theoretical ε, Steinke et al., Steinke et al. (pointwise), f-DP ("Ours"); δ = 1e-5.
TABLE1 = {
    0.5: {"m": 100_000, "theory": 9.99, "steinke": 4.99, "steinke_pointwise": 5.01, "fdp": 8.16},
    1.0: {"m": 100_000, "theory": 4.37, "steinke": 2.61, "steinke_pointwise": 2.71, "fdp": 3.61},
    2.0: {"m": 100_000, "theory": 1.99, "steinke": 1.33, "steinke_pointwise": 1.35, "fdp": 1.59},
    4.0: {"m": 1_000_000, "theory": 0.92, "steinke": 0.61, "steinke_pointwise": 0.67, "fdp": 0.82},
}

#: App. B of the source: the idealised game's expected correct guesses at one stated (σ, m, c′).
APP_B = {"sigma": 1.0, "m": 100_000, "guesses": 1500, "correct": 1429}


def idealised_correct(mu: float, m: int, guesses, repeats: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error of the correct guesses of the (c′/2, c′/2) abstaining guesser in the idealised game.

    Each repeat draws one game (``audit.one_run.idealised_scores`` at q = 1: m canaries, S_i ~ Bernoulli(½), LLR
    N(±μ²/2, μ²)) and counts, for every c′ in ``guesses`` at once, the included canaries among the c′/2 top scores
    plus the excluded ones among the c′/2 bottom scores (``audit.one_run.abstaining_guesses`` with k₊ = k₋ = c′/2).

    Args:
        mu: μ = 1/σ > 0. m: canaries. guesses: even ints c′ with 2 ≤ c′ ≤ m. repeats: games (≥ 2).
        rng: the only randomness.

    Returns:
        (mean, standard error), float64 arrays shaped like ``guesses``.

    Raises:
        ValueError: for an odd c′, c′ outside [2, m], μ ≤ 0 or repeats < 2.
    """
    m, repeats = check_param("m", m, COUNT), check_param("repeats", repeats, ParamSpec("int", lo=2))
    g = np.asarray(guesses, dtype=np.int64).ravel()
    if (g % 2).any() or g.min() < 2 or g.max() > m:
        raise ValueError(f"guesses must be even integers in [2, m={m}]; got {g.tolist()}")
    if not mu > 0:
        raise ValueError(f"mu={mu} must be > 0 (μ = 1/σ)")
    k_max = int(g.max()) // 2
    counts = np.empty((repeats, g.size))
    for rep in range(repeats):
        scores, included = idealised_scores(mu, 1.0, m, rng)
        if k_max < m // 2:  # only the k_max top and bottom scores matter: partition, then sort those
            top = np.argpartition(-scores, k_max)[:k_max]
            bottom = np.argpartition(scores, k_max)[:k_max]
        else:
            top = bottom = np.arange(m)
        top = top[np.argsort(-scores[top], kind="stable")]
        bottom = bottom[np.argsort(scores[bottom], kind="stable")]
        right_in = np.cumsum(included[top])
        right_out = np.cumsum(~included[bottom])
        counts[rep] = right_in[g // 2 - 1] + right_out[g // 2 - 1]
    return counts.mean(axis=0), counts.std(axis=0, ddof=1) / np.sqrt(counts.shape[0])


def guess_grid(m: int, lo: int = 100, hi: int = 60_000, n: int = 96) -> np.ndarray:
    """Even c′ on a geometric grid from ``lo`` to min(``hi``, m/2) (steps of ≈ 7 % at the defaults).

    Returns:
        sorted int64 array of distinct even c′ (the guesses searched by ``published_checks``).
    """
    top = min(int(hi), int(m) // 2)
    return np.unique(np.round(np.geomspace(lo, top, n) / 2).astype(np.int64) * 2)


def _bound(method: str, m: int, guesses: int, correct: int, delta: float, beta: float) -> float:
    correct = int(min(max(correct, 0), guesses))
    if method == "steinke":
        return epsilon_lower_steinke(int(m), int(guesses), correct, delta, beta, tol=1e-4)
    return epsilon_from_mu(mu_lower_fdp(int(m), int(guesses), correct, beta), 1.0, delta)


def best_over_guesses(method: str, m: int, guesses, correct, *, delta: float = 1e-5, beta: float = 0.05,
                      max_guesses: int | None = None, stride: int = 4) -> dict:
    """The best ε lower bound over the (c′, c) pairs, as Table 1 reports it (one test per pair at level β).

    Searches every ``stride``-th pair, then every pair within ``stride`` of the best one (ε is unimodal in c′ on the
    idealised game, so this finds the grid's best at a third of the cost).

    Args:
        method: ``"steinke"`` (``audit.one_run.epsilon_lower_steinke``) or ``"fdp"`` (``audit.one_run.mu_lower_fdp``
            over μ-GDP, then ``epsilon_from_mu`` at q = 1). m: canaries. guesses, correct: c′ (ascending) and c per
            pair (c is rounded down to an integer, as Algorithm 4 does). delta: δ. beta: τ of the source.
        max_guesses: skip pairs with c′ above it. stride: ≥ 1.

    Returns:
        dict with ``epsilon``, ``guesses`` and ``correct`` of the best pair.

    Raises:
        ValueError: for an unknown method or stride < 1.
    """
    if method not in ("steinke", "fdp"):
        raise ValueError(f"method={method!r}: use 'steinke' or 'fdp'")
    if int(stride) < 1:
        raise ValueError(f"stride={stride} must be ≥ 1")
    g = np.asarray(guesses, dtype=np.int64)
    c = np.floor(np.asarray(correct, dtype=np.float64)).astype(np.int64)
    n = int(np.sum(g <= max_guesses)) if max_guesses is not None else g.size
    eps = np.full(n, -1.0)

    def at(j: int) -> float:
        if eps[j] < 0:
            eps[j] = _bound(method, m, int(g[j]), int(c[j]), delta, beta)
        return float(eps[j])

    coarse = list(range(0, n, int(stride)))
    j_best = max(coarse, key=at)
    for j in range(max(0, j_best - int(stride)), min(n, j_best + int(stride) + 1)):
        at(j)
    j_best = int(np.argmax(eps))
    return {"epsilon": max(0.0, float(eps[j_best])), "guesses": int(g[j_best]), "correct": int(c[j_best])}


def published_checks(repeats: int = 100, seed: int = 0, sigmas=(0.5, 1.0, 2.0, 4.0), delta: float = 1e-5,
                     beta: float = 0.05) -> list[dict]:
    """The kit against the source's published numbers, one row per number.

    Rows (``source``, ``method``, ``setting``, ``published``, ``reproduced``, ``tolerance``, ``within``, ``note``):

    * ``game``: App. B's c = 1 429 at (σ, m, c′) = (1, 10⁵, 1 500); tolerance 3 standard errors of the Monte-Carlo
      mean plus 1 (Algorithm 4 rounds each run's count up and the mean down).
    * ``theory``: Table 1's theoretical ε (μ-GDP closed form, ``epsilon_from_mu``); tolerance 0.01 (the table
      truncates to two decimals: 9.997 is printed 9.99).
    * ``steinke`` and ``fdp``: Table 1's bounds, reproduced as the best over ``guess_grid(m)`` (f-DP: c′ ≤ 20 000;
      ``best_over_guesses``) of the bound at the Monte-Carlo mean c. Tolerance: the source's c is a 100-game mean
      and ours a ``repeats``-game mean; the bound is moved by ±Δc = 3 standard deviations of their difference
      (+ 1 for rounding down) at the best c′, and the larger move, + 0.02 for the c′ grid (the source's c′ is not
      stated), is the tolerance in ε. At 100 games (seed 0) Steinke et al.'s column is within it at σ = 1, 2, 4
      (2.664, 1.291, 0.611 against 2.61, 1.33, 0.61) and 0.11 below at σ = 0.5 (4.880 against 4.99, two to three
      correct guesses more than the expected c). The f-DP column is below the published one in every row (7.267,
      3.348, 1.491, 0.730 against 8.16, 3.61, 1.59, 0.82): the kit's recursion decides exactly as the source's own
      Algorithm 3 code (``tests/test_one_run.py``) and the game reproduces App. B, so the gap lies in the (c′, c)
      behind Table 1, which the source does not state; near ε_theory the f-DP bound is very sensitive to the few
      wrong guesses (σ = 0.5, m = 10⁵, c′ = 2 850: 0, 2 or 5 errors give ε = 9.10, 8.00, 7.27). The settings tried
      to close the gap (τ, δ, Algorithm 4's count, abstention rule, family-wise correction, per-game vs mean, m)
      and what each gives are in the module docstring: none reproduces all four rows.

    Args:
        repeats: Monte-Carlo games per σ (the paper: 100). seed: root seed. sigmas: rows of Table 1 to check.
        delta, beta: δ and τ (the source: 1e-5 and 0.05).

    Returns:
        list of dict rows.

    Raises:
        ValueError: for a σ not in Table 1.
    """
    unknown = sorted(set(sigmas) - set(TABLE1))
    if unknown:
        raise ValueError(f"sigmas {unknown} are not rows of Table 1 ({sorted(TABLE1)})")
    rows = []
    b = APP_B
    mean, se = idealised_correct(1 / b["sigma"], b["m"], [b["guesses"]], repeats, np.random.default_rng([seed, 16, 9]))
    tol = 3 * float(se[0]) + 1
    rows.append({"source": f"{SOURCE}, App. B", "method": "game",
                 "setting": f"σ={b['sigma']:g}, m={b['m']}, c′={b['guesses']}: correct guesses c",
                 "published": float(b["correct"]), "reproduced": float(mean[0]), "tolerance": tol,
                 "within": abs(float(mean[0]) - b["correct"]) <= tol, "note": f"{repeats} games"})
    for sigma in sigmas:
        t = TABLE1[sigma]
        m, mu = t["m"], 1 / sigma
        setting = f"σ={sigma:g}, m={m}, δ={delta:g}"
        theory = epsilon_from_mu(mu, 1.0, delta)
        rows.append({"source": f"{SOURCE}, Table 1", "method": "theory", "setting": setting,
                     "published": t["theory"], "reproduced": theory, "tolerance": 0.01,
                     "within": abs(theory - t["theory"]) <= 0.01, "note": "μ-GDP closed form"})
        grid = guess_grid(m)
        c, se = idealised_correct(mu, m, grid, repeats, np.random.default_rng([seed, 16, 10, int(sigma * 100)]))
        for method, cap in (("steinke", None), ("fdp", 20_000)):
            best = best_over_guesses(method, m, grid, c, delta=delta, beta=beta, max_guesses=cap)
            j = int(np.flatnonzero(grid == best["guesses"])[0])
            # Monte-Carlo noise: the paper's c (100 games) and ours (``repeats`` games) are independent means;
            # 3 standard deviations of their difference, plus 1 for rounding down, moved through the bound
            sd_game = float(se[j]) * np.sqrt(repeats)
            dc = int(np.ceil(3 * sd_game * np.sqrt(1 / repeats + 1 / 100) + 1))
            spread = [abs(_bound(method, m, best["guesses"], best["correct"] + s_, delta, beta) - best["epsilon"])
                      for s_ in (-dc, dc)]
            tol = max(spread) + 0.02  # + the c′ grid's step near the optimum
            rows.append({"source": f"{SOURCE}, Table 1", "method": method, "setting": setting,
                         "published": t[method], "reproduced": best["epsilon"], "tolerance": tol,
                         "within": abs(best["epsilon"] - t[method]) <= tol,
                         "note": f"best c′={best['guesses']}, c={best['correct']} (±{dc}); {repeats} games"})
    return rows
