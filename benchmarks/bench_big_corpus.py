"""Yelp-size data (issue 32, item 5): time and peak RSS of the loader and of ``pe-kit reproduce`` on a generated
file in the Yelp Open Dataset's review format, and how many times a run parses the file.

    python benchmarks/bench_big_corpus.py [--reviews 1000000] [--heavy 3000] [--out /tmp/yelp-bench]

Steps (each measured in a fresh child process; peak RSS = VmHWM of /proc/self/status, or psutil polls):

1. generate ``yelp_academic_dataset_review.json``: ``--reviews`` reviews (``review_id, user_id, business_id, stars,
   useful, funny, cool, text, date``; texts of ~100 words, log-normal length), ``--heavy`` users with 64–160
   reviews and the rest of the reviews over one-to-few-review users, in a seeded random order (each user's
   reviews spread over the file);
2. ``load_yelp(file, record_cap=64)`` (exactly 64 records per user, the paper's arm): seconds, peak RSS, the
   memory of the records it keeps (``sys.getsizeof`` of texts, tuples, ids, ``User``), and the interpreter's own
   RSS before loading; target peak ≤ 2 × kept;
3. ``corpus_cache.cached_corpus`` cold (parse + store) and warm (what each notebook does): seconds, peak RSS;
4. ``pe-kit reproduce --preset tiny --data FILE --format yelp --notebooks 01``: seconds, peak RSS of the runner
   (all of the run, and while the kernel runs), of the data child processes and of the kernel, and the lines the
   run added to ``PE_KIT_CACHE/corpora/parses.log`` (one ``pass 1/2`` and one ``pass 2/2`` = parsed once).

The stored corpus selections (``cache_dir()/corpora``) are cleared before steps 3 and 4 so both start cold.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def generate(path: Path, reviews: int, heavy: int, seed: int = 0) -> dict:
    """Write the review file; returns its sizes. Memory: one int per review (the shuffled user order)."""
    import base64

    import numpy as np

    rng = np.random.default_rng(seed)
    counts = list(64 + rng.geometric(1 / 30, heavy).clip(max=96) - 1)  # 64–160 reviews
    left = reviews - int(sum(counts))
    light = []
    while left > 0:
        block = (1 + rng.geometric(0.55, 100_000) - 1).clip(max=40)
        block = block[np.cumsum(block) <= left] if block.sum() > left else block
        if not len(block):
            block = np.array([left])
        light.extend(block.tolist())
        left -= int(block.sum())
    counts = np.array(counts + light, dtype=np.int64)
    owner = rng.permutation(np.repeat(np.arange(len(counts), dtype=np.int32), counts))
    ids = [base64.urlsafe_b64encode(rng.bytes(16)).decode()[:22] for _ in range(len(counts))]
    vocab = [base64.b32encode(rng.bytes(5)).decode().lower()[: int(k)] for k in rng.integers(2, 10, 4000)]
    t0 = time.perf_counter()
    with open(path, "w", encoding="utf-8") as fh:
        for start in range(0, len(owner), 20_000):
            part = owner[start:start + 20_000]
            n_words = np.exp(rng.normal(np.log(80), 0.6, len(part))).astype(int).clip(5, 900)
            words = rng.integers(0, len(vocab), int(n_words.sum()))
            stars = rng.integers(1, 6, len(part))
            pos = 0
            out = []
            for j, u in enumerate(part):
                text = " ".join(vocab[w] for w in words[pos:pos + n_words[j]])
                pos += n_words[j]
                out.append(json.dumps({"review_id": f"r{start + j:021d}", "user_id": ids[u],
                                       "business_id": f"b{(start + j) % 150_000:021d}", "stars": float(stars[j]),
                                       "useful": 0, "funny": 0, "cool": 0, "text": text,
                                       "date": "2019-01-01 12:00:00"}))
            fh.write("\n".join(out) + "\n")
    return {"reviews": int(len(owner)), "users": int(len(counts)), "users_ge_64": int((counts >= 64).sum()),
            "users_ge_16": int((counts >= 16).sum()), "bytes": path.stat().st_size,
            "seconds": round(time.perf_counter() - t0, 1)}


def _peak_mib() -> float:
    """This process's peak RSS (VmHWM of /proc/self/status: reset at exec, unlike ``getrusage``'s ru_maxrss, which
    Linux carries over from the forked parent); ``getrusage`` where /proc is missing."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _kept_mib(corpus) -> float:
    size = sum(sys.getsizeof(t) for u in corpus.users for t in u.texts)
    size += sum(sys.getsizeof(u.texts) + sys.getsizeof(u.user_id) + sys.getsizeof(u.label) + sys.getsizeof(u)
                for u in corpus.users) + sys.getsizeof(corpus.users)
    return size / 2**20


def measure_loader(path: str, mode: str) -> dict:
    """In this (fresh) process: load once by ``mode`` (``load_yelp``, ``cached``) and report time and memory."""
    os.environ.setdefault("PE_KIT_PROGRESS", "off")
    from pe_kit.data import corpus_cache
    from pe_kit.data.loaders import load_yelp
    from pe_kit.data.passes import PASSES

    base = _rss_mib()
    t0 = time.perf_counter()
    c = load_yelp(path, record_cap=64) if mode == "load_yelp" else corpus_cache.cached_corpus(path, "yelp",
                                                                                              record_cap=64)
    sec = time.perf_counter() - t0
    rep = c.report()
    return {"mode": mode, "seconds": round(sec, 1), "peak_rss_mib": round(_peak_mib(), 1),
            "rss_before_mib": round(base, 1), "kept_mib": round(_kept_mib(c), 1), "users": rep["users"],
            "records": rep["records"], "passes": sum(PASSES.values())}


