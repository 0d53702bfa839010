"""``pe-kit reproduce`` of a notebook that draws a tqdm bar, under a busy-loop load (issue 32 item 2).

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/reproduce_under_load.py [--runs 5] [--busy N] [--steps 4000]

Writes a one-cell notebook (the chatty cell of ``tests/test_reproduce_load.py``: a ``tqdm.auto`` bar of
``--steps`` redraws and a printed line every 400 steps), starts ``--busy`` busy-loop processes (default one per
core), and runs ``pe-kit reproduce --preset tiny --notebooks-dir … --notebooks 01`` ``--runs`` times (odd runs
without, even runs with ``--log-output``). A run passes when the CLI exits 0 and the executed notebook holds every
printed line. Prints each run's result and wall time, the load average, and the pass count. The busy loops are
ended (by process id) at the end.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_reproduce_load import CHATTY_CELL, EVERY, STEPS  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--busy", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--steps", type=int, default=STEPS)
    from _smoke import parse_args

    args = parse_args(ap, runs=1, busy=0, steps=400)
    work = Path(tempfile.mkdtemp(prefix="pe_kit-load-"))
    nbs = work / "nbs"
    nbs.mkdir()
    params = nbformat.v4.new_code_cell('output_dir = "."\npreset = "tiny"\nseed = 0')
    params.metadata["tags"] = ["parameters"]
    cell = CHATTY_CELL.replace(f"range({STEPS})", f"range({args.steps})")
    nb = nbformat.v4.new_notebook(cells=[params, nbformat.v4.new_code_cell(cell)])
    nbformat.write(nb, nbs / "01_mechanism.ipynb")
    expected = [f"line {i}" for i in range(0, args.steps, EVERY)] + [f"cell done {sum(range(args.steps))}"]
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    passed = 0
    try:
        for r in range(1, args.runs + 1):
            cmd = [sys.executable, "-m", "pe_kit.run.cli", "reproduce", "--preset", "tiny", "--notebooks-dir", str(nbs),
                   "--notebooks", "01", "--results-dir", str(work / f"res{r}")]
            if r % 2 == 0:
                cmd.append("--log-output")
            t0 = time.perf_counter()
            out = subprocess.run(cmd, capture_output=True, text=True)
            dt = time.perf_counter() - t0
            ok = out.returncode == 0
            if ok:
                nb = nbformat.read(next((work / f"res{r}").glob("*/notebooks/01_mechanism.ipynb")), as_version=4)
                text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
                ok = [x for x in text.splitlines() if x.startswith(("line ", "cell done"))] == expected
            passed += ok
            tail = "" if ok else " | " + (out.stdout + out.stderr).strip().splitlines()[-1][:160]
            print(f"run {r} ({'--log-output' if r % 2 == 0 else 'plain'}): {'PASS' if ok else 'FAIL'} in {dt:.0f} s, "
                  f"load average {os.getloadavg()[0]:.1f}{tail}", flush=True)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    print(f"{passed} of {args.runs} runs passed ({args.busy} busy loops on {os.cpu_count()} cores, "
          f"{args.steps} bar steps)")


if __name__ == "__main__":
    main()
