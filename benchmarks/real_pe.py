"""Audit real PE code: microsoft/DPSDA's ``pe`` library (its NearestNeighbors histogram and Gaussian noise),
imported from a checkout outside this repository, through ``HistogramAdapter``, on the full default battery.

Usage (the recipe, with the checkout and its two small dependencies: docs/real_pe.md)::

    HF_HUB_OFFLINE=1 PYTHONPATH=.:/tmp/dpsda:/tmp/dpsda-deps nice -n 10 python benchmarks/real_pe.py \\
        --dpsda /tmp/dpsda [--trials 10000] [--speedup-trials 50] [--check-calls 100] [--out docs/real_pe_dpsda.csv]

What runs (nothing of DPSDA is copied: its classes are called as its PE runner calls them, ``pe/runner/pe.py``:
``NearestNeighbors.compute_histogram`` then ``Gaussian.add_noise``):

* the claim: user-level (ε_theory, δ) of the Gaussian mechanism at noise multiplier σ = 1 with sensitivity C = 1
  (DPSDA's client-level votes have norm 1 and its noise std is the noise multiplier) and no user sampling (q = 1:
  DPSDA releases every private sample's vote), k = 5, δ = 10⁻³;
* two implementations: ``vote_normalization_level="client"`` (user-level, expected unflagged) and ``"sample"``
  (each record's votes have norm 1, so a user's have norm up to their record count: expected flagged);
* the two-stage form (``HistogramAdapter(noise_fn=...)``): the deterministic stage is ``compute_histogram`` (the
  histogram before noise), the randomised stage ``add_noise`` (NumPy's global RNG, seeded from the audit's generator
  per release). The speed-up is measured in one run on the base design: the one-call form (``use_batch=False``, the
  histogram recomputed every release) against the two-stage form on the same seeds and chunks (identical scores
  expected), both at ``--speedup-trials``;
* the full default battery (``study.release_audit.audit_release``) at ``--trials`` per hypothesis per split for both
  levels, the README's tiny real-text world; its rows to ``--out`` with the snapshot's commit.

Prints the speed-up, both verdicts, the wall time and the load average (the machine is shared: say the load when
quoting the time).
"""
from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np

STUDY = dict(n_canary=5, n_aux=20, n_calibration=25, n_test=25, bank_size=1024, max_probes=16, max_seq_length=32)
DATA = "tests/data/blogs-tiny.jsonl.gz"


def load_dpsda(root: Path) -> dict:
    """DPSDA's histogram, DP and data classes from a checkout at ``root``.

    ``pe/data/__init__.py`` imports every dataset loader (torchvision for the image ones), which the histogram does
    not use: the ``pe.data`` package is registered bare, so only ``pe.data.data`` (the ``Data`` class) is loaded."""
    sys.path.insert(0, str(root))
    import pe  # noqa: F401  (DPSDA's package: its optional-import setup)

    bare = types.ModuleType("pe.data")
    bare.__path__ = [str(root / "pe" / "data")]
    sys.modules["pe.data"] = bare
    from pe.constant.data import CLEAN_HISTOGRAM_COLUMN_NAME, CLIENT_ID_COLUMN_NAME, DP_HISTOGRAM_COLUMN_NAME
    from pe.data.data import Data
    from pe.dp import Gaussian
    from pe.histogram import NearestNeighbors

    return dict(Data=Data, Gaussian=Gaussian, NearestNeighbors=NearestNeighbors, client=CLIENT_ID_COLUMN_NAME,
                clean=CLEAN_HISTOGRAM_COLUMN_NAME, noisy=DP_HISTOGRAM_COLUMN_NAME)


class GivenEmbedding:
    """DPSDA's ``Embedding`` interface over embeddings already in the data frame (the kit's encoder made them)."""

    column_name = "embedding"

    def compute_embedding(self, data):
        return data


def dpsda_histogram(private, synthetic, *, k, owner, level, lib, **_):
    """DPSDA's clean histogram (``NearestNeighbors.compute_histogram``) of stacked records with their client ids."""
    import pandas as pd

    priv = lib["Data"](pd.DataFrame({"embedding": list(private), lib["client"]: owner}))
    syn = lib["Data"](pd.DataFrame({"embedding": list(synthetic)}), metadata={"iteration": 0})
    nn = lib["NearestNeighbors"](embedding=GivenEmbedding(), mode="l2", lookahead_degree=0, num_nearest_neighbors=k,
                                 backend="sklearn", vote_normalization_level=level)
    _, syn = nn.compute_histogram(priv_data=priv, syn_data=syn)
    return syn.data_frame[lib["clean"]].to_numpy()


def dpsda_noise(clean, *, noise_multiplier, lib, delta, dps, **_):
    """DPSDA's ``Gaussian.add_noise`` on a clean histogram (NumPy's global RNG, std = the noise multiplier).

    ``dps`` keeps one ``Gaussian`` per noise multiplier, set up once as DPSDA's runner does, and the ``Data`` of the
    last clean histogram (the snapshot object itself: every release of a batch adds noise to the same one)."""
    import pandas as pd

    if noise_multiplier not in dps:
        dps[noise_multiplier] = lib["Gaussian"]()
        dps[noise_multiplier].set_epsilon_and_delta(num_iterations=1, epsilon=None, delta=delta,
                                                    noise_multiplier=noise_multiplier)
    if dps.get("clean") is not clean:
        dps["clean"], dps["data"] = clean, lib["Data"](pd.DataFrame({lib["clean"]: clean}))
    return dps[noise_multiplier].add_noise(dps["data"]).data_frame[lib["noisy"]].to_numpy(copy=True)


