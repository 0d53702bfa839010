"""Does a smaller size change the science? μ_eff per variant on the same canaries, size by size.

μ_eff = √(vᵀ Σ̂⁻¹ v) (Eqs. 3, 15) is the quantity that fixes what an audit can show: the expected ε_lower
at n trials is a function of (μ_eff, q, n) alone (``pe_kit.audit.expectations.expected_epsilon``). Σ̂ is
the aux users' shrunk second moment scaled by the test population size N (Eqs. 34–35), so μ_eff at any
N needs only the canary, the bank and the aux users — not N real test users. This script builds one
world per (token cap, bank size p) on the same data, arm, seed, canaries and aux users, designs the same
canaries for each variant, and prints μ_eff per canary at every N asked for, plus the per-variant median,
and the expected ε_lower at 10⁶ trials of the median.

Usage (defaults: bundled Blogs sample, long arm, record cap 64):

    .venv/bin/python benchmarks/fidelity_mu_eff.py --caps 64 256 --banks 2048 8192 --ns 300 1000 \
        --variants ordinary exact nonce --n-aux 500 --out docs/fidelity_mu_eff.csv

Every text is embedded once per token cap in a run (a per-text dictionary in front of the kit's encoder).

Quick size against paper size, on the same canaries, from a CSV this script wrote (no embedding):

    .venv/bin/python benchmarks/fidelity_mu_eff.py --compare docs/fidelity_mu_eff_A.csv \
        --quick token_cap=64,bank_size=8192,n_aux=150,n_test=300 \
        --paper token_cap=64,bank_size=8192,n_aux=300,n_test=1000

prints, per variant, the median μ_eff at both sizes, the per-canary change (paper − quick: median, min, max) and
whether the medians lie within ``--tolerance`` (0.05, issue 11's criterion for the natural canary).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "notebooks"))  # the notebooks' step modules (steps)

from pe_kit.audit.expectations import expected_epsilon  # noqa: E402
from pe_kit.audit.moments import aux_moments, mu_eff, null_moments, restrict  # noqa: E402
from pe_kit.settings import AuditConfig, MechanismConfig  # noqa: E402
from pe_kit.study.world import StudyConfig, build_world, canary_contribution  # noqa: E402
from pe_kit.text.encoder import Encoder  # noqa: E402
from steps.designs import canary_slots, try_design  # noqa: E402


class TextMemo:
    """An ``Encoder`` stand-in that embeds each distinct text once per process (then looks it up)."""

    def __init__(self, encoder: Encoder):
        self.inner = encoder
        self.memo: dict[str, np.ndarray] = {}
        self.encoded = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def encode(self, texts, desc: str = "embedding") -> np.ndarray:
        texts = list(texts)
        new = list(dict.fromkeys(t for t in texts if t not in self.memo))
        if new:
            emb = self.inner.encode(new, desc=desc)
            self.encoded += len(new)
            self.memo.update(zip(new, emb))
        d = self.inner.dimension if not callable(self.inner.dimension) else self.inner.dimension()
        return np.stack([self.memo[t] for t in texts]) if texts else np.zeros((0, d), np.float32)


def mu_eff_at(world, design, mech: MechanismConfig, audit: AuditConfig, ns, aux_sizes) -> dict:
    """{(n_aux, N): μ_eff} with Σ̂ from the first n_aux aux users (a prefix of the seeded aux split)."""
    v_full = canary_contribution(world, design, mech)
    coords = np.sort(np.asarray(design.positions if design.positions is not None else np.flatnonzero(v_full),
                                np.int64))
    v = v_full[coords]
    aux = restrict(world.contributions("aux", mech, design), coords)
    out = {}
    for a in aux_sizes:
        moments = aux_moments(aux[:a], audit.shrinkage)
        out.update({(a, n): mu_eff(v, null_moments(moments, n, mech, audit.ridge)[1]) for n in ns})
    return out


SIZE_KEYS = ("token_cap", "bank_size", "n_aux", "n_test", "record_cap", "arm")


def parse_size(text: str) -> dict:
    """``"token_cap=64,n_test=300"`` → {"token_cap": 64, "n_test": 300} (keys of ``SIZE_KEYS``).

    Raises ValueError naming the key for an unknown key or a missing ``=``."""
    out = {}
    for part in filter(None, (t.strip() for t in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in SIZE_KEYS:
            raise ValueError(f"size {part!r}: use key=value with key one of {SIZE_KEYS}")
        out[key] = value if key == "arm" else int(value)
    return out


def compare_sizes(df, quick: dict, paper: dict, tolerance: float = 0.05):
    """μ_eff per variant at a quick size against a paper size, on the same canaries (rows of this script's CSV).

    Args:
        df: pandas DataFrame with the CSV columns (``variant``, ``canary_id``, ``mu_eff`` and the size columns).
        quick, paper: size settings selecting one configuration each ({column: value}, see ``parse_size``).
        tolerance: the largest |median(paper) − median(quick)| counted as "within" (μ_eff units).

    Returns:
        DataFrame, one row per variant (CSV order): ``canaries`` (present at both sizes), ``mu_eff_quick`` /
        ``mu_eff_paper`` (medians over those canaries), ``median_change`` (paper − quick of the medians),
        ``canary_change_median`` / ``_min`` / ``_max`` (per-canary paper − quick), ``within`` (bool).

    Raises:
        ValueError: when a setting selects no row, or a canary appears twice at one setting (the setting is
            incomplete: name more size columns).
    """
    import pandas as pd

    def pick(setting, name):
        sel = df
        for k, v in setting.items():
            sel = sel[sel[k] == v]
        if sel.empty:
            raise ValueError(f"--{name} {setting} selects no row of the CSV")
        if sel.duplicated(["variant", "canary_id"]).any():
            raise ValueError(f"--{name} {setting} matches a canary more than once: name more of {SIZE_KEYS}")
        return sel.set_index(["variant", "canary_id"])["mu_eff"]

    both = pd.concat({"quick": pick(quick, "quick"), "paper": pick(paper, "paper")}, axis=1).dropna()
    both["change"] = both["paper"] - both["quick"]
    rows = []
    for variant in dict.fromkeys(df["variant"]):
        if variant not in both.index.get_level_values(0):
            continue
        g = both.loc[variant]
        mq, mp = float(g["quick"].median()), float(g["paper"].median())
        rows.append({"variant": variant, "canaries": len(g), "mu_eff_quick": mq, "mu_eff_paper": mp,
                     "median_change": mp - mq, "canary_change_median": float(g["change"].median()),
                     "canary_change_min": float(g["change"].min()), "canary_change_max": float(g["change"].max()),
                     "within": bool(abs(mp - mq) <= tolerance)})
    return pd.DataFrame(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=None, help="corpus (default: the bundled Blogs sample)")
    ap.add_argument("--arm", default="long")
    ap.add_argument("--record-cap", type=int, default=64)
    ap.add_argument("--caps", type=int, nargs="+", default=[64, 256], help="encoder token caps")
    ap.add_argument("--banks", type=int, nargs="+", default=[2048, 8192], help="bank sizes p")
    ap.add_argument("--ns", type=int, nargs="+", default=[300, 1000], help="test population sizes N")
    ap.add_argument("--variants", nargs="+", default=["ordinary", "exact", "nonce"])
    ap.add_argument("--per-variant", type=int, default=5)
    ap.add_argument("--n-canary", type=int, default=25)
    ap.add_argument("--n-aux", type=int, default=500)
    ap.add_argument("--aux-sizes", type=int, nargs="+", default=None,
                    help="Σ̂ from the first n of the aux users (default: all n_aux); the designs always see all")
    ap.add_argument("--pool-size", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--paraphraser", default=None,
                    help="paraphrase pool route: smollm2 (shipped LLM pools, else generated), auto, wordnet "
                         "(default: pe_kit.study.pools.DEFAULT_PARAPHRASER)")
    ap.add_argument("--out", default=None, help="CSV of every (cap, p, variant, canary, N) μ_eff")
    ap.add_argument("--compare", default=None, metavar="CSV",
                    help="compare two sizes from a CSV this script wrote (with --quick and --paper); embeds nothing")
    ap.add_argument("--quick", default="token_cap=64,bank_size=8192,n_aux=150,n_test=300",
                    help="the quick size for --compare, key=value,... of " + ", ".join(SIZE_KEYS))
    ap.add_argument("--paper", default="token_cap=64,bank_size=8192,n_aux=300,n_test=1000",
                    help="the paper size for --compare")
    ap.add_argument("--tolerance", type=float, default=0.05, help="largest |median change| counted as within")
    from _smoke import TINY_DATA, parse_args

    args = parse_args(ap, argv, data=TINY_DATA, record_cap=16, caps=[32], banks=[256], ns=[20],
                      variants=["ordinary", "nonce"], per_variant=2, n_canary=5, n_aux=10, pool_size=64)

    import pandas as pd

    if args.compare:
        out = compare_sizes(pd.read_csv(args.compare), parse_size(args.quick), parse_size(args.paper), args.tolerance)
        pd.set_option("display.width", 160)
        print(f"quick: {args.quick}\npaper: {args.paper}\n{out.round(3).to_string(index=False)}")
        return

    mech, audit = MechanismConfig(record_cap=args.record_cap), AuditConfig()
    aux_sizes = sorted(set(args.aux_sizes or [args.n_aux]))
    if aux_sizes[-1] > args.n_aux:
        raise SystemExit(f"--aux-sizes {aux_sizes} must be ≤ --n-aux {args.n_aux}")
    rows = []
    t0 = time.perf_counter()
    for cap in args.caps:
        enc = TextMemo(Encoder("all-MiniLM-L6-v2", max_seq_length=cap))
        for p in args.banks:
            cfg = StudyConfig(data=args.data, arm=args.arm, n_canary=args.n_canary, n_aux=args.n_aux, n_calibration=1,
                              n_test=1, bank_size=p, record_cap=args.record_cap, seed=args.seed)
            world = build_world(cfg, encoder=enc, mechanism=mech)
            for variant in args.variants:
                for j, slot in enumerate(canary_slots(variant, args.per_variant, args.n_canary)):
                    design, reason = try_design(world, variant, j, slot, args.seed, mech, args.pool_size,
                                                 generator=args.paraphraser)
                    if design is None:
                        print(f"  {variant} canary {j}: skipped ({reason})", flush=True)
                        continue
                    for (a, n), mu in mu_eff_at(world, design, mech, audit, args.ns, aux_sizes).items():
                        rows.append({"token_cap": cap, "bank_size": p, "n_test": n, "n_aux": a, "variant": variant,
                                     "canary": j, "canary_id": design.canary_id, "mu_eff": mu,
                                     "record_cap": args.record_cap, "arm": args.arm,
                                     "pool_generator": design.info.get("pool_generator", ""),
                                     "pool_source": design.info.get("pool_source", "")})
            print(f"cap {cap}, p {p}: done at {time.perf_counter() - t0:.0f} s ({enc.encoded} texts embedded)",
                  flush=True)
    df = pd.DataFrame(rows)
    if args.out:
        df.to_csv(args.out, index=False)
    med = df.groupby(["variant", "token_cap", "bank_size", "n_aux", "n_test"]).mu_eff.agg(["median", "min", "max", "count"])
    med["eps_expected_1e6"] = [expected_epsilon(m, mech.sample_rate, 10**6) for m in med["median"]]
    pd.set_option("display.width", 160)
    print(med.round(3).to_string())


if __name__ == "__main__":
    main()
