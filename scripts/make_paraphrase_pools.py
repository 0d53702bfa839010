"""Build the LLM paraphrase pools Q (App. B) of a preset's paraphrase canaries, resumably, and ship them.

For each data arm and each canary audited by ``paraphrase``, ``paraphrase-norm`` or ``paraphrase-mu_eff`` (the
slots of ``steps.designs.canary_slots`` in the seeded canary split of ``pe_kit.data.splits.split_users``,
exactly as ``pe_kit.study.world.build_world`` draws it; notebooks 02 and 04, then notebook 05's Fig. 1 sweep canary,
``scripts/pool_canaries.py``: ``sweep_paraphrase_canaries``, unless ``--no-sweeps``), build the pool of M rewrites with SmolLM2
(``paraphrase_pools.llm_paraphraser``: T = 0.9, top-p 0.95, 64 new tokens, one thread) under the pool seed of
``pe_kit.study.pools.paraphrase_pool_seed`` and append it to a JSON Lines work file. Every generated text is also
cached on disk per (prompt, seed, model, settings) as soon as its batch returns, so a stopped run loses at
most one batch; rerunning skips finished pools (in the work files or already shipped) and cached texts. ``--ship`` gzips the work file into
``pe_kit/data_files/`` once every pool is there (refuses a partial set unless ``--allow-partial``). On a machine
with idle cores, run one process per arm (``--arms long`` and ``--arms short``, one thread each): they write
separate work files, and ``--ship`` reads every ``<preset>-seed<seed>*.jsonl`` there. When one arm is done, start
a second process on the other arm with ``--reverse`` and its own ``--work`` file (same folder and stem, e.g.
``quick-seed0-long-rev.jsonl``): it builds the pools last-first, each process skips pools the other has finished,
and a pool both reach shares the text cache.

    PYTHONPATH=. PE_KIT_CACHE=/work/pecache HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 \
        python scripts/make_paraphrase_pools.py --preset quick --arms short --batch-size 32 --ship-each

(docs/paraphrase_pools.md: the command used for the shipped pools, with the ``--reverse`` partner process)
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pe_kit.attack.variants import PARAPHRASE_VARIANTS  # noqa: E402 (numpy only; after the path is set)


class _Progress:
    """Passes calls to a seeded generator and prints texts/s per batch (same name, settings and model id)."""

    def __init__(self, inner, total: int, label: str):
        self.inner, self.total, self.label = inner, total, label
        self.name, self.batch_size = inner.name, inner.batch_size
        self.raw_text_input = False
        self.done, self.t0 = 0, time.time()

    def config(self):
        return self.inner.config()

    def identity(self):
        return self.inner.identity()

    def generate_seeded(self, prompts, seeds):
        t = time.time()
        out = self.inner.generate_seeded(prompts, seeds)
        self.done += len(prompts)
        print(f"{time.strftime('%H:%M:%S')} {self.label}: +{len(prompts)} in {time.time() - t:.1f} s "
              f"({len(prompts) / max(time.time() - t, 1e-9):.2f} texts/s), {self.done} generated this pool "
              f"(~{self.total} needed)", flush=True)
        return out


def append_pool(path, entry: dict, **extra) -> None:
    """Append one pool entry (plus ``extra`` fields) to a JSON Lines file, fsynced so a stopped build keeps it
    (``paraphrase_pools.load_pools`` checks every entry when the file is read)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({**extra, **entry}, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--arms", default="long,short")
    ap.add_argument("--variants", default=",".join(PARAPHRASE_VARIANTS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default=None, help="corpus file (default: the preset's; the paper preset needs one)")
    ap.add_argument("--format", dest="fmt", default=None, help="corpus format (blogs, yelp, sentiment140)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="preset field, as pe-kit reproduce --set (the paper run's long part: --set n_test=600 "
                         "--set n_calibration=600), so that the canaries are that run's")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--work", default=None, help="JSON Lines work file (default $PE_KIT_CACHE/paraphrase-pools/<preset>.jsonl)")
    ap.add_argument("--ship", action="store_true", help="gzip the finished pools into pe_kit/data_files")
    ap.add_argument("--allow-partial", action="store_true")
    ap.add_argument("--ship-each", action="store_true",
                    help="rewrite the shipped file (every pool finished so far) after each pool, so that committing "
                         "it saves the work of a build longer than one machine's life; the pools already shipped "
                         "count as done on the next run")
    ap.add_argument("--dry-run", action="store_true", help="list the canaries and which pools are done")
    ap.add_argument("--no-sweeps", action="store_true",
                    help="leave out notebook 05's Fig. 1 sweep canary (one per swept paraphrase variant, on the "
                         "preset's sweep_arm when it is among --arms; listed after notebook 04's by default)")
    ap.add_argument("--reverse", action="store_true",
                    help="build the pools last-first: a second process on the same arm (with its own --work file) "
                         "meets the first in the middle; each skips pools the other has finished")
    args = ap.parse_args()

    from pe_kit.cache import cache_dir
    from pe_kit.run.presets import get_preset
    from pe_kit.settings import parse_override
    from pool_canaries import paraphrase_canaries, sweep_paraphrase_canaries
    from pe_kit.study.pools import paraphrase_pool_seed
    from pe_kit.text.generators.base import PoolShortfallError
    from pe_kit.text.generators.cached import CachedGenerator
    from pe_kit.text.generators.paraphrase_pools import (SHIPPED_POOLS_FILE, build_pool, llm_paraphraser,
                                                        load_pools, pool_key, pool_spec)

    overrides = dict(parse_override(x) for x in args.overrides)
    M = get_preset(args.preset, overrides, args.data, args.fmt).pool_size
    arms = [a for a in args.arms.split(",") if a]
    stem = f"{args.preset}-seed{args.seed}"
    tag = "" if sorted(arms) == ["long", "short"] else "-" + "-".join(arms)
    work = Path(args.work) if args.work else cache_dir() / "paraphrase-pools" / f"{stem}{tag}.jsonl"
    work.parent.mkdir(parents=True, exist_ok=True)
    work_files = sorted({work, *work.parent.glob(f"{stem}*.jsonl")})  # one process per arm may share the cache

    def finished() -> dict:  # work files, plus pools already shipped (a fresh machine resumes from the package)
        out = dict(load_pools(SHIPPED_POOLS_FILE))
        out.update({k: e for f in work_files if f.exists() for k, e in load_pools(f).items()})
        return out

    def ship(keys: list, done: dict) -> None:  # atomic: a stop mid-write never loses the shipped file
        # every pool there is (this run's arms and any other arm already shipped), this run's in audit order first
        lines = [done[k] for k in keys if k in done] + [e for k, e in done.items() if k not in set(keys)]
        tmp = SHIPPED_POOLS_FILE.with_name(f".{SHIPPED_POOLS_FILE.name}.{os.getpid()}.tmp")
        with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=9) as fh:
            for e in lines:
                fh.write(json.dumps(e, ensure_ascii=False) + "\n")
        os.replace(tmp, SHIPPED_POOLS_FILE)
        print(f"shipped {len(lines)} pools ({sum(k in done for k in keys)} of this run's {len(keys)}) to {SHIPPED_POOLS_FILE} "
              f"({SHIPPED_POOLS_FILE.stat().st_size / 1e6:.2f} MB)", flush=True)

    llm = llm_paraphraser(args.batch_size)
    spec = pool_spec(llm)
    todo = paraphrase_canaries(args.preset, arms, tuple(args.variants.split(",")), args.seed, data=args.data,
                               fmt=args.fmt, overrides=overrides)
    if not args.no_sweeps:  # the Fig. 1 sweeps' canary (slot i of the variant order); one pool per (arm, canary)
        listed = {(arm, cid): vs for arm, cid, _, vs in todo}
        for arm, cid, recs, vs in sweep_paraphrase_canaries(args.preset, args.seed, data=args.data, fmt=args.fmt,
                                                            overrides=overrides):
            vs = [v for v in vs if v in args.variants.split(",")]
            if not vs:
                continue
            if arm not in arms:
                print(f"note: notebook 05's sweep canary {cid} ({','.join(vs)}) is on arm {arm}, not in --arms "
                      f"{args.arms}; not listed", flush=True)
            elif (arm, cid) in listed:  # wrapped slots: notebook 04 audits it already, under the same pool
                listed[(arm, cid)] += [f"{v} (sweep)" for v in vs]
            else:
                todo.append((arm, cid, recs, [f"{v} (sweep)" for v in vs]))
    source = "bundled blogs-900" if args.data is None else Path(args.data).name
    done = finished()
    keys = [pool_key(recs, M, paraphrase_pool_seed(args.seed, cid), spec) for _, cid, recs, _ in todo]
    print(f"{len(todo)} pools of M={M} ({len(todo) * M} texts); {sum(k in done for k in keys)} done in "
          f"{', '.join(str(f) for f in work_files)}", flush=True)
    for (arm, cid, recs, vs), key in zip(todo, keys):
        print(f"  {arm:5s} {cid:>8s} {','.join(vs):28s} {'done' if key in done else 'todo'}", flush=True)
    if not args.dry_run:
        cache = CachedGenerator(llm, root=cache_dir() / "generation", with_code=False, sort_by_length=True)
        order = list(enumerate(zip(todo, keys), 1))
        for n, ((arm, cid, recs, vs), key) in (reversed(order) if args.reverse else order):
            if key in done or key in finished():  # another process may have finished it meanwhile
                continue
            t0 = time.time()
            cache.inner = _Progress(llm, M, f"pool {n}/{len(todo)} {arm}/{cid}")
            try:
                entry = build_pool(list(recs), M, paraphrase_pool_seed(args.seed, cid), cache)
            except PoolShortfallError as exc:  # texts made so far stay cached; the pool is reported missing
                print(f"{time.strftime('%H:%M:%S')} pool {n}/{len(todo)} ({arm}/{cid}) FAILED: {exc}", flush=True)
                continue
            entry["model"] = llm.identity()
            assert entry["key"] == key, "pool key drifted between listing and building"
            append_pool(work, entry, arm=arm, canary_id=cid, variants=vs, data=source,
                        preset=args.preset, seed=args.seed)
            done[key] = entry
            if args.ship_each:
                ship(keys, finished())
            print(f"{time.strftime('%H:%M:%S')} pool {n}/{len(todo)} ({arm}/{cid}) finished in "
                  f"{time.time() - t0:.0f} s; cache hits {cache.hits}, generated {cache.misses}", flush=True)
    done = finished()
    missing = [k for k in keys if k not in done]
    if args.ship:
        if missing and not args.allow_partial:
            raise SystemExit(f"{len(missing)} of {len(keys)} pools missing; not shipping (--allow-partial to force)")
        ship(keys, done)


if __name__ == "__main__":
    main()
