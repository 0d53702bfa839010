"""Reference numbers of the one-run audits on the idealised game at paper sizes (issue 16).

The game: m canaries, each included w.p. ½ and then participating w.p. q; a participating canary's LLR is
N(+μ²/2, μ²), any other N(−μ²/2, μ²), μ = 1/σ (a perfect nonce canary of the kit, Eq. 20). Prints the median
(and min–max over seeds) of ε_lower of both bounds (Steinke et al. 2023; Mahloujifar et al. 2024) at δ = 1e-5,
family-wise α = 0.05 over the (k₊, k₋) pairs of ``audit.one_run.guess_pairs``, beside ε_theory, with the wall time.

    PYTHONPATH=. python benchmarks/one_run_reference.py [--ms 1000 10000] [--repeats 5] [--sigma 1]
"""
import argparse
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notebooks"))  # the notebooks' step modules (steps)

from steps.one_run import idealised_rows  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", type=int, nargs="+", default=[1000, 10_000])
    ap.add_argument("--qs", type=float, nargs="+", default=[1.0, 0.1])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    from _smoke import parse_args

    a = parse_args(ap, ms=[100], qs=[1.0], repeats=2)
    t0 = time.perf_counter()
    rows = []
    for q in a.qs:
        rows += idealised_rows(1 / a.sigma, q, a.ms, a.seed, repeats=a.repeats)
    df = pd.DataFrame(rows)
    g = df.groupby(["mech_sample_rate", "m", "method"])
    out = g["epsilon_lower"].agg(["median", "min", "max"]).join(g["epsilon_theory"].first()).join(
        g["seconds"].median().rename("seconds/run"))
    print(f"σ = {a.sigma}, δ = 1e-5, α = 0.05, {a.repeats} seeds per row; one release per run")
    print(out.round(3).to_string())
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
