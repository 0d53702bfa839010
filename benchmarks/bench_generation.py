"""Generator throughput (texts/s) for the WordNet paraphraser and the local SmolLM2 backend.

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/bench_generation.py [--prompts 16] [--max-new-tokens 48]
        [--batch-size 16] [--threads N] [--skip-lm] [--data PATH]

Prompts: the first ``--prompts`` posts of the Blog-corpus test sample (``blogs-120.jsonl.gz``, looked
up in ``../shared/data/blogs`` or ``--data``), cut to 300 characters; built-in sentences if absent.
Outputs are not cached: this measures the backends themselves. Model load time is reported apart.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pe_kit.text.generators.base import GenerationError  # noqa: E402
from pe_kit.text.generators.local_lm import LocalLMGenerator  # noqa: E402
from pe_kit.text.generators.prompts import paraphrase_prompt  # noqa: E402
from pe_kit.text.generators.wordnet import WordNetParaphraser  # noqa: E402

FALLBACK = [
    "My sister called me last night to complain about her new job and her terrible boss.",
    "We watched a terrible movie and then ate cold pizza in the kitchen until midnight.",
    "Finished the final exam today and now I finally have time to read some good novels.",
    "The weather was awful this morning, so the garden party moved inside the old house.",
]


def load_texts(n: int, data: str | None) -> tuple[list[str], str]:
    candidates = [Path(data)] if data else []
    root = Path(__file__).resolve().parents[1]
    candidates += [root.parent / "shared/data/blogs/blogs-120.jsonl.gz", root / "tests/data/blogs-120.jsonl.gz"]
    for path in candidates:
        if path.is_file():
            texts = []
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                for line in fh:
                    text = json.loads(line)["text"].strip()
                    if len(text) >= 40:
                        texts.append(text[:300].rsplit(" ", 1)[0] if len(text) > 300 else text)
                    if len(texts) == n:
                        return texts, str(path)
    return [FALLBACK[i % len(FALLBACK)] for i in range(n)], "built-in sentences"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads for the LM (default: torch's)")
    ap.add_argument("--skip-lm", action="store_true")
    ap.add_argument("--data", default=None)
    from _smoke import parse_args

    args = parse_args(ap, argv, prompts=2, max_new_tokens=8, batch_size=2)

    texts, source = load_texts(args.prompts, args.data)
    print(f"prompts: {len(texts)} from {source}; mean length {np.mean([len(t) for t in texts]):.0f} chars")
    try:
        import torch

        load_avg = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"torch {torch.__version__}, threads {args.threads or torch.get_num_threads()}, cpus {os.cpu_count()}, "
              f"load average {load_avg:.1f}")
    except ImportError:
        pass
    rows = []

    wn = WordNetParaphraser()
    t0 = time.perf_counter()
    try:
        wn.generate(texts[:1], np.random.default_rng(0))
    except GenerationError as exc:
        print(f"wordnet: skipped ({exc})")
    else:
        load = time.perf_counter() - t0
        reps = 50
        t0 = time.perf_counter()
        for r in range(reps):
            wn.generate(texts, np.random.default_rng(r))
        dt = time.perf_counter() - t0
        rows.append(("wordnet-v1", load, len(texts) * reps, dt))

    if not args.skip_lm:
        lm = LocalLMGenerator(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, num_threads=args.threads)
        t0 = time.perf_counter()
        try:
            lm.load()
        except GenerationError as exc:
            print(f"smollm2: skipped ({exc})")
        else:
            load = time.perf_counter() - t0
            prompts = [paraphrase_prompt(t) for t in texts]
            lm.generate(prompts[:2], np.random.default_rng(0))  # warm-up
            t0 = time.perf_counter()
            outs = lm.generate(prompts, np.random.default_rng(1))
            dt = time.perf_counter() - t0
            new_tokens = sum(len(lm.load()[0](o, add_special_tokens=False)["input_ids"]) for o in outs)
            rows.append((f"{lm.name} (batch {args.batch_size}, <={args.max_new_tokens} new tokens)", load, len(prompts), dt))
            print(f"smollm2: {new_tokens} output tokens in {dt:.1f} s = {new_tokens / dt:.1f} tokens/s (after cleaning)")
            print(f"sample SmolLM2 paraphrase: {outs[0][:160]!r}")

    print(f"\n{'generator':<60} {'load s':>8} {'texts':>7} {'time s':>8} {'texts/s':>9}")
    for name, load, n, dt in rows:
        print(f"{name:<60} {load:8.2f} {n:7d} {dt:8.2f} {n / dt:9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