def adapter(lib: dict, level: str, delta: float):
    from pe_kit.pe.release_protocol import HistogramAdapter

    return HistogramAdapter(functools.partial(dpsda_histogram, level=level, lib=lib),
                            noise_fn=functools.partial(dpsda_noise, lib=lib, delta=delta, dps={}),
                            settings={"top_k": "k", "noise_multiplier": "noise_multiplier"}, per_user=False,
                            rng_arg=None, seed_arg=None, global_seed=True, name=f"dpsda_{level}")


def battery_args(ap: argparse.ArgumentParser, argv, name: str):
    """The options both real-PE scripts share (budget, seed, output ``docs/real_pe_<name>.csv``), parsed with
    ``--smoke``."""
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--speedup-trials", type=int, default=50)
    ap.add_argument("--check-calls", type=int, default=100,
                    help="one-call releases of the batch-vs-call KS check (the stage check compares seed for seed)")
    ap.add_argument("--out", type=Path, default=Path(f"docs/real_pe_{name}.csv"))
    ap.add_argument("--seed", type=int, default=0)
    from _smoke import parse_args

    return parse_args(ap, argv, trials=100, speedup_trials=4, check_calls=10, out=Path(f"/tmp/real_pe_{name}_smoke.csv"))


def print_verdict(r, t1: float) -> None:
    """One line per battery: flagged, ε_lower, ε_theory, designs, seconds since ``t1`` and the reasons."""
    print(f"{r.implementation}: flagged={r.flagged} epsilon_lower={r.epsilon_lower:.2f} "
          f"epsilon_theory={r.epsilon_theory:.2f} designs={len(r.rows)} ({time.perf_counter() - t1:.0f} s)"
          + (f" reasons: {'; '.join(r.reasons)}" if r.reasons else ""))


def write_rows(rows: list, out: Path, t0: float, load0) -> None:
    """Write the rows to ``out`` and print the wall time since ``t0`` with the load averages."""
    import pandas as pd

    load1 = os.getloadavg()
    wall = time.perf_counter() - t0
    out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out, index=False)
    print(f"wall {wall:.0f} s ({wall / 60:.1f} min); load average at start {load0[0]:.2f}, at end "
          f"{load1[0]:.2f} (15-min {load1[2]:.2f}) on {os.cpu_count()} cores; rows → {out}")


def snapshot_commit(checkout: Path) -> str:
    """The commit a checkout is at (recorded in every row)."""
    return subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dpsda", type=Path, default=Path("/tmp/dpsda"), help="a checkout of microsoft/DPSDA")
    args = battery_args(ap, argv, "dpsda")

    import pe_kit as pk
    from pe_kit.audit.blackbox import DEFAULT_DELTA, audit_implementation
    from pe_kit.audit.release_runner import CALL_CHUNK
    from pe_kit.study.release_audit import audit_release, release_battery

    commit = snapshot_commit(args.dpsda)
    lib = load_dpsda(args.dpsda.resolve())
    mech = pk.MechanismConfig(noise_multiplier=1.0, sample_rate=1.0, top_k=5, clip_norm=1.0, record_cap=16)
    t0, load0 = time.perf_counter(), os.getloadavg()
    designs = release_battery(DATA, variant="nonce", mechanism=mech, seed=args.seed, study=STUDY)
    print(f"microsoft/DPSDA @ {commit}; battery of {len(designs[0])} designs built in {time.perf_counter() - t0:.0f} s")

    # the speed-up, one run: one-call vs two-stage on the same seeds and chunks (the same releases)
    client, base = adapter(lib, "client", DEFAULT_DELTA), designs[0][0]
    kw = dict(trials=args.speedup_trials, gamma=0.0025, seed=[args.seed, 1], show_progress=False)
    a = audit_implementation(client, base, mech, use_batch=False, return_scores=True, **kw)
    b = audit_implementation(client, base, mech, batch=CALL_CHUNK, return_scores=True, **kw)
    diff = max(float(np.max(np.abs(a[1][key] - b[1][key]))) for key in a[1])
    counts = [(x.calibration.true_pos, x.calibration.false_pos, x.true_pos, x.false_pos) for x in (a[0], b[0])]
    print(f"speed-up on the base design, {args.speedup_trials} trials × 4 streams: one-call {a[0].info['seconds']:.1f} s, "
          f"two-stage {b[0].info['seconds']:.2f} s, ratio {a[0].info['seconds'] / b[0].info['seconds']:.1f}×; counts identical: "
          f"{counts[0] == counts[1]} {counts[0]}; max |score difference| {diff:.1e} (the score's dot product over "
          f"one row or many); ε_lower {a[0].epsilon_lower:.3f} vs {b[0].epsilon_lower:.3f}")

    rows = []
    for level in ("client", "sample"):
        t1 = time.perf_counter()
        r = audit_release(adapter(lib, level, DEFAULT_DELTA), mechanism=mech, trials=args.trials, seed=args.seed,
                          designs=designs, check_calls=args.check_calls, show_progress=False)
        print_verdict(r, t1)
        rows += [{**row, "snapshot": f"microsoft/DPSDA@{commit}"} for row in r.as_rows()]
    write_rows(rows, args.out, t0, load0)


if __name__ == "__main__":
    main()
