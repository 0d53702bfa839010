"""How much of bank B is copied from its in-context examples (docs/banks.md).

A small generator shown three public posts often continues or repeats one of them. That is no privacy problem (the
examples are public authors' posts, kept out of every private split), but it moves bank B towards the public-posts
bank, so the share is measured and stated. For each bank-B row (the shipped or partial file, or the build's work
file) this prints: the longest run of consecutive words it shares with one of its own three examples (cut as the
build cut them), and the share of rows whose text starts with an example's first 8 words or shares a run of ≥ 8
or ≥ 20 words with one; the same against three random *other* rows' examples as a baseline.

    PYTHONPATH=. python benchmarks/bank_b_copying.py --data ../shared/data/blogs/blogs.jsonl.gz [--bank FILE]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def longest_common_run(a: list[str], b: list[str]) -> int:
    """Length of the longest run of consecutive equal words of ``a`` and ``b`` (dynamic programming, O(|a|·|b|))."""
    best, prev = 0, [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, start=1):
            if x == y:
                cur[j] = prev[j - 1] + 1
                best = max(best, cur[j])
        prev = cur
    return best


def words(text: str) -> list[str]:
    return text.lower().split()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the full Blog corpus (the examples' source)")
    ap.add_argument("--bank", default=None, help="bank-B rows (default: shipped, else partial, else the work file)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the baseline's random other rows")
    ap.add_argument("--rows", type=int, default=None, help="only the first ROWS bank-B rows (default: all)")
    from _smoke import parse_args

    a = parse_args(ap, argv, rows=20)
    from pe_kit.cache import cache_dir
    from pe_kit.data.loaders import default_bank_b_path, load_corpus
    from scripts.make_bank_b import cut, read_rows

    candidates = [Path(a.bank)] if a.bank else [default_bank_b_path(), default_bank_b_path(partial=True),
                                                cache_dir() / "bank-b" / "work-seed0.jsonl"]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise SystemExit(f"no bank-B rows at {', '.join(map(str, candidates))}: run scripts/make_bank_b.py first")
    rows = read_rows(path)[:a.rows]
    by_id = load_corpus(a.data, "blogs", record_cap=64).by_id()

    def examples(r):
        return [words(cut(by_id[u].texts[i], r.get("example_chars", 300))) for u, i in r["examples"]]

    rng = np.random.default_rng(a.seed)
    own, base, starts = [], [], []
    for j, r in enumerate(rows):
        t = words(r["text"])
        ex = examples(r)
        own.append(max(longest_common_run(t, e) for e in ex))
        starts.append(any(len(e) >= 8 and t[:8] == e[:8] for e in ex))
        other = rows[int(rng.choice([k for k in range(len(rows)) if k != j]))] if len(rows) > 1 else r
        base.append(max(longest_common_run(t, e) for e in examples(other)))
    own, base = np.array(own), np.array(base)
    print(f"{path.name}: {len(rows)} rows, {len({r['text'] for r in rows})} distinct texts, "
          f"mean {np.mean([len(r['text']) for r in rows]):.0f} characters")
    print("| against | median longest shared run (words) | ≥ 8 words | ≥ 20 words | starts with an example's first 8 words |")
    print("|---|---|---|---|---|")
    print(f"| its own three examples | {np.median(own):.0f} | {np.mean(own >= 8):.1%} | {np.mean(own >= 20):.1%} | "
          f"{np.mean(starts):.1%} |")
    print(f"| another row's three examples (baseline) | {np.median(base):.0f} | {np.mean(base >= 8):.1%} | "
          f"{np.mean(base >= 20):.1%} | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
