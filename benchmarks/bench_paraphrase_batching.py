"""Throughput of LLM paraphrase generation (SmolLM2-135M-Instruct, CPU) against batch size.

Prints texts/s for each batch size on the same prompts and seeds (paraphrase prompts of one quick-preset
canary's records), one torch thread: wall-clock texts/s and texts per CPU-second of this process (less
sensitive to other processes than wall time). Absolute speed follows the machine's load; read the ratios.

    PE_KIT_CACHE=... HF_HUB_OFFLINE=1 nice -n 15 python benchmarks/bench_paraphrase_batching.py --n 32 --batches 8,16,32
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=32, help="prompts per batch size")
    ap.add_argument("--batches", default="8,16,32", help="comma list of batch sizes")
    ap.add_argument("--arm", default="long", choices=("long", "short"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    from _smoke import parse_args

    args = parse_args(ap, n=2, batches="1,2", max_new_tokens=8)

    from pe_kit.data.loaders import load_corpus
    from pe_kit.data.splits import make_arm, split_users
    from pe_kit.text.generators.local_lm import LocalLMGenerator
    from pe_kit.text.generators.prompts import paraphrase_prompt

    corpus = make_arm(load_corpus(None, "auto", record_cap=64), args.arm, 64)
    splits = split_users(corpus, 25, 150, 290, 290, seed=0, canary_records=64)
    user = corpus.by_id()[splits.canary[20]]
    records = [user.texts[i % len(user.texts)] for i in range(args.n)]
    prompts = [paraphrase_prompt(t) for t in records]
    seeds = np.arange(args.n, dtype=np.int64) + 1000
    gen = LocalLMGenerator(num_threads=args.threads, max_new_tokens=args.max_new_tokens, batch_size=1)
    gen.load()
    gen.generate_seeded(prompts[:1], seeds[:1])  # warm-up
    outs = {}
    for b in [int(x) for x in args.batches.split(",")]:
        gen.batch_size = b
        t0, c0 = time.perf_counter(), time.process_time()
        outs[b] = gen.generate_seeded(prompts, seeds)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        print(f"arm={args.arm} batch={b:3d} n={args.n} threads={args.threads}: wall {dt:7.1f} s ({args.n / dt:5.2f} "
              f"texts/s), CPU {dc:6.1f} s ({args.n / dc:5.2f} texts per CPU-second), load {os.getloadavg()[0]:.1f}, "
              f"mean output {np.mean([len(o) for o in outs[b]]):.0f} chars", flush=True)
    first = next(iter(outs.values()))
    same = {b: sum(a == c for a, c in zip(first, o)) for b, o in outs.items()}
    print(f"outputs identical to the first batch size's (of {args.n}): {same}")


if __name__ == "__main__":
    main()
