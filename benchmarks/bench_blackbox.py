"""Black-box implementation audits (issue 15): the mutant table, trials needed, wall times, and control repeats.

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/bench_blackbox.py [--trials 100000] [--ladder 1000,3000,10000,30000,100000]
        [--repeats 20] [--repeat-trials 100000] [--threads 2] [--seed 0] [--n-test 50]

Prints, for the reference and every mutant of ``pe_kit.pe.mutants`` on the canary designed for its bug
(``pe_kit.attack.bug_canaries``), at the suite setting (k=5, C=0.1, σ=1, q=0.1, δ=10⁻³, family-wise α=0.05):

* one audit at ``--trials`` per hypothesis per split: ε_lower, ε_theory, the attack ceiling, the derived and the
  found verdict, and its wall time (targets: every violating mutant flagged at ≤ 10⁵ trials, ≤ 5 min on 2 cores);
* the smallest budget of ``--ladder`` at which each violating mutant is flagged, and the wall time to get there;
* ``--repeats`` independent re-audits of the reference and the non-violating mutants at ``--repeat-trials``,
  with the number of flags (must be 0);
* release throughput: batched (``release_batch`` on the probe coordinates) vs one full release per call.

BLAS threads are capped at ``--threads`` (2 by default, the target machine). The full count (20 repeats at 10⁵
trials) takes ~20–30 min on 2 idle cores; pass smaller sizes on a shared machine and say so.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def _args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=100_000)
    ap.add_argument("--ladder", default="1000,3000,10000,30000,100000")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--repeat-trials", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-suite", action="store_true", help="only the control repeats")
    ap.add_argument("--n-test", type=int, default=None, help="test/calibration users of every design (default: design's)")
    from _smoke import parse_args

    return parse_args(ap, trials=2000, ladder="1000,2000", repeats=1, repeat_trials=1000, n_test=30)


def main() -> None:
    args = _args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notebooks"))  # the notebooks' step modules (steps)
    import numpy as np

    from pe_kit.attack.bug_canaries import concentrated_design
    from pe_kit.audit.blackbox import implementation_scores, spec_statistic
    from pe_kit.pe.release_protocol import ReferenceRelease, reference_release
    from steps import implementation_audit as IA

    from pe_kit.audit.accounting import epsilon_theory

    sizes = {} if args.n_test is None else {"n_test": args.n_test, "n_calibration": args.n_test}
    epsilon_theory(1.0, 0.1, IA.SUITE_DELTA)  # import the accountant outside every timed audit
    print(f"suite setting: {IA.SUITE_MECHANISM}, δ={IA.SUITE_DELTA}, α=0.05 family-wise; BLAS threads={args.threads}")

    if args.skip_suite:
        return _controls(IA, args, sizes)
    # throughput: batched vs unbatched reference on the concentrated design
    d = concentrated_design(np.random.default_rng(0), **sizes)
    stat = spec_statistic(d, IA.SUITE_MECHANISM)
    t0 = time.perf_counter()
    implementation_scores(ReferenceRelease(), d, IA.SUITE_MECHANISM, stat, "test", 1, 20_000, np.random.default_rng(1))
    batched = 20_000 / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    implementation_scores(reference_release, d, IA.SUITE_MECHANISM, stat, "test", 1, 200, np.random.default_rng(1))
    plain = 200 / (time.perf_counter() - t0)
    print(f"\nreleases/s on the concentrated design (N={len(d.test) + 1}, p={d.bank.shape[0]}, |P|={d.coords.size}): "
          f"batched {batched:,.0f}, one full release per call {plain:,.0f} (ratio {batched / plain:,.0f}×)")

    # one audit per case at --trials
    cases = IA.suite_cases(args.seed, sizes)
    t0 = time.perf_counter()
    rows = IA.run_suite(args.trials, seed=args.seed, sizes=sizes, cases=cases)
    print(f"\nsuite at {args.trials:,} trials per hypothesis per split ({len(cases)} audits, "
          f"{time.perf_counter() - t0:.1f} s):")
    print(f"{'implementation':24s} {'design':13s} {'breaks':>6s} {'flag':>5s} {'ε_lower':>8s} {'ε_theory':>8s} "
          f"{'ceiling':>8s} {'μ_eff':>6s} {'wall s':>7s}")
    for r in rows:
        print(f"{r['implementation']:24s} {r['design']:13s} {str(r['expected_violation']):>6s} {str(r['violation']):>5s} "
              f"{r['epsilon_lower']:8.3f} {r['epsilon_theory']:8.3f} {r['epsilon_ceiling']:8.3f} {r['mu_eff']:6.3f} "
              f"{r['seconds']:7.1f}")
    wrong = [r["implementation"] for r in rows if r["violation"] != r["expected_violation"]]
    print(f"disagreements with the derivations: {wrong or 'none'}")

    # trials needed
    ladder = tuple(int(x) for x in args.ladder.split(","))
    print(f"\ntrials needed (ladder {ladder}, fresh audit per rung, Bonferroni over rungs):")
    for r in IA.trials_needed_rows(ladder, seed=args.seed, sizes=sizes, cases=cases):
        tn = "not flagged" if r["trials_needed"] is None else f"{r['trials_needed']:,}"
        print(f"  {r['implementation']:24s} {tn:>12s}  ε_lower {r['epsilon_lower']:.3f} > ε_theory "
              f"{r['epsilon_theory']:.3f}  wall {r['seconds']:.1f} s")

    _controls(IA, args, sizes)


def _controls(IA, args, sizes) -> None:
    if args.repeats > 0:
        t0 = time.perf_counter()
        tally = IA.control_repeats(args.repeats, args.repeat_trials, seed=args.seed, sizes=sizes)
        print(f"\ncontrols: {args.repeats} independent re-audits at {args.repeat_trials:,} trials "
              f"({time.perf_counter() - t0:.1f} s)")
        for t in tally:
            print(f"  {t['implementation']:24s} {t['design']:13s} flagged {t['times_flagged']}/{t['repeats']}  "
                  f"max ε_lower {t['epsilon_lower_max']:.3f} (ε_theory {t['epsilon_theory']:.3f})")


if __name__ == "__main__":
    main()
