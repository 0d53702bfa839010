"""Do the five canaries of a cell share an error through their common calibration and test users?

docs/threshold_rules.md ("Why the nonce rows' max over five leaves the Monte-Carlo band") reads the committed
rows so: at the frozen threshold, the test split's false-positive rate over the calibration split's moves
together for all five nonce canaries of a cell. This benchmark tests that reading directly. On one world (a
preset's long arm, bank A) it designs ``--canaries`` canaries of ``--variant`` once (frozen, as ``pe-kit reproduce``
does; ``--arm``, long by default), pools the calibration and test users, and redraws their partition into two equal halves ``--redraws``
times (seeded). For each redraw every canary is audited (``audit.canary._audit_canary``, the kit's rule) with
fresh trial seeds, so a redraw's five audits share only their users. It prints, per redraw, the five ε_lower and
test/calibration FPR ratios, and then:

- the between-canary correlation of ε_lower within a redraw (0 if the users carry no shared error);
- the sd of the cell median (and max) over redraws, against the sd the same per-canary spread would give five
  independent audits (a permutation: each canary's ε taken from a different, random redraw).

    PYTHONPATH=. python benchmarks/shared_population.py --preset quick --redraws 20 --out shared_population.csv
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notebooks"))  # the notebooks' step modules (steps)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--data")
    ap.add_argument("--format", dest="fmt")
    ap.add_argument("--set", action="append", default=[], help="key=value overrides, as pe-kit reproduce --set")
    ap.add_argument("--arm", default="long", choices=("long", "short"))
    ap.add_argument("--variant", default="nonce")
    ap.add_argument("--canaries", type=int, default=5)
    ap.add_argument("--redraws", type=int, default=20)
    ap.add_argument("--trials", type=int, default=None, help="trials per hypothesis per split (default: preset's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="CSV of every audit (redraw, canary, ε_lower, FPRs)")
    from _smoke import parse_args

    a = parse_args(ap, argv, preset="tiny", canaries=2, redraws=3, trials=2000)
    import dataclasses
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import scipy.sparse as sp

    from pe_kit.audit.canary import _audit_canary
    from pe_kit.run.presets import get_preset
    from pe_kit.settings import parse_override
    from pe_kit.settings import MechanismConfig
    from pe_kit.study.setup import audit_from, study_config, world_for
    from pe_kit.study.world import canary_contribution
    from steps.designs import _rng, canary_slots, try_design

    P = get_preset(a.preset, dict(parse_override(s) for s in a.set) or None, a.data, a.fmt)
    params = {**P.as_dict(), "seed": a.seed}
    config = study_config(params, arm=a.arm, bank="bankA")
    t0 = time.time()
    world = world_for(config)
    print(f"world {time.time() - t0:.0f} s: N = {config.n_test} + {config.n_calibration}", flush=True)
    mech = MechanismConfig.from_params(params)
    audit = audit_from(params, a.canaries)
    if a.trials:
        audit = dataclasses.replace(audit, trials=a.trials)
    slots = canary_slots(a.variant, a.canaries, config.n_canary)
    designs = []
    for j, slot in enumerate(slots[:a.canaries]):
        d, reason = try_design(world, a.variant, j, slot, a.seed, mech, P.pool_size, P.paraphraser)
        if d is None:
            raise SystemExit(f"{a.variant} #{j}: {reason}")
        v = canary_contribution(world, d, mech)
        coords = np.sort(d.positions if d.positions is not None else np.flatnonzero(v))
        c = {s: world.contributions(s, mech, d) for s in ("aux", "calibration", "test")}
        designs.append((d.canary_id, v, coords, c["aux"], sp.vstack([c["calibration"], c["test"]]).tocsr()))
    n = config.n_test
    own = []   # the world's own partition with the audit's own seeds: the rows `pe-kit reproduce` writes
    for j, (cid, v, coords, aux, pooled) in enumerate(designs):
        r = _audit_canary(v, coords, aux, pooled[:n], pooled[n:], mech, audit,
                         _rng(a.seed, a.variant, j, 23, 0)).row
        own.append(r["epsilon_lower"])
    print(f"the world's own split, the audit's seeds (= its results.csv rows): eps {' '.join(f'{e:.3f}' for e in own)}",
          flush=True)
    rows = []
    for k in range(a.redraws):
        perm = np.random.default_rng([a.seed, 77, k]).permutation(2 * n)
        cal, test = perm[:n], perm[n:]
        for j, (cid, v, coords, aux, pooled) in enumerate(designs):
            res = _audit_canary(v, coords, aux, pooled[cal], pooled[test], mech, audit,
                               np.random.default_rng([a.seed, 78, k, j]))
            r = res.row
            rows.append({"redraw": k, "canary": j, "canary_id": cid, "epsilon_lower": r["epsilon_lower"],
                         "mu_eff": r["mu_eff"], "fpr_calibration": r["fpr_calibration"], "fpr_test": r["fpr_test"],
                         "trials": audit.trials})
        eps = [x["epsilon_lower"] for x in rows[-len(designs):]]
        ratio = [x["fpr_test"] / max(x["fpr_calibration"], 1e-300) for x in rows[-len(designs):]]
        print(f"redraw {k}: eps {' '.join(f'{e:.3f}' for e in eps)} | test/cal FPR "
              f"{' '.join(f'{q:.2f}' for q in ratio)}", flush=True)
    if a.out:
        with open(a.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    E = np.array([[x["epsilon_lower"] for x in rows if x["redraw"] == k] for k in range(a.redraws)])  # (R, c)
    R = np.array([[x["fpr_test"] / x["fpr_calibration"] for x in rows if x["redraw"] == k] for k in range(a.redraws)])
    corr = np.corrcoef(E.T)[np.triu_indices(E.shape[1], 1)]
    rcorr = np.corrcoef(np.log(R).T)[np.triu_indices(R.shape[1], 1)]
    rng = np.random.default_rng([a.seed, 79])
    perm = np.stack([E[rng.permutation(a.redraws), j] for j in range(E.shape[1])], axis=1)  # independent redraws
    print(f"\n{a.variant}, {len(designs)} canaries, {a.redraws} redraws of the {2 * n} calibration+test users, "
          f"{audit.trials:,} trials, mu_eff {np.median([x['mu_eff'] for x in rows[:len(designs)]]):.3f} "
          f"(median)")
    print("| statistic | value |\n|---|---|")
    print(f"| per-canary sd of ε_lower over redraws (median over canaries) | {np.median(E.std(axis=0, ddof=1)):.3f} |")
    print(f"| between-canary correlation of ε_lower within a redraw (median, range) | {np.median(corr):.2f} "
          f"({corr.min():.2f} … {corr.max():.2f}) |")
    print(f"| between-canary correlation of log(test/cal FPR) (median) | {np.median(rcorr):.2f} |")
    print(f"| sd of the cell median over redraws / if the canaries were independent | "
          f"{np.median(E, axis=1).std(ddof=1):.3f} / {np.median(perm, axis=1).std(ddof=1):.3f} |")
    print(f"| sd of the cell max over redraws / if independent | {E.max(axis=1).std(ddof=1):.3f} / "
          f"{perm.max(axis=1).std(ddof=1):.3f} |")
    print(f"| cell max over redraws: min … max | {E.max(axis=1).min():.3f} … {E.max(axis=1).max():.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
