"""Are two runs' numbers the same? Compares two ``results.csv`` files of ``pe-kit reproduce`` row by row.

Every shared column must be identical (columns added or removed are listed) (NaN equal to NaN) except wall times and versions, which change from run to
run by nature. Used before and after a refactor: run the same preset and seed on both trees, then::

    python scripts/compare_runs.py results/tiny/results.csv /tmp/after/tiny/results.csv

Prints ``identical: R rows × C numeric columns`` and exits 0, or lists the first differing cells and exits 1.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

#: columns that measure the machine, not the science
VOLATILE = ("seconds", "version_", "python", "encoder_device", "wall", "elapsed")


def differences(before: pd.DataFrame, after: pd.DataFrame) -> tuple[list[str], int]:
    """Per differing column, its first differing cell (``'row R, column C: a → b (and n more rows)'``), and how many
    numeric columns were compared."""
    if len(before) != len(after):
        return [f"row count {len(before)} → {len(after)}"], 0
    cols = [c for c in before.columns if c in after.columns and not any(c.startswith(v) or v in c for v in VOLATILE)]
    numeric = [c for c in cols if pd.api.types.is_numeric_dtype(before[c]) and pd.api.types.is_numeric_dtype(after[c])]
    out = []
    for c in cols:
        a, b = before[c], after[c]
        if c in numeric:
            same = (a.to_numpy() == b.to_numpy()) | (np.isnan(a.to_numpy(float)) & np.isnan(b.to_numpy(float)))
        else:
            same = (a.fillna("<NA>").astype(str) == b.fillna("<NA>").astype(str)).to_numpy()
        rows = np.flatnonzero(~same)
        if rows.size:
            i = rows[0]
            more = f" (and {rows.size - 1} more rows)" if rows.size > 1 else ""
            out.append(f"row {i}, column {c}: {a.iloc[i]} → {b.iloc[i]}{more}")
    return out, len(numeric)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    args = ap.parse_args(argv)
    before, after = (pd.read_csv(p, low_memory=False) for p in (args.before, args.after))
    gone, new = sorted(set(before) - set(after)), sorted(set(after) - set(before))
    if gone or new:
        print(f"columns removed {gone}, added {new}; the {len(set(before) & set(after))} shared columns compared")
    diff, n = differences(before, after)
    if diff:
        print(f"{len(diff)} differences:", *diff[:40], sep="\n  ")
        return 1
    print(f"identical: {len(before)} rows × {n} numeric columns (plus every text column)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
