"""Table 2 analogue on the bundled Blogs data: ε_lower for all 8 variants × 5 disjoint canaries.

Usage: python benchmarks/table2_bundled.py [--trials 1000000] [--arm long] [--bank bankA] [--out table2.csv]
Sizes (defaults): record cap 32, 25 real canaries (5 per real variant, disjoint), 100 aux /
100 calibration / 200 test users, p = 2048, r = 64, pools of M = 512, MiniLM-L6 at 64 tokens.
Prints the per-canary rows and the per-variant max / median beside ε_theory, and the seconds spent.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=1_000_000)
    ap.add_argument("--arm", default="long")
    ap.add_argument("--bank", default="bankA")
    ap.add_argument("--pool-size", type=int, default=512)
    ap.add_argument("--out", default=None)
    from _smoke import TINY_DATA, parse_args

    args = parse_args(ap, trials=2000, pool_size=32)
    # smoke: the tests' tiny corpus (80 bloggers × 16 posts) at sizes it holds
    sizes = ({"data": TINY_DATA, "n_aux": 10, "n_calibration": 20, "n_test": 20, "bank_size": 256, "max_probes": 16,
              "max_seq_length": 32, "record_cap": 16} if args.smoke else
             {"n_aux": 100, "n_calibration": 100, "n_test": 200, "bank_size": 2048, "max_probes": 64,
              "max_seq_length": 64, "record_cap": 32})

    import pandas as pd

    from pe_kit.attack.variants import REAL_VARIANTS, VARIANTS
    from pe_kit.settings import AuditConfig, MechanismConfig
    from pe_kit.study.world import StudyConfig, audit_design, build_world, make_design
    from pe_kit.text.encoder import Encoder

    t0 = time.perf_counter()
    cfg = StudyConfig(arm=args.arm, bank=args.bank, n_canary=25, seed=0, **sizes)
    world = build_world(cfg, encoder=Encoder(max_seq_length=cfg.max_seq_length, progress=False))
    print(f"world built in {time.perf_counter() - t0:.0f} s: {world.splits.report()}")
    mech, audit = MechanismConfig(record_cap=cfg.record_cap), AuditConfig(trials=args.trials)
    rows = []
    for vi, variant in enumerate(VARIANTS):
        for j in range(5):
            rng = np.random.default_rng([0, vi, j])
            t1 = time.perf_counter()
            try:
                slot = vi * 5 + j if variant in REAL_VARIANTS else j  # disjoint blocks of 5 of the 25 canaries
                design = make_design(world, variant, slot, rng, mechanism=mech, audit=audit, pool_size=args.pool_size)
            except Exception as exc:  # a pool shortfall is reported, not hidden
                print(f"{variant:18s} canary {j}: skipped ({type(exc).__name__}: {exc})")
                continue
            row = audit_design(world, design, mech, audit, rng)
            rows.append(row)
            print(f"{variant:18s} canary {j}: mu_eff={row['mu_eff']:.3f} eps_lower={row['epsilon_lower']:.3f} "
                  f"|P|={row['n_coords']} K={row['background_voters']} ({time.perf_counter() - t1:.1f} s)")
    df = pd.DataFrame(rows)
    summary = df.groupby("variant", sort=False).agg(eps_max=("epsilon_lower", "max"),
                                                    eps_median=("epsilon_lower", "median"),
                                                    mu_eff_median=("mu_eff", "median"),
                                                    canaries=("epsilon_lower", "size"),
                                                    eps_theory=("epsilon_theory", "first"))
    print(summary.round(3).to_string())
    print(f"total {time.perf_counter() - t0:.0f} s, trials per hypothesis per split: {args.trials:,}")
    if args.out:
        df.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
