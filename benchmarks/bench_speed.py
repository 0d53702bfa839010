"""Issue 12's figures in one run: every ratio as kit vs raw library, kit vs limit, kit vs naive.

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/bench_speed.py [--n-texts 2000] [--records 500] [--bank 2048]
        [--quick-sample 1000] [--prompts 16] [--max-new-tokens 32] [--skip-generation] [--skip-trials]

Sections (all timings are CPU-contended wall times on a shared machine: read the *ratios*, measured side by
side in this one process, alternating the backends):

1. **Encoder** (``--n-texts`` bundled blog posts at 64 tokens, cache off): the kit's ONNX backend vs its torch
   backend (target ≥ 1.6×) and each vs the raw library (sentence-transformers / a bare onnxruntime session),
   all at the same thread count; top-5 routes of ``--records`` posts against a ``--bank``-text bank (bundled
   bank A) by both backends (target: 100 % identical), max |Δ| and mean cosine.
2. **Quick preset texts**: the texts the ``quick`` preset's four notebook-04 worlds (arms × banks) send to the
   encoder, recorded with a stand-in encoder: texts requested, distinct, what the previous 2,048-text-chunk
   cache encoded, what the per-text cache encodes (0 texts twice); then ONNX vs torch time on a random
   ``--quick-sample`` of the distinct texts (target ≤ 0.55), and the projected encode time of all of them.
3. **Trial engine**: ``bench_trials.limit_ratios`` (groups sampler vs tiled minimal-work limit, target ≥ 0.9;
   vs the untiled loop; nonce ``_audit_scalar`` auto vs per-trial).
4. **Generation under load**: one busy process pinned to the last core; ``--prompts`` SmolLM2 paraphrases with
   ``num_threads="auto"`` vs fixed 1 and 2 (target: auto ≤ the best fixed), and whether the texts agree.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _load() -> str:
    return f"load average {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "load n/a"


def _blog_posts(n: int, skip: int = 0) -> list[str]:
    from pe_kit.data.loaders import load_blogs

    seen, out = set(), []
    for user in load_blogs().users:
        for t in user.texts:
            if t not in seen:
                seen.add(t)
                out.append(t)
    if len(out) < skip + n:
        raise SystemExit(f"only {len(out)} distinct bundled posts; ask for fewer texts")
    return out[skip:skip + n]


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def encoder_section(n_texts: int, n_records: int, n_bank: int, threads: int, reps: int) -> None:
    import torch
    from sentence_transformers import SentenceTransformer

    from pe_kit.data.loaders import load_bank_texts
    from pe_kit.pe.mechanism import topk_routes
    from pe_kit.text.encoder import Encoder, resolve_model_path

    texts = _blog_posts(n_texts)
    onnx = Encoder(max_seq_length=64, use_cache=False, progress=False, num_threads=threads)
    tor = Encoder(max_seq_length=64, use_cache=False, progress=False, num_threads=threads, backend="torch")
    print(f"\n[encoder] {len(texts)} bundled posts (median {int(np.median([len(t) for t in texts]))} chars), "
          f"max_seq_length 64, batch 64, {threads} thread(s), {_load()}")
    print(f"  ONNX backend: {onnx.backend_id}; verification {onnx.backend_info.get('verification')}")
    raw = SentenceTransformer(resolve_model_path("all-MiniLM-L6-v2"), device="cpu")
    raw.max_seq_length = 64
    raw_onnx = onnx._onnx
    for enc in (onnx, tor):
        enc.encode(texts[:64])  # warm-up
    raw.encode(texts[:64], batch_size=64)
    raw_onnx.encode(texts[:64], 64, threads)
    times: dict[str, list[float]] = {k: [] for k in ("kit onnx", "kit torch", "raw st", "raw ort")}
    emb = {}
    for _ in range(reps):
        dt, emb["onnx"] = _timed(lambda: onnx.encode(texts))
        times["kit onnx"].append(dt)
        dt, emb["torch"] = _timed(lambda: tor.encode(texts))
        times["kit torch"].append(dt)
        old = torch.get_num_threads()
        torch.set_num_threads(threads)
        dt, _ = _timed(lambda: raw.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True))
        torch.set_num_threads(old)
        times["raw st"].append(dt)
        dt, _ = _timed(lambda: raw_onnx.encode(texts, 64, threads))
        times["raw ort"].append(dt)
    best = {k: min(v) for k, v in times.items()}
    for k, v in best.items():
        print(f"  {k:<10s} {len(texts) / v:8.1f} texts/s (best of {reps}: {v:.1f} s)")
    print(f"  kit ONNX / kit torch: {best['kit torch'] / best['kit onnx']:.2f}× (target ≥ 1.6) | "
          f"kit torch / raw sentence-transformers: {best['raw st'] / best['kit torch']:.2f} | "
          f"kit ONNX / raw onnxruntime session: {best['raw ort'] / best['kit onnx']:.2f}")
    gflop = _encoder_gflop(texts, raw.tokenizer, 64)
    gemm = _gemm_gflops(threads)
    for k in ("kit onnx", "kit torch"):
        rate = gflop / best[k]
        print(f"  {k}: {rate:.1f} GFLOP/s = {rate / gemm:.2f} of this machine's fp32 GEMM limit "
              f"({gemm:.1f} GFLOP/s, torch.matmul at the encoder's shapes, {threads} thread(s)); "
              f"a backend can gain at most {gemm / rate:.2f}×")
    bank_texts = load_bank_texts()[0][:n_bank]
    bank_o, bank_t = onnx.encode(bank_texts), tor.encode(bank_texts)
    rec_o, rec_t = emb["onnx"][:n_records], emb["torch"][:n_records]
    r_o, r_t = (np.sort(topk_routes(r, b, 5), axis=1) for r, b in ((rec_o, bank_o), (rec_t, bank_t)))
    same = np.all(r_o == r_t, axis=1)
    allx = np.concatenate([emb["onnx"], bank_o]), np.concatenate([emb["torch"], bank_t])
    print(f"  top-5 routes, {len(rec_o)} records vs a {len(bank_texts)}-text bank: {100 * same.mean():.1f} % identical "
          f"(target 100 %); max |Δ| {np.abs(allx[0] - allx[1]).max():.2e}, mean cosine "
          f"{np.mean(np.sum(allx[0] * allx[1], axis=1)):.6f} over {len(allx[0])} texts")


def _encoder_gflop(texts, tokenizer, cap: int) -> float:
    """Multiply-add work of MiniLM-L6 (6 layers, d = 384, FFN 1536) on ``texts`` at token cap ``cap``, in GFLOP:
    per layer and token 4·d² (Q, K, V, output) + 2·d·1536 (FFN) + 2·L·d (scores and weighted sum) MACs, 2 FLOP per
    MAC, L = the text's own token count (sentence-transformers batches texts of similar length)."""
    d, ff, layers = 384, 1536, 6
    lengths = np.array([min(len(ids), cap) for ids in tokenizer(list(texts), truncation=False)["input_ids"]],
                       dtype=np.float64)
    macs = layers * np.sum(lengths * (4 * d * d + 2 * d * ff) + 2 * lengths ** 2 * d)
    return 2 * macs / 1e9


