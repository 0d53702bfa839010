"""Print encoder throughput (texts/s) and exact top-k routing throughput (records/s) on this machine.

Usage: python benchmarks/bench_embedding.py [--n 512] [--model all-MiniLM-L6-v2]
Reads the bundled Blogs sample; the cache is bypassed so the encoder really runs.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=512, help="texts per measurement")
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    from _smoke import parse_args

    args = parse_args(ap, n=16)

    from pe_kit.data.loaders import load_bank_texts, load_blogs
    from pe_kit.pe.mechanism import topk_routes
    from pe_kit.text.encoder import Encoder

    posts = [t for u in load_blogs().users for t in u.texts][: args.n]
    bank_texts, _ = load_bank_texts()
    print(f"texts: {len(posts)} blog posts (median {int(np.median([len(t) for t in posts]))} chars)")
    for max_len in (None, 128, 64, 32):
        enc = Encoder(args.model, max_seq_length=max_len, use_cache=False, progress=False)
        enc.encode(posts[:8])  # load + warm up
        t0 = time.perf_counter()
        enc.encode(posts)
        dt = time.perf_counter() - t0
        print(f"encoder {args.model} max_seq_length={max_len}: {len(posts) / dt:8.1f} texts/s")
    rng = np.random.default_rng(0)
    bank = rng.normal(size=(8192, 384)).astype(np.float32)
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)
    recs = rng.normal(size=(8192, 384)).astype(np.float32)
    recs /= np.linalg.norm(recs, axis=1, keepdims=True)
    t0 = time.perf_counter()
    topk_routes(recs, bank, 69)
    dt = time.perf_counter() - t0
    print(f"exact top-69 routing against p=8192: {len(recs) / dt:8.0f} records/s ({len(bank_texts)} bank texts bundled)")


if __name__ == "__main__":
    main()