def _child(path: Path, mode: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--measure", mode, str(path)], stdout=subprocess.PIPE,
                         text=True, check=True, env=os.environ.copy())
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_reproduce(path: Path, out: Path) -> dict:
    """Run the CLI on the file and poll the RSS of it and its children every 0.2 s."""
    import psutil

    from pe_kit.cache import cache_dir

    log_file = cache_dir() / "corpora" / "parses.log"

    def parse_log() -> list[str]:
        return log_file.read_text(encoding="utf-8").splitlines() if log_file.is_file() else []

    before = len(parse_log())
    cmd = [sys.executable, "-m", "pe_kit.run.cli", "reproduce", "--preset", "tiny", "--data", str(path), "--format",
           "yelp", "--notebooks", "01", "--results-dir", str(out / "results"), "--run-id", "bench", "--force"]
    t0 = time.perf_counter()
    log = open(out / "reproduce.log", "w")
    proc = psutil.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    peak = {"runner": 0.0, "runner_while_kernel": 0.0, "kernel": 0.0, "data_children": 0.0, "tree_sum": 0.0}
    while proc.poll() is None:
        try:
            kids = proc.children(recursive=True)
            me = proc.memory_info().rss / 2**20
            total = me
            kernel_up = False
            for k in kids:
                try:
                    rss = k.memory_info().rss / 2**20
                    line = " ".join(k.cmdline())
                except psutil.Error:
                    continue
                total += rss
                if "ipykernel" in line:
                    kernel_up = True
                    peak["kernel"] = max(peak["kernel"], rss)
                elif "corpus_cache" in line:
                    peak["data_children"] = max(peak["data_children"], rss)
            peak["runner"] = max(peak["runner"], me)
            if kernel_up:
                peak["runner_while_kernel"] = max(peak["runner_while_kernel"], me)
            peak["tree_sum"] = max(peak["tree_sum"], total)
        except psutil.Error:
            pass
        time.sleep(0.2)
    log.close()
    added = parse_log()[before:]
    return {"seconds": round(time.perf_counter() - t0, 1), "exit": proc.returncode,
            **{f"peak_rss_{k}_mib": round(v, 1) for k, v in peak.items()},
            "parse_log_lines": added, "log": str(out / "reproduce.log")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reviews", type=int, default=1_000_000)
    ap.add_argument("--heavy", type=int, default=3000, help="users with ≥ 64 reviews")
    ap.add_argument("--out", default="/tmp/pe_kit-yelp-bench")
    ap.add_argument("--skip-reproduce", action="store_true")
    ap.add_argument("--measure", nargs=2, metavar=("MODE", "FILE"), help=argparse.SUPPRESS)
    from _smoke import parse_args

    args = parse_args(ap, argv, reviews=20_000, heavy=40, skip_reproduce=True)
    if args.measure:
        print(json.dumps(measure_loader(args.measure[1], args.measure[0])))
        return 0
    sys.path.insert(0, str(ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "yelp_academic_dataset_review.json"
    info_file = out / "generated.json"
    want = {"reviews": args.reviews, "heavy": args.heavy}
    if not (path.is_file() and info_file.is_file() and json.loads(info_file.read_text()).get("want") == want):
        info = generate(path, args.reviews, args.heavy)
        info_file.write_text(json.dumps({"want": want, **info}))
    info = json.loads(info_file.read_text())
    print(f"file: {path} ({info['bytes'] / 2**30:.2f} GiB, {info['reviews']:,} reviews, {info['users']:,} users, "
          f"{info['users_ge_64']:,} with ≥ 64 reviews, {info['users_ge_16']:,} with ≥ 16)")
    from pe_kit.cache import cache_dir

    rows = [_child(path, "load_yelp")]
    shutil.rmtree(cache_dir() / "corpora", ignore_errors=True)
    rows += [_child(path, "cached"), _child(path, "cached")]
    for r, name in zip(rows, ("load_yelp (2 passes)", "cached_corpus cold (2 passes + store)",
                              "cached_corpus warm (a notebook)")):
        print(f"{name:40s} {r['seconds']:7.1f} s  peak RSS {r['peak_rss_mib']:7.1f} MiB  (interpreter before: "
              f"{r['rss_before_mib']:.0f} MiB)  kept {r['users']:,} users / {r['records']:,} records = "
              f"{r['kept_mib']:.1f} MiB  peak/kept {r['peak_rss_mib'] / max(r['kept_mib'], 1e-9):.2f}  "
              f"passes over the file: {r['passes']}")
    if not args.skip_reproduce:
        shutil.rmtree(cache_dir() / "corpora", ignore_errors=True)
        r = measure_reproduce(path, out)
        print(f"pe-kit reproduce --preset tiny --notebooks 01: {r['seconds']:.1f} s, exit {r['exit']}; peak RSS "
              f"runner {r['peak_rss_runner_mib']:.0f} MiB (while the kernel ran: "
              f"{r['peak_rss_runner_while_kernel_mib']:.0f}), data child {r['peak_rss_data_children_mib']:.0f} MiB, "
              f"kernel {r['peak_rss_kernel_mib']:.0f} MiB, whole tree {r['peak_rss_tree_sum_mib']:.0f} MiB "
              f"(log: {r['log']})")
        print(f"parses of the file in this run ({len(r['parse_log_lines'])} log lines; one 'pass 1/2' + one "
              "'pass 2/2' = parsed once):")
        for line in r["parse_log_lines"]:
            print("   ", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
