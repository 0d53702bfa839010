"""Black-box audits of slow implementations over Dask (issue 31): releases/s on 1 and 2 workers, the projected
time of a 10⁵-trial audit of a 30 ms-per-release implementation on 16 workers, and a worked example.

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/bench_release_dask.py [--releases 300] [--trials 500] [--bank 256] [--dim 32]
        [--users 25] [--workers 2]

The implementation is a slow third-party-style histogram written here (not any library's code): *per-user votes
normalised to unit norm, every user participates, NumPy's global RNG*, plugged in through ``HistogramAdapter``
(``global_seed=True``: the adapter seeds the global RNG from the audit's generator before every call). It claims
the kit's mechanism at C = 1 (unit-norm votes: sensitivity 1, noise std σ) with Poisson rate q = 0.1, but lets
every user in, so the claim it breaks is the subsampling: the audit must flag it.

Prints:

* releases/s serially, and on a ``LocalCluster`` of 1 and ``--workers`` process workers (one thread each: the
  global RNG is per process), through ``audit.blackbox.implementation_scores``;
* the projection: a 10⁵-trial audit is 4·10⁵ releases (calibration and test, H0 and H1); at 30 ms each that is
  12,000 s on one core, and 12,000 / (16·e) s on 16 workers, e the parallel efficiency measured here (against the
  serial rate, Dask overhead included; on a shared machine it is noisy: say the load when quoting it);
* the worked example: the same audit serially and on the cluster — identical counts — and its verdict.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def unit_norm_histogram(private, synthetic, *, k, noise_multiplier):
    """A third-party-style PE histogram: per-user votes normalised to unit norm, every user participates, noise
    from NumPy's global RNG. ``private``: list of per-user (n_u, d) arrays; ``synthetic``: (p, d). Returns (p,)."""
    import numpy as np

    counts = np.zeros(len(synthetic))
    for user in private:
        d = ((user[:, None, :] - synthetic[None, :, :]) ** 2).sum(-1)
        votes = np.bincount(np.argsort(d, axis=1, kind="stable")[:, :k].ravel(), minlength=len(synthetic))
        counts += votes / np.linalg.norm(votes)
    return counts + np.random.normal(0.0, noise_multiplier, size=len(synthetic))


def _args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--releases", type=int, default=300, help="releases per throughput measurement")
    ap.add_argument("--trials", type=int, default=500, help="trials per hypothesis per split of the worked example")
    ap.add_argument("--bank", type=int, default=256)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--users", type=int, default=25)
    ap.add_argument("--workers", type=int, default=2)
    from _smoke import parse_args

    return parse_args(ap, releases=32, trials=50, bank=64, dim=8, users=8)


def main() -> None:
    args = _args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("PE_KIT_PROGRESS", "off")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import numpy as np
    from distributed import Client, LocalCluster

    from pe_kit.attack.bug_canaries import concentrated_design
    from pe_kit.audit.blackbox import audit_implementation, implementation_scores, spec_statistic
    from pe_kit.settings import MechanismConfig
    from pe_kit.pe.release_protocol import HistogramAdapter

    claim = MechanismConfig(top_k=5, clip_norm=1.0, noise_multiplier=1.0, sample_rate=0.1)
    release = HistogramAdapter(unit_norm_histogram, settings={"top_k": "k", "noise_multiplier": "noise_multiplier"},
                               rng_arg=None, seed_arg=None, global_seed=True, name="unit_norm_histogram")
    design = concentrated_design(np.random.default_rng(0), dim=args.dim, bank_size=args.bank, n_aux=args.users,
                                 n_test=args.users)
    stat = spec_statistic(design, claim)
    n = args.releases

    def rate(scheduler=None):
        t0 = time.perf_counter()
        implementation_scores(release, design, claim, stat, "test", 1, n, np.random.default_rng(1),
                              scheduler=scheduler, call_chunk=16)
        return n / (time.perf_counter() - t0)

    print(f"implementation: {release.name} (unit-norm votes, every user participates, global NumPy RNG); design "
          f"concentrated p={args.bank}, d={args.dim}, N={args.users}+1 users; {n} releases per measurement")
    serial = rate()
    print(f"serial:              {serial:8.1f} releases/s ({1000 / serial:.1f} ms per release)")
    rates = {}
    for w in sorted({1, args.workers}):
        with LocalCluster(n_workers=w, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            rate(client)  # warm the workers (imports, scatter)
            rates[w] = rate(client)
        print(f"dask, {w} worker(s):   {rates[w]:8.1f} releases/s")
    eff = rates[args.workers] / (args.workers * serial)  # against one core without Dask: overhead included
    total = 4 * 100_000 * 0.030
    print(f"parallel efficiency at {args.workers} workers (releases/s ÷ ({args.workers} × serial)): {eff:.2f}")
    print(f"projection, 10⁵ trials (4·10⁵ releases) at 30 ms per release: {total / 3600:.2f} h on 1 core; "
          f"{total / 16 / 60:.1f} min on 16 workers at perfect scaling, {total / (16 * eff) / 60:.1f} min at the "
          f"measured efficiency")

    print(f"\nworked example: {args.trials:,} trials per hypothesis per split, claimed k=5, C=1, σ=1, q=0.1, δ=1e-3")
    t0 = time.perf_counter()
    a = audit_implementation(release, design, claim, trials=args.trials, seed=7, stat=stat, call_chunk=16)
    t_serial = time.perf_counter() - t0
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        t0 = time.perf_counter()
        b = audit_implementation(release, design, claim, trials=args.trials, seed=7, stat=stat, call_chunk=16,
                                 scheduler=client)
        t_dask = time.perf_counter() - t0
    same = (a.calibration.columns(), a.columns()) == (b.calibration.columns(), b.columns())
    for label, r, t in (("serial", a, t_serial), (f"dask {args.workers} workers", b, t_dask)):
        print(f"  {label:16s} ε_lower {r.epsilon_lower:.2f} vs ε_theory {r.epsilon_theory:.2f}  violation={r.violation}"
              f"  TP {r.true_pos}/{r.n_h1} FP {r.false_pos}/{r.n_h0}  {t:.1f} s")
    print(f"  identical counts serial vs dask: {same}")


if __name__ == "__main__":
    main()