def _gemm_gflops(threads: int, reps: int = 20) -> float:
    """The machine's fp32 matrix-multiply rate at the encoder's shapes (a 64×64-token batch through the FFN's
    384×1536 and 1536×384 weights), best of ``reps``, with torch at ``threads`` threads: the ceiling for any
    encoder backend on this CPU."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x, w1, w2 = torch.randn(4096, 384), torch.randn(384, 1536), torch.randn(1536, 384)
        best = np.inf
        for _ in range(reps):
            t0 = time.perf_counter()
            torch.matmul(torch.matmul(x, w1), w2)
            best = min(best, time.perf_counter() - t0)
    finally:
        torch.set_num_threads(old)
    return 2 * 2 * 4096 * 384 * 1536 / best / 1e9


class _Recorder:
    """Stand-in encoder: records every call's texts, returns deterministic unit vectors (no model)."""

    model_id = "recorder"  # world_fingerprint keys worlds by the encoder's identity
    model, max_seq_length = "all-MiniLM-L6-v2", 64  # build_world's truncation report reads them

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode(self, texts, desc: str = "") -> np.ndarray:
        texts = list(texts)
        self.calls.append(texts)
        out = np.empty((len(texts), 384), np.float32)
        for i, t in enumerate(texts):
            out[i] = np.random.default_rng(abs(hash(t)) % 2**32).normal(size=384)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def quick_section(sample: int, threads: int, preset: str = "quick") -> None:
    from pe_kit.study.setup import study_config
    from pe_kit.run.presets import resolve_params
    from pe_kit.study.world import build_world
    from pe_kit.cache import text_key
    from pe_kit.text.encoder import Encoder

    params = resolve_params("04_audit", preset)
    rec = _Recorder()
    t0 = time.perf_counter()
    for arm in params["arms"]:
        for bank in params["banks"]:
            build_world(study_config(params, arm=arm, bank=bank), encoder=rec)
    requested = sum(len(c) for c in rec.calls)
    distinct = {t for c in rec.calls for t in c}
    seen_chunks, old = set(), 0
    for call in rec.calls:  # the previous cache: one key per aligned chunk of 2,048 texts
        for i in range(0, len(call), 2048):
            key = tuple(call[i:i + 2048])
            if key not in seen_chunks:
                seen_chunks.add(key)
                old += len(key)
    print(f"\n[{preset} preset texts] {len(rec.calls)} encode calls from the {len(params['arms']) * len(params['banks'])} "
          f"notebook-04 worlds (recorded in {time.perf_counter() - t0:.0f} s): {requested} texts requested, "
          f"{len(distinct)} distinct")
    print(f"  chunk-keyed cache (previous): {old} encodes, {old - len(distinct)} of them repeats "
          f"({100 * (old - len(distinct)) / old:.1f} %) | per-text cache: {len(distinct)} encodes, 0 repeats")
    enc = Encoder(max_seq_length=params["max_seq_length"] or 64, progress=False, use_cache=False, num_threads=threads)
    pool = sorted(distinct, key=text_key)
    pick = [pool[i] for i in np.random.default_rng(0).choice(len(pool), size=min(sample, len(pool)), replace=False)]
    tor = Encoder(max_seq_length=enc.max_seq_length, progress=False, use_cache=False, num_threads=threads,
                  backend="torch")
    enc.encode(pick[:32])
    tor.encode(pick[:32])
    t_o, t_t = [], []
    for _ in range(2):
        t_o.append(_timed(lambda: enc.encode(pick))[0])
        t_t.append(_timed(lambda: tor.encode(pick))[0])
    o, t = min(t_o), min(t_t)
    print(f"  ONNX vs torch on {len(pick)} random distinct texts (best of 2, {threads} thread(s), {_load()}): "
          f"{o:.1f} s vs {t:.1f} s = {o / t:.2f} of torch's time (target ≤ 0.55); projected for all "
          f"{len(distinct)}: ONNX {o * len(distinct) / len(pick):.0f} s, torch {t * len(distinct) / len(pick):.0f} s "
          f"(previous chunk cache with torch: {t * old / len(pick):.0f} s)")


