"""Audit real PE code: AI-secure/aug-pe's DP nearest-neighbour histogram (``dpsda/dp_counter.py::dp_nn_histogram``),
imported from a snapshot outside this repository, through ``HistogramAdapter``, on the full default battery.

Usage (the recipe, with the snapshot and faiss-cpu: docs/real_pe.md)::

    HF_HUB_OFFLINE=1 PYTHONPATH=. nice -n 15 python benchmarks/real_pe_augpe.py --augpe /tmp/augpe \\
        --deps /tmp/augpe-deps [--trials 10000] [--speedup-trials 50] [--check-calls 100] [--out docs/real_pe_augpe.csv]

What runs (nothing of aug-pe is copied: ``dp_nn_histogram`` is called as its ``main.py`` calls it, with its
defaults ``mode="L2"``, ``threshold=0``):

* the environment, shimmed on CPU: the function builds ``faiss.StandardGpuResources()`` unconditionally (faiss-cpu
  has none: a dummy stands in) and moves its index with ``faiss.index_cpu_to_gpu`` when torch sees CUDA (the identity
  here); faiss searches on one thread (exact either way; two threads on two shared cores are slower);
* the release: each private record votes 1 for each of its k nearest synthetic samples (faiss ``IndexFlatL2``), then
  ``np.random.normal · √k · σ`` (NumPy's global RNG) and ``clip(·, threshold) − threshold`` (post-processing). So a
  record moves the histogram by √k: the Gaussian mechanism with sensitivity C = √k and noise multiplier σ;
* two claims, σ = 1, q = 1 (every record votes), k = 5, C = √5, δ = 10⁻³: ``"sample"`` (one record per user,
  ``record_cap=1``: user level = aug-pe's own sample-level claim, expected unflagged) and ``"user"`` (users with up
  to 16 records, ``record_cap=16``: a user moves the histogram by up to 16·√k, expected flagged);
* the two-stage form without copying any of its lines. Deterministic stage: the clean count ``dp_nn_histogram``
  returns beside the noisy one. Randomised stage: ``dp_nn_histogram`` again, verbatim, on a second load of its module
  whose faiss replays a search: the flat index answers with each synthetic sample's id repeated its clean count times.
  Its code reads the search only through ``Counter(ids.flatten())``, so the replayed call counts exactly the snapshot
  (checked on every call against the clean count it returns) and then runs its own noise and threshold lines. The
  one-call form (``dp_nn_histogram``'s noisy count, faiss searching every release) and the two-stage form are run on
  the base design on the same seeds and chunks at ``--speedup-trials``: identical scores expected, and the speed-up;
* the full default battery (``study.release_audit.audit_release``) at ``--trials`` per hypothesis per split for both
  claims, the README's tiny real-text world; its rows to ``--out`` with the snapshot's commit.

Prints the per-call times, the speed-up, both verdicts, the wall time and the load average (the machine is shared:
say the load when quoting the time).
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from real_pe import DATA, STUDY, battery_args, print_verdict, snapshot_commit, write_rows

THRESHOLD = 0.0  # aug-pe's default --count_threshold


class NoGpu:
    """``faiss.StandardGpuResources`` on faiss-cpu: built, never used (the index stays on CPU)."""


class ReplayFaiss:
    """faiss for the second load of aug-pe's module (the randomised stage): every search returns ``ids``."""

    StandardGpuResources = NoGpu
    ids = np.zeros((0, 1), dtype=np.int64)

    def IndexFlatL2(self, d):  # noqa: N802 (faiss's name)
        return self

    def add(self, x):
        pass

    def search(self, x, k):
        return np.zeros(self.ids.shape, dtype=np.float32), self.ids


def load_augpe(root: Path) -> dict:
    """aug-pe's ``dp_counter`` module twice from a snapshot at ``root``: on faiss-cpu (GPU entry points shimmed), and
    on ``ReplayFaiss`` (the randomised stage)."""
    import faiss

    faiss.StandardGpuResources = NoGpu
    faiss.index_cpu_to_gpu = lambda resources, device, index: index
    faiss.omp_set_num_threads(1)
    mods = []
    for name in ("augpe_dp_counter", "augpe_dp_counter_replay"):
        spec = importlib.util.spec_from_file_location(name, root / "dpsda" / "dp_counter.py")
        mods.append(importlib.util.module_from_spec(spec))
        spec.loader.exec_module(mods[-1])
    mods[1].faiss = ReplayFaiss()
    return dict(search=mods[0].dp_nn_histogram, replay=mods[1].dp_nn_histogram, faiss=mods[1].faiss)


def augpe_histogram(private, synthetic, *, noise_multiplier, num_nearest_neighbor, lib, out, **_):
    """``dp_nn_histogram(synthetic, private, …)`` on stacked records: its noisy count (``out=0``, the one-call
    release) or the clean count it returns beside it (``out=1``, the deterministic stage)."""
    return lib["search"](synthetic, private, noise_multiplier, num_nearest_neighbor=num_nearest_neighbor, mode="L2",
                         threshold=THRESHOLD)[out]


