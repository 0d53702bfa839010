"""composed-mu_eff beside exact, paraphrase-mu_eff and nonce on the same five canaries (issue 34; docs/composed.md).

    python benchmarks/composed_reference.py --out docs/composed_quick.csv                 # quick preset, bundled
    python benchmarks/composed_reference.py --preset paper --data ../shared/data/blogs/blogs.jsonl.gz \\
        --set n_test=600 --set n_calibration=600 --set max_seq_length=64 --mu-only --out docs/composed_paper_long.csv

The canaries are paraphrase-mu_eff's five (``steps.designs.canary_slots``; composed-mu_eff audits the same ones),
long arm (``--arm short``: the short arm), bank A. Every design is built as ``pe-kit reproduce`` builds it (``steps.designs.try_design``: same
seeds, positions and pools). ``--mu-only`` embeds only the bank, the canaries and the aux users (μ_eff needs no
test user: Σ̂_P from aux users and the count N, Eq. 15 with Eqs. 34–35) and writes μ_eff rows; otherwise every
split is embedded and each design is audited (ε_lower on the test split, ``audit_design``). Prints one line per
design with its cost (texts encoded, seconds). An audited row carries the audit's counts, γ, δ and threshold rule
(``AUDIT_FIELDS``), so its ε_lower is recomputed from counts as a paper_run row's is. Rows are appended as they finish and a rerun skips the rows
already in ``--out`` (embeddings are cached per text), so an interrupted run resumes.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notebooks"))  # the notebooks' step modules (steps)

VARIANTS = ("exact", "paraphrase-mu_eff", "composed-mu_eff", "nonce")
FIELDS = ("preset", "arm", "bank", "variant", "canary_index", "canary_slot", "canary_id", "mu_eff", "mu_eff_ceiling",
          "mu_eff_fraction", "mu_eff_test_background", "canary_votes_on_P", "canary_norm", "epsilon_lower", "epsilon_theory", "trials",
          "n_aux", "n_test", "encodes", "design_seconds", "pool_size", "kept_round", "round_mu_eff", "beyond_paper")
# the audit row's counts and settings, named as in every paper_run results.csv: ε_lower is recomputed from the
# test counts at γ and δ (Eq. 28, Clopper–Pearson; Eqs. 29–30), the rule says how calibration froze the threshold
AUDIT_FIELDS = ("gamma", "audit_delta", "audit_threshold_rule", "threshold", "calibration_rule",
                "calibration_direction", "calibration_epsilon", "calibration_true_pos", "calibration_false_pos",
                "calibration_n_h1", "calibration_n_h0", "test_direction", "test_threshold", "test_epsilon",
                "test_branch", "test_true_pos", "test_false_pos", "test_n_h1", "test_n_h0", "tpr", "fpr")


def light_world(config):
    """A ``World`` with the bank, the canaries and the aux users embedded (no calibration or test records)."""
    import numpy as np

    from pe_kit.settings import MechanismConfig
    from pe_kit.data.loaders import load_corpus
    from pe_kit.data.splits import make_arm
    from pe_kit.pe.mechanism import build_neighbor_index
    from pe_kit.study.world import World, _bank_texts, _stack, study_splits, world_fingerprint
    from pe_kit.text.encoder import Encoder

    enc = Encoder(config.model, max_seq_length=config.max_seq_length)
    corpus = make_arm(load_corpus(config.data, config.fmt, record_cap=config.record_cap), config.arm, config.record_cap)
    splits = study_splits(config, corpus)
    bank_texts, info = _bank_texts(config, corpus, splits)
    world = World(config, corpus, splits, bank_texts, enc.encode(bank_texts, desc="bank"), encoder=enc,
                  bank_info=info, fingerprint=world_fingerprint(config, bank_texts, enc))
    depth = MechanismConfig().top_k + config.max_probes
    for split in ("canary", "aux"):
        emb, owner, ids = _stack(world.users(split), enc, desc=split)
        world.records[split] = {"emb": emb, "owner": owner, "ids": ids, "index": build_neighbor_index(emb, world.bank, depth)}
    return world


def test_background_mu_eff(world, design, mech, audit) -> float:
    """μ_eff of the design with Σ̂_P estimated from the *test* users instead of the aux users (evaluation only):
    the out-of-sample check of a design chosen to maximize the aux-based μ_eff."""
    import numpy as np

    from pe_kit.audit.moments import aux_moments, mu_eff, null_moments, restrict
    from pe_kit.study.world import canary_contribution

    v = canary_contribution(world, design, mech)
    # ordinary has no probes: P is the canary's natural support, as design_mu_eff and audit_design take it
    coords = np.flatnonzero(v) if design.positions is None else np.sort(np.asarray(design.positions))
    v = v[coords]
    test = restrict(world.contributions("test", mech, design), coords)
    _, sigma = null_moments(aux_moments(test, audit.shrinkage), test.shape[0], mech, audit.ridge)
    return mu_eff(v, sigma)


def check_resumable(header, rows, out, config, rounds: int) -> None:
    """Refuse to append to ``out`` when its columns are not this script's or its rows were made with other sizes or
    another number of edit rounds: the resume skips (variant, canary) pairs already there, so rows of two settings
    would mix in one CSV."""
    if list(header or ()) != [*FIELDS, *AUDIT_FIELDS]:
        raise SystemExit(f"{out}: its columns are not this script's (an older CSV without the audit's counts, γ, δ "
                         "and rule?): pass another --out")
    for r in rows:
        want = {"arm": config.arm, "n_aux": config.n_aux, "n_test": config.n_test}
        if any(str(r.get(k, v)) != str(v) for k, v in want.items()):
            raise SystemExit(f"{out}: its rows have arm={r.get('arm')}, n_aux={r.get('n_aux')}, n_test={r.get('n_test')}, this run "
                             f"{want}: pass another --out (rows of two sizes must not mix)")
        if r.get("round_mu_eff") and len(r["round_mu_eff"].split(";")) != rounds + 1:
            raise SystemExit(f"{out}: its composed rows have {len(r['round_mu_eff'].split(';')) - 1} edit rounds, this "
                             f"run {rounds} (--refine-rounds): pass another --out")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--data")
    ap.add_argument("--format", dest="fmt")
    ap.add_argument("--set", action="append", default=[], help="key=value overrides, as pe-kit reproduce --set")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--mu-only", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arm", default="long", choices=("long", "short"), help="data arm (default long; bank A either way)")
    ap.add_argument("--refine-rounds", type=int, help="ComposedConfig.refine_rounds (default: DEFAULT_CONFIG's)")
    ap.add_argument("--out", required=True)
    from _smoke import parse_args

    a = parse_args(ap, argv, preset="tiny", variants="composed-mu_eff,nonce", refine_rounds=0)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np

    from pe_kit.attack.composed_probes import AuxBackground, design_mu_eff
    from pe_kit.study import setup
    from steps import designs
    from pe_kit.run.presets import get_preset
    from pe_kit.settings import MechanismConfig, parse_override
    from pe_kit.study.world import audit_design

    if a.refine_rounds is not None:
        import dataclasses

        from pe_kit.attack import composed_probes

        composed_probes.DEFAULT_CONFIG = dataclasses.replace(composed_probes.DEFAULT_CONFIG,
                                                             refine_rounds=a.refine_rounds)
    P = get_preset(a.preset, dict(parse_override(s) for s in a.set) or None, a.data, a.fmt)
    params = {**P.as_dict(), "seed": a.seed}
    config = setup.study_config(params, arm=a.arm, bank="bankA")
    t0 = time.time()
    world = light_world(config) if a.mu_only else setup.world_for(config)
    print(f"world {time.time() - t0:.0f} s: {config}", flush=True)
    mech = MechanismConfig.from_params(params)
    audit = setup.audit_from(params, P.per_variant)
    aux = world.records["aux"]
    back = AuxBackground(aux["index"], aux["emb"], aux["owner"], len(aux["ids"]), len(world.splits.test))
    out = Path(a.out)
    done = set()
    if out.exists():
        with out.open() as f:
            reader = csv.DictReader(f)
            old = list(reader)
        from pe_kit.attack import composed_probes as _cp

        check_resumable(reader.fieldnames, old, out, config, _cp.DEFAULT_CONFIG.refine_rounds)
        done = {(r["variant"], r["canary_index"]) for r in old}
    new_file = not out.exists()
    with out.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*FIELDS, *AUDIT_FIELDS], extrasaction="ignore")
        if new_file:
            w.writeheader()
        slots = designs.canary_slots("composed-mu_eff", P.per_variant, config.n_canary)
        for variant in [v.strip() for v in a.variants.split(",") if v.strip()]:
            for j, slot in enumerate(slots):
                if (variant, str(j)) in done:
                    continue
                calls = []
                encode = world.encoder.encode

                def counting(texts, desc="embedding", _enc=encode):
                    e = _enc(texts, desc=desc)
                    calls.append(world.encoder.last_stats.get("encoded", 0))
                    return e

                world.encoder.encode = counting
                t1 = time.time()
                try:  # nonce: fresh synthetic canary j; the others: the composed canaries (one seed per variant, j)
                    design, reason = designs.try_design(world, variant, j, slot, a.seed, mech, P.pool_size, P.paraphraser)
                finally:
                    world.encoder.encode = encode
                seconds = time.time() - t1
                if design is None:
                    print(f"{variant} #{j}: skipped ({reason})", flush=True)
                    continue
                summ = design_mu_eff(design.canary_embeddings, world.bank, design.probe_embeddings, design.positions,
                                     back, mech, audit)
                row = {"preset": a.preset, "arm": config.arm, "bank": config.bank, "variant": variant, "canary_index": j,
                       "canary_slot": slot if variant != "nonce" else "", "canary_id": design.canary_id,
                       "mu_eff": summ["mu_eff"], "mu_eff_ceiling": 1 / mech.noise_multiplier,
                       "mu_eff_fraction": summ["mu_eff"] * mech.noise_multiplier,
                       "canary_votes_on_P": summ["canary_votes_on_P"], "canary_norm": summ["canary_norm"],
                       "n_aux": config.n_aux, "n_test": config.n_test, "encodes": int(sum(calls)),
                       "design_seconds": round(seconds, 1), "pool_size": design.info.get("pool_size", ""),
                       "kept_round": design.info.get("kept_round", ""),
                       "round_mu_eff": ";".join(f"{r['aux_mu_eff']:.4f}" for r in design.info.get("rounds", [])),
                       "beyond_paper": design.info.get("beyond_paper", "")}
                if not a.mu_only:
                    res = audit_design(world, design, mech, audit, designs._rng(a.seed, variant, j, 23))
                    assert abs(res["mu_eff"] - summ["mu_eff"]) <= 1e-9 * max(1.0, res["mu_eff"])
                    row.update({k: res[k] for k in ("epsilon_lower", "epsilon_theory", "trials", *AUDIT_FIELDS)},
                               mu_eff_test_background=test_background_mu_eff(world, design, mech, audit))
                w.writerow(row)
                f.flush()
                print(f"{variant} #{j} ({design.canary_id}): mu_eff {summ['mu_eff']:.3f} votes on P "
                      f"{summ['canary_votes_on_P']:.2f} eps_lower {row.get('epsilon_lower', float('nan')):.3f} "
                      f"encodes {row['encodes']} {seconds:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