def generation_section(n_prompts: int, max_new_tokens: int) -> None:
    from bench_generation import load_texts

    from pe_kit.text.generators.base import GenerationError
    from pe_kit.text.generators.local_lm import LocalLMGenerator
    from pe_kit.text.generators.prompts import paraphrase_prompt
    from pe_kit.text.threads import auto_threads, cpu_cores

    texts, source = load_texts(n_prompts, None)
    prompts = [paraphrase_prompt(t) for t in texts]
    try:
        LocalLMGenerator(num_threads=1).load()
    except GenerationError as exc:
        print(f"\n[generation] skipped: {exc}")
        return
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(busy.pid, {max(os.sched_getaffinity(0))})
        time.sleep(2.0)
        print(f"\n[generation under load] {len(prompts)} paraphrases ({source}), ≤ {max_new_tokens} new tokens, "
              f"batch 16; one busy process pinned to core {max(os.sched_getaffinity(0))} of {cpu_cores()}; {_load()}; "
              f"auto_threads() now = {auto_threads()}")
        outs, secs = {}, {}
        for mode in ("auto", 1, 2):
            gen = LocalLMGenerator(max_new_tokens=max_new_tokens, batch_size=16, num_threads=mode)
            gen.generate(prompts[:2], np.random.default_rng(0))
            secs[mode], outs[mode] = _timed(lambda: gen.generate(prompts, np.random.default_rng(1)))
            extra = f" (chose {gen.last_threads})" if mode == "auto" else ""
            print(f"  num_threads={mode!s:<5s}{extra}: {secs[mode]:.1f} s")
        best_fixed = min(secs[1], secs[2])
        print(f"  auto / best fixed: {secs['auto'] / best_fixed:.2f} (target ≤ 1, noise ±10 %) | fixed 2 / fixed 1: "
              f"{secs[2] / secs[1]:.2f} | identical texts across thread counts: "
              f"{outs['auto'] == outs[1] == outs[2]}")
    finally:
        busy.kill()
        busy.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-texts", type=int, default=2000)
    ap.add_argument("--records", type=int, default=500)
    ap.add_argument("--bank", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--quick-sample", type=int, default=1000)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=None, help="encoder threads (default: auto_threads() at start)")
    ap.add_argument("--skip-encoder", action="store_true")
    ap.add_argument("--skip-quick", action="store_true")
    ap.add_argument("--preset", default="quick", help="preset whose notebook-04 worlds section 2 records")
    ap.add_argument("--skip-trials", action="store_true")
    ap.add_argument("--skip-generation", action="store_true")
    from _smoke import parse_args

    args = parse_args(ap, n_texts=16, records=16, bank=64, reps=1, quick_sample=16, prompts=2, max_new_tokens=8,
                      preset="tiny")
    from pe_kit.text.threads import auto_threads

    threads = args.threads or auto_threads()
    print(f"machine: {os.cpu_count()} cores, {_load()}; encoder threads {threads}")
    if not args.skip_encoder:
        encoder_section(args.n_texts, args.records, args.bank, threads, args.reps)
    if not args.skip_quick:
        quick_section(args.quick_sample, threads, args.preset)
    if not args.skip_trials:
        from bench_trials import limit_ratios, natural_case

        small = {"block": 1 << 12, "blocks": 1, "repeats": 1, "nonce_trials": 10**5} if args.smoke else {}
        limit_ratios(natural_case(np.random.default_rng(0))[0], **small)
    if not args.skip_generation:
        generation_section(args.prompts, args.max_new_tokens)


if __name__ == "__main__":
    main()
