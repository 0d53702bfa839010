"""``pe-kit reproduce`` under load, run N times: a tally of passes and the executed notebooks of every failure.

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/reproduce_under_load.py [--runs 5] [--busy N] [--steps 4000]
    HF_HUB_OFFLINE=1 python benchmarks/reproduce_under_load.py --case sigma2 [--runs 10] [--min-load 4]

``--case chatty`` (default; issue 32 item 2): writes a one-cell notebook (the chatty cell of
``tests/test_reproduce_load.py``: a ``tqdm.auto`` bar of ``--steps`` redraws and a printed line every 400 steps),
starts ``--busy`` busy-loop processes (default one per core), and runs ``pe-kit reproduce --preset tiny
--notebooks-dir … --notebooks 01`` ``--runs`` times (odd runs without, even runs with ``--log-output``). A run
passes when the CLI exits 0 and the executed notebook holds every printed line.

``--case sigma2``: ``pe-kit reproduce --preset tiny --notebooks 03,04 --set mechanism.noise_multiplier=2 --set
mechanism.sample_rate=0.05`` on the repository's notebooks, the first run with an empty ``PE_KIT_CACHE`` (every run
with ``--cold every``), the later ones sharing that cache. A run passes when the CLI exits 0. While it runs, busy
loops are added (one every 15 s, at most ``--busy``) whenever the 1-minute load average is below ``--min-load``
and removed above ``--min-load`` + 2, so every run sees at least that load. A failed run's executed notebooks and
its terminal output are copied to ``<work>/failed-<run>/``; a passed run's ``results.csv`` is kept as
``<work>/results-<run>.csv``, and its line shows the margins of notebook 04's asserts (ε_lower ≤ ε_theory, μ_eff ≤ its
ceiling 1/σ, Eq. 20) and a digest of its ε_lower values (equal digests: the runs agree to 10 decimals).

Both print each run's result, wall time and load average (1-minute, min–max over the run), then the pass count.
The busy loops are ended (by process id) at the end.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_reproduce_load import CHATTY_CELL, EVERY, STEPS  # noqa: E402

SIGMA2 = ["--preset", "tiny", "--notebooks", "03,04", "--set", "mechanism.noise_multiplier=2",
          "--set", "mechanism.sample_rate=0.05"]


class Loader:
    """Busy-loop processes that keep the 1-minute load average at or above ``min_load`` (at most ``cap`` loops;
    ``min_load=None``: exactly ``cap`` loops). ``loads`` holds the load average sampled every ``poll`` seconds."""

    def __init__(self, cap: int, min_load: float | None, poll: float = 15.0):
        self.cap, self.min_load, self.poll = cap, min_load, poll
        self.procs: list[subprocess.Popen] = []
        self.loads: list[float] = []
        self._stop = threading.Event()
        if min_load is None:
            self.procs = [self._busy() for _ in range(cap)]
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    @staticmethod
    def _busy() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", "while True: pass"])

    def _loop(self) -> None:
        while True:
            load = os.getloadavg()[0]
            self.loads.append(load)
            if self.min_load is not None and load < self.min_load and len(self.procs) < self.cap:
                self.procs.append(self._busy())
            elif self.min_load is not None and load > self.min_load + 2 and self.procs:
                self._end(self.procs.pop())
            if self._stop.wait(self.poll):
                return

    @staticmethod
    def _end(p: subprocess.Popen) -> None:
        p.kill()
        p.wait()

    def mark(self) -> int:
        """Index into ``loads`` from which a run's samples start."""
        return len(self.loads)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        while self.procs:
            self._end(self.procs.pop())