def augpe_noise(clean, *, noise_multiplier, num_nearest_neighbor, lib, **_):
    """``dp_nn_histogram`` on a replayed search of the clean count ``clean``: its noise and threshold lines."""
    lib["faiss"].ids = np.repeat(np.arange(clean.size), clean.astype(np.int64))[:, None]
    stub = np.zeros((clean.size, 1), dtype=np.float32)
    noisy, again = lib["replay"](stub, stub[:0], noise_multiplier, num_nearest_neighbor=num_nearest_neighbor,
                                 mode="L2", threshold=THRESHOLD)
    if not np.array_equal(again, clean):
        raise ValueError("the replayed search did not reproduce the clean count: the two-stage form is invalid here")
    return noisy


def adapter(lib: dict, claim: str, staged: bool = True):
    from pe_kit.pe.release_protocol import HistogramAdapter

    return HistogramAdapter(functools.partial(augpe_histogram, lib=lib, out=int(staged)),
                            noise_fn=functools.partial(augpe_noise, lib=lib) if staged else None,
                            settings={"top_k": "num_nearest_neighbor", "noise_multiplier": "noise_multiplier"},
                            per_user=False, rng_arg=None, seed_arg=None, global_seed=True, name=f"augpe_{claim}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--augpe", type=Path, default=Path("/tmp/augpe"), help="a snapshot of AI-secure/aug-pe")
    ap.add_argument("--deps", type=Path, default=None,
                    help="faiss-cpu installed with pip --target (searched after the environment's packages)")
    args = battery_args(ap, argv, "augpe")

    import pe_kit as pk
    from pe_kit.audit.blackbox import DEFAULT_DELTA, audit_implementation
    from pe_kit.audit.release_runner import CALL_CHUNK
    from pe_kit.study.release_audit import audit_release, release_battery

    commit = snapshot_commit(args.augpe)
    if args.deps is not None:
        sys.path.append(str(args.deps.resolve()))
    lib = load_augpe(args.augpe.resolve())
    t0, load0 = time.perf_counter(), os.getloadavg()
    mechs = {claim: pk.MechanismConfig(noise_multiplier=1.0, sample_rate=1.0, top_k=5, clip_norm=math.sqrt(5),
                                       record_cap=cap) for claim, cap in (("sample", 1), ("user", 16))}
    batteries = {claim: release_battery(DATA, variant="nonce", mechanism=m, seed=args.seed, study=STUDY)
                 for claim, m in mechs.items()}
    print(f"AI-secure/aug-pe @ {commit}; batteries of {len(batteries['sample'][0])} (sample) and "
          f"{len(batteries['user'][0])} (user) designs built in {time.perf_counter() - t0:.0f} s")

    # the one-call form against the two-stage form: the same seeds and chunks (the same releases)
    base, mech = batteries["user"][0][0], mechs["user"]
    kw = dict(trials=args.speedup_trials, gamma=0.0025, seed=[args.seed, 1], show_progress=False, return_scores=True)
    a = audit_implementation(adapter(lib, "user", staged=False), base, mech, use_batch=False, **kw)
    b = audit_implementation(adapter(lib, "user"), base, mech, batch=CALL_CHUNK, **kw)
    diff = max(float(np.max(np.abs(a[1][key] - b[1][key]))) for key in a[1])
    counts = [(x.calibration.true_pos, x.calibration.false_pos, x.true_pos, x.false_pos)
              for x in (a[0], b[0])]
    ms = [x.info["seconds"] / (4 * args.speedup_trials) * 1e3 for x in (a[0], b[0])]
    print(f"speed-up on the base design (user), {args.speedup_trials} trials × 4 streams: one-call "
          f"{a[0].info['seconds']:.1f} s ({ms[0]:.1f} ms per release), two-stage {b[0].info['seconds']:.2f} s ({ms[1]:.2f} ms per "
          f"release), ratio {a[0].info['seconds'] / b[0].info['seconds']:.1f}×; counts identical: {counts[0] == counts[1]} "
          f"{counts[0]}; max |score difference| {diff:.1e}; ε_lower {a[0].epsilon_lower:.3f} vs "
          f"{b[0].epsilon_lower:.3f}")

    rows = []
    for claim, designs in batteries.items():
        t1 = time.perf_counter()
        r = audit_release(adapter(lib, claim), mechanism=mechs[claim], trials=args.trials, seed=args.seed,
                          designs=designs, check_calls=args.check_calls, show_progress=False)
        print_verdict(r, t1)
        rows += [{**row, "claim": claim, "snapshot": f"AI-secure/aug-pe@{commit}"} for row in r.as_rows()]
    write_rows(rows, args.out, t0, load0)


if __name__ == "__main__":
    main()
