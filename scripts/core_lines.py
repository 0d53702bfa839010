"""How heavy is the kit's core? Lines of the ``pe_kit`` modules that the core calls import.

The core is what ``pip install pe_kit[study]`` runs: ``audit_scores``, ``epsilon_theory`` and ``audit_mechanism``
on every variant of ``attack.variants.ALL_VARIANTS`` (tiny corpus, small sizes), with an empty cache (a cold run
imports the most: progress of the encoding, the generators of paraphrase pools). From the repository root::

    HF_HUB_OFFLINE=1 python scripts/core_lines.py          # one line per call: the lines loaded so far
    HF_HUB_OFFLINE=1 python scripts/core_lines.py --total  # only the final count (tests/test_layout.py)
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STUDY = dict(n_canary=5, n_aux=20, n_calibration=25, n_test=25, bank_size=1024, max_probes=16, max_seq_length=32)


def loaded_lines() -> int:
    files = {sys.modules[m].__file__ for m in list(sys.modules) if m == "pe_kit" or m.startswith("pe_kit.")}
    return sum(len(Path(f).read_text(encoding="utf-8").splitlines()) for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", action="store_true", help="print only the final count")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pe_kit_core_") as cache:
        os.environ["PE_KIT_CACHE"] = cache
        steps = measure()
    if args.total:
        print(steps[-1][1])
        return
    for name, lines in steps:
        print(f"{lines:6d}  {name}")


def measure() -> list[tuple[str, int]]:
    sys.path.insert(0, str(ROOT))
    import pe_kit as pk
    from pe_kit.attack.variants import ALL_VARIANTS

    rng = np.random.default_rng(0)
    pk.audit_scores(rng.normal(1.0, 1.0, 500), rng.normal(0.0, 1.0, 500), delta=1e-5)
    pk.epsilon_theory(noise_multiplier=1.0, sample_rate=0.1, delta=1e-5)
    steps = [("audit_scores, epsilon_theory", loaded_lines())]
    mechanism = pk.MechanismConfig(noise_multiplier=0.8, record_cap=16)
    for variant in ALL_VARIANTS:
        pk.audit_mechanism(str(ROOT / "tests/data/blogs-tiny.jsonl.gz"), variant=variant, mechanism=mechanism,
                           trials=1000, seed=0, pool_size=64, study=STUDY)
        steps.append((f"audit_mechanism(variant={variant!r})", loaded_lines()))
    return steps


if __name__ == "__main__":
    main()