def chatty_notebook(work: Path, steps: int) -> tuple[Path, list[str]]:
    """The one-cell chatty notebook folder and the lines its executed notebook must hold."""
    nbs = work / "nbs"
    nbs.mkdir()
    params = nbformat.v4.new_code_cell('output_dir = "."\npreset = "tiny"\nseed = 0')
    params.metadata["tags"] = ["parameters"]
    cell = CHATTY_CELL.replace(f"range({STEPS})", f"range({steps})")
    nbformat.write(nbformat.v4.new_notebook(cells=[params, nbformat.v4.new_code_cell(cell)]), nbs / "01_mechanism.ipynb")
    return nbs, [f"line {i}" for i in range(0, steps, EVERY)] + [f"cell done {sum(range(steps))}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=["chatty", "sigma2"], default="chatty")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--busy", type=int, default=os.cpu_count() or 2,
                    help="busy loops (chatty: always this many; sigma2: at most this many)")
    ap.add_argument("--min-load", type=float, default=4.0, help="sigma2: the load average to keep (default 4)")
    ap.add_argument("--cold", choices=["first", "every"], default="first", help="sigma2: runs with an empty cache")
    ap.add_argument("--steps", type=int, default=STEPS, help="chatty: bar redraws")
    ap.add_argument("--work", default=None, help="folder for runs, caches and failures (default: a new temp folder)")
    from _smoke import parse_args

    args = parse_args(ap, runs=1, busy=0, steps=400)
    work = Path(args.work or tempfile.mkdtemp(prefix="pe_kit-load-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"work folder {work}", flush=True)
    if args.case == "chatty":
        nbs, expected = chatty_notebook(work, args.steps)
    loader = Loader(args.busy, None if args.case == "chatty" else args.min_load)
    passed = 0
    try:
        for r in range(1, args.runs + 1):
            res = work / f"res{r}"
            env = dict(os.environ, HF_HUB_OFFLINE="1")
            if args.case == "chatty":
                cmd = ["--preset", "tiny", "--notebooks-dir", str(nbs), "--notebooks", "01"]
                cmd += ["--log-output"] if r % 2 == 0 else []
                label = "--log-output" if r % 2 == 0 else "plain"
            else:
                cache = work / ("cache" if args.cold == "first" else f"cache{r}")
                cold = not cache.exists()
                env["PE_KIT_CACHE"] = str(cache)
                cmd, label = SIGMA2, "empty cache" if cold else "warm cache"
            start, t0 = loader.mark(), time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "pe_kit.run.cli", "reproduce", *cmd, "--results-dir", str(res)],
                                 capture_output=True, text=True, env=env)
            dt = time.perf_counter() - t0
            loads = loader.loads[start:] or [os.getloadavg()[0]]
            ok = out.returncode == 0
            if ok and args.case == "chatty":
                nb = nbformat.read(next(res.glob("*/notebooks/01_mechanism.ipynb")), as_version=4)
                text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
                ok = [x for x in text.splitlines() if x.startswith(("line ", "cell done"))] == expected
            passed += ok
            tail = ""
            if not ok:
                kept = work / f"failed-{r}"
                kept.mkdir(exist_ok=True)
                (kept / "terminal.txt").write_text(out.stdout + "\n--- stderr ---\n" + out.stderr)
                for f in res.glob("*/notebooks/*.ipynb"):
                    shutil.copy2(f, kept / f.name)
                tail = f" | kept {kept} | " + ((out.stdout + out.stderr).strip().splitlines() or [""])[-1][:160]
            elif args.case == "sigma2":  # keep the rows: the margins of notebook 04's asserts, and whether runs agree
                rows = pd.read_csv(next(res.glob("*/results.csv")))
                rows.to_csv(work / f"results-{r}.csv", index=False)
                shutil.rmtree(res, ignore_errors=True)
                nb04 = rows[rows["notebook"] == "04_audit"]
                tail = (f" | 04: max ε_lower − ε_theory {(nb04['epsilon_lower'] - nb04['epsilon_theory']).max():+.4f}, "
                        f"max μ_eff − ceiling {(nb04['mu_eff'] - nb04['mu_eff_ceiling']).max():+.2e}, ε_lower digest "
                        + hashlib.sha256(nb04["epsilon_lower"].round(10).to_numpy().tobytes()).hexdigest()[:8])
            print(f"run {r} ({label}): {'PASS' if ok else 'FAIL'} in {dt:.0f} s, load average {min(loads):.1f}–"
                  f"{max(loads):.1f} ({len(loader.procs)} busy loops now){tail}", flush=True)
    finally:
        loader.stop()
    load_note = (f"{args.busy} busy loops" if args.case == "chatty"
                 else f"load kept ≥ {args.min_load} with up to {args.busy} busy loops")
    print(f"{passed} of {args.runs} runs passed ({args.case}; {load_note} on {os.cpu_count()} cores)", flush=True)


if __name__ == "__main__":
    main()
