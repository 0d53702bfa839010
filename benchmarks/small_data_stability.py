"""How small may a run be before its numbers are noise? Sets the thresholds of ``pe_kit.run.fit``.

Two measurements on the bundled Blogs sample (``pe_kit/data_files/blogs-900.jsonl.gz``), MiniLM-L6 at a
32-token cap (embeddings cached under ``PE_KIT_CACHE``):

1. **MAUVE vs samples per side.** MAUVE between two disjoint random halves of the same records (the true value is
   1) for n = 50 … 1000 records per side, ``repeats`` draws each (mean over 3 k-means seeds per draw). Printed:
   mean, sd and min over draws. ``MIN_MAUVE_SAMPLES`` is the smallest n whose mean is ≥ 0.9 and sd ≤ 0.05.
2. **ε_lower vs users per split.** One world (m = 16 records, 150 aux users, 300 calibration + 300 test users,
   public bank p = 1024), one frozen nonce design (r = 16 probes) and its canary; then, for N = 10 … 300,
   ``repeats`` audits that each draw N calibration and N other test users from the 600 (the threshold is
   recalibrated each time), ``trials`` trials per hypothesis. Printed: median, sd and range of ε_lower over the
   draws. ``MIN_USERS_PER_SPLIT`` is the smallest N whose sd is within 0.05 of the sd at N = 300, where only
   the trials' own noise remains.

Run: ``PE_KIT_CACHE=… HF_HUB_OFFLINE=1 python benchmarks/small_data_stability.py [--repeats 5] [--trials 100000]``
(≈ 5 min on 2 busy cores, most of it embedding 14k records once).
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def mauve_vs_samples(emb: np.ndarray, sizes, repeats: int, seed: int = 0, other: np.ndarray | None = None,
                     share: float = 0.0) -> list[dict]:
    """MAUVE of two disjoint random samples of ``emb`` rows at each size (samples per side); with ``other``, a
    ``share`` of the second sample is drawn from ``other`` instead (a shifted distribution)."""
    from pe_kit.report.mauve import mauve_score

    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        k = int(round(share * n))
        if 2 * n > emb.shape[0] or (other is not None and k > other.shape[0]):
            continue
        vals = []
        for _ in range(repeats):
            idx = rng.permutation(emb.shape[0])[:2 * n - k]
            q = emb[idx[n:]]
            if k:
                q = np.vstack([q, other[rng.choice(other.shape[0], size=k, replace=False)]])
            vals.append(mauve_score(emb[idx[:n]], q, seeds=(0, 1, 2)).mean)
        v = np.array(vals)
        rows.append({"samples_per_side": n, "mauve_mean": v.mean(), "mauve_sd": v.std(ddof=1), "mauve_min": v.min(),
                     "mauve_max": v.max()})
    return rows


def epsilon_vs_users(sizes, repeats: int, trials: int, seed: int = 0) -> list[dict]:
    """ε_lower of one frozen nonce design when N calibration and N test users are redrawn."""
    from pe_kit.audit.canary import audit_canary
    from pe_kit.config import AuditConfig, MechanismConfig
    from pe_kit.run import experiments as X
    from pe_kit.run.study import StudyConfig, canary_contribution

    cfg = StudyConfig(arm="long", n_canary=5, n_aux=100, n_calibration=200, n_test=200, bank="public",
                      bank_size=512, max_probes=8, max_seq_length=32, record_cap=8, seed=seed)
    t0 = time.perf_counter()
    world = X.world_for(cfg, progress=False)
    print(f"world built in {time.perf_counter() - t0:.0f} s")
    mech = MechanismConfig(record_cap=8)
    design = X.design_for(world, "nonce", 0, 0, seed, mechanism=mech, pool_size=128)
    v = canary_contribution(world, design, mech)
    coords = np.sort(design.positions)
    aux = world.contributions("aux", mech, design)
    pool = __import__("scipy.sparse", fromlist=["vstack"]).vstack(
        [world.contributions("calibration", mech, design), world.contributions("test", mech, design)]).tocsr()
    audit = AuditConfig(trials=trials, n_canaries=1)
    rng = np.random.default_rng([seed, 7])
    rows = []
    for n in sizes:
        eps = []
        for _ in range(repeats):
            idx = rng.permutation(pool.shape[0])
            res = audit_canary(v, coords, aux, pool[idx[:n]], pool[idx[n:2 * n]], mech, audit, rng)
            eps.append(res.epsilon_lower)
        e = np.array(eps)
        rows.append({"users_per_split": n, "eps_median": float(np.median(e)), "eps_sd": e.std(ddof=1),
                     "eps_min": e.min(), "eps_max": e.max()})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--trials", type=int, default=100_000)
    ap.add_argument("--skip-mauve", action="store_true")
    ap.add_argument("--skip-epsilon", action="store_true")
    args = ap.parse_args()
    if not args.skip_mauve:
        from pe_kit.data.loaders import load_bank_texts, load_blogs
        from pe_kit.text.encoder import Encoder

        corpus = load_blogs(record_cap=4)
        texts = [t for u in corpus.users for t in u.texts][:2400]
        enc = Encoder("all-MiniLM-L6-v2", max_seq_length=32, progress=False)
        emb = enc.encode(texts, desc="mauve")
        bank, _ = load_bank_texts(limit=1200)
        bank_emb = enc.encode(bank, desc="bank A")
        for share in (0.0, 0.5):
            print(f"MAUVE of blog records vs blog records with {share:.0%} of one side from bank A (SmolLM2 texts):")
            for r in mauve_vs_samples(emb, (50, 100, 200, 500, 1000), args.repeats, other=bank_emb, share=share):
                print(f"  n={r['samples_per_side']:5d}/side  mean {r['mauve_mean']:.3f}  sd {r['mauve_sd']:.3f}  "
                      f"range {r['mauve_min']:.3f}–{r['mauve_max']:.3f}")
    if not args.skip_epsilon:
        print(f"ε_lower of one nonce canary, N calibration + N test users redrawn ({args.trials:,} trials):")
        for r in epsilon_vs_users((10, 25, 50, 100, 200), args.repeats, args.trials):
            print(f"  N={r['users_per_split']:4d}  median {r['eps_median']:.3f}  sd {r['eps_sd']:.3f}  "
                  f"range {r['eps_min']:.3f}–{r['eps_max']:.3f}")


if __name__ == "__main__":
    main()
