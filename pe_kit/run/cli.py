"""The ``pe-kit`` command: ``reproduce`` (``pe_kit.run.reproduce``), ``presets``, ``explore``
(``pe_kit.report.widgets.explorer_state``) and ``results RUN_DIR``, each documented in ``--help``. Exit codes: 0
success, 1 a notebook failed (named with its cell), 2 bad arguments.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Sequence

__all__ = ["main", "build_parser", "resolve_run_dir", "presets_text", "COLD_TIME"]


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``pe-kit`` (documented in ``--help``)."""
    from pe_kit.run.presets import PRESETS

    ap = argparse.ArgumentParser(prog="pe-kit", description="Audit the user-level DP of Private Evolution.")
    sub = ap.add_subparsers(dest="command", required=True)

    r = sub.add_parser("reproduce", help="run the notebooks headless into results/<run-id>/",
                       description="Execute the notebooks (01–08) with papermill, resumably, and write results.csv, "
                                   "results.md and figures (PNG + PDF).")
    r.add_argument("--preset", default="quick", choices=sorted(PRESETS), help="sizes (default: quick)")
    r.add_argument("--data", default=None, help="your corpus file (default: the bundled Blogs sample)")
    r.add_argument("--format", dest="fmt", default=None, choices=["auto", "blogs", "yelp", "sentiment140"],
                   help="format of --data (default: guessed from the file name)")
    r.add_argument("--fit-data", action="store_true",
                   help="shrink the preset's sizes (record_cap, splits, bank_size, notebook 06's generator) to fit "
                        "--data, keeping the protocol; prints what it chose and why (also in results.md)")
    r.add_argument("--seed", type=int, default=0, help="seed of splits, designs and trials (default 0)")
    r.add_argument("--run-id", default=None, help="run folder name (default: the preset, plus the data file stem)")
    r.add_argument("--results-dir", default="results", help="parent folder of runs (default: ./results)")
    r.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="change a setting (pe_kit.settings): a name, <section>.<field> or <notebook>.<field>, "
                        "e.g. --set trials=100000 --set mechanism.noise_multiplier=0.8 --set audit.delta=1e-6 "
                        "--set 06.rounds=3")
    r.add_argument("--notebooks", default=None, help="comma list of notebooks to run, e.g. 01,04 (default: all)")
    r.add_argument("--notebooks-dir", default=None, help="folder of the .ipynb files (default: the repository's)")
    r.add_argument("--force", action="store_true", help="re-execute finished notebooks (cached steps are kept)")
    r.add_argument("--keep-going", action="store_true", help="after a failed notebook, run the next ones")
    r.add_argument("--kernel", default=None, help="Jupyter kernel name (default: a kernel that runs this very Python)")
    r.add_argument("--log-output", action="store_true", help="stream cell output (inner tqdm bars) to the terminal")
    r.add_argument("--no-progress", action="store_true",
                   help="leave the run's time-left estimate out of each notebook's start and end line")

    sub.add_parser("presets", help="list presets and their sizes")

    e = sub.add_parser(
        "explore", help="ε_theory and expected ε_lower for σ, q, trials, μ_eff (no Jupyter)",
        description="The explorer's numbers without Jupyter (pe_kit.report.widgets.explorer_state): ε_theory of one "
                    "Poisson-subsampled Gaussian release (Opacus PRV accountant) and the ε_lower a threshold audit "
                    "is expected to certify with a canary of the given μ_eff (Gaussian score model, Eqs. 16–19, "
                    "one-sided Clopper–Pearson endpoints at tail probability γ, Eqs. 28–30).",
        epilog="Output: σ, q, trials, δ and γ = α / (4 · canaries) = 0.05 / (4 · 5) = 0.0025, the tail probability "
               "of each one-sided Clopper–Pearson endpoint in the paper's audits (Eqs. 29–30, App. E.6); then "
               "ε_theory, the expected ε_lower at μ_eff and its limit as trials → ∞.")
    e.add_argument("--sigma", type=float, default=1.0, metavar="σ",
                   help="noise multiplier σ (field noise_multiplier; noise std = σ · clip_norm C), > 0 (default 1.0)")
    e.add_argument("--q", type=float, default=0.1, metavar="q",
                   help="sampling rate q (field sample_rate): probability that a user takes part in a release, "
                        "in (0, 1] (default 0.1)")
    e.add_argument("--trials", type=float, default=1e6, metavar="N",
                   help="trials per hypothesis (field trials), e.g. 1e6 (default 10⁶)")
    e.add_argument("--mu-eff", type=float, default=None, metavar="μ",
                   help="the canary's effective signal μ_eff = √(vᵀΣ⁻¹v) (Eq. 15, unitless); capped at the "
                        "ceiling 1/σ (Eq. 20) (default: the ceiling, a perfect nonce canary)")
    e.add_argument("--delta", type=float, default=1e-5, metavar="δ",
                   help="δ of the (ε, δ) guarantee (field delta) (default 1e-5)")
    e.add_argument("--json", action="store_true", help="print every field as JSON (sigma, sample_rate, trials, delta, "
                                                      "gamma, mu_eff, epsilon_theory, epsilon_lower_expected, …); a "
                                                      "value that is not finite (ε_theory at --delta 0) is null and "
                                                      "named in not_finite with its value, 'inf' or 'nan'")

    s = sub.add_parser("results", help="print a finished run's results.md",
                       description="Print RUN_DIR/results.md, the tables that pe-kit reproduce collected from the "
                                   "notebooks' CSVs (RUN_DIR/results.csv holds every row). It reads, it does not "
                                   "re-collect: rerun the same pe-kit reproduce command to rebuild both (finished "
                                   "notebooks are reused).")
    s.add_argument("run_dir", metavar="RUN_DIR", nargs="?", default=None,
                   help="a run folder (e.g. results/quick), or a preset or run-id name (e.g. tiny): the newest run "
                        "folder under --results-dir named NAME or NAME-… (e.g. tiny-fit)")
    s.add_argument("--results-dir", default="results", help="where to look up a NAME (default: ./results)")
    return ap


def _reproduce(args) -> int:
    from pe_kit.settings import parse_override
    from pe_kit.run.reproduce import run_reproduction

    notebooks = [n.strip() for n in args.notebooks.split(",") if n.strip()] if args.notebooks else None
    try:
        overrides = dict(parse_override(x) for x in args.overrides)
        summary = run_reproduction(args.preset, run_id=args.run_id, results_dir=args.results_dir, data=args.data,
                                   fmt=args.fmt, seed=args.seed, overrides=overrides, notebooks=notebooks,
                                   notebooks_folder=args.notebooks_dir, force=args.force, keep_going=args.keep_going,
                                   kernel_name=args.kernel, log_output=args.log_output,
                                   progress=not args.no_progress, fit_data=args.fit_data)
    except (ValueError, FileNotFoundError, IsADirectoryError) as exc:
        print(f"pe-kit: {exc}", file=sys.stderr)
        return 2
    print(f"pe-kit: {'finished' if summary.ok else 'FAILED'} in {summary.seconds:.0f} s → {summary.run_dir}")
    if summary.results_md is not None:
        print(f"  table: {summary.results_md}")
    for f in summary.failures:  # the full message was printed once, when the notebook failed
        print(f"pe-kit: notebook {f.notebook} failed (details above; executed notebook: {f.executed})", file=sys.stderr)
    return 0 if summary.ok else 1


#: how long each preset takes cold (empty cache) on this project's 2-core machine, measured (docs/presets.md)
COLD_TIME = {
    "tiny": "about 3 min on 2 quiet CPU cores (191 s), 8.5 min when they are shared with other jobs (511 s at "
            "load 13; docs/presets.md)",
    "quick": "about 35 min on 2 idle CPU cores (2,099 s, docs/paper_run/quick); a rerun reuses the cached "
             "embeddings and finished notebooks",
    "paper": "hours on 2 CPU cores: scripts/paper_run.sh runs it in parts of 772–5,827 s each on the full Blog "
             "corpus (docs/results.md lists each part's time)",
}
#: the sizes ``pe-kit presets`` shows, as (column title, Preset field)
_SIZE_COLUMNS = (("m", "record_cap"), ("canary users", "n_canary"), ("canaries per variant", "per_variant"),
                 ("aux", "n_aux"), ("calibration", "n_calibration"), ("test N", "n_test"), ("p", "bank_size"),
                 ("r", "max_probes"), ("M", "pool_size"), ("token cap", "max_seq_length"), ("trials", "trials"),
                 ("sweep trials", "sweep_trials"))


def _count(v) -> str:
    from pe_kit.report.paper_compare import format_count

    # max_seq_length None: the model's own cap (MiniLM-L6: 256 word pieces); sizes print without thousands commas
    return "256" if v is None else format_count(v).replace(",", "")


def presets_text() -> str:
    """What ``pe-kit presets`` prints: per preset its description, cold time (:data:`COLD_TIME`), sizes and data."""
    from pe_kit.run.presets import NEEDS_DATA, PRESETS

    out = []
    for name, p in PRESETS.items():
        d = p.as_dict()
        cells = [(title, _count(d[key])) for title, key in _SIZE_COLUMNS]
        widths = [max(len(t), len(c)) for t, c in cells]
        data = ("pass --data PATH (Yelp, Sentiment140 or the full Blog corpus)" if name in NEEDS_DATA else
                "the bundled Blogs sample" if d["data"] is None else Path(d["data"]).name)
        out += [f"{name}: {p.description}", f"   cold: {COLD_TIME.get(name, 'not measured')}",
                "   " + "  ".join(t.rjust(w) for (t, _), w in zip(cells, widths)),
                "   " + "  ".join(c.rjust(w) for (_, c), w in zip(cells, widths)),
                f"   data: {data}; arms {', '.join(d['arms'])}; banks {', '.join(map(str, d['banks']))}", ""]
    out.append("Why these sizes, and what each reduction does to μ_eff and ε_lower: docs/presets.md. "
               "--set key=value changes any field.")
    return "\n".join(out)


def _presets() -> int:
    print(presets_text())
    return 0


def _explore(args) -> int:
    from pe_kit.audit.expectations import separable_epsilon
    from pe_kit.report.widgets import explorer_state
    from pe_kit.settings import check_param

    try:  # σ, q, δ and trials checked as their declarations say (pe_kit.settings), the explorer's σ > 0 on top
        st = explorer_state(args.sigma, args.q, check_param("trials", args.trials), args.mu_eff, args.delta)
    except ValueError as exc:
        print(f"pe-kit: {exc}", file=sys.stderr)
        return 2
    if args.json:
        # strict JSON has no Infinity or NaN: such a field is null, and not_finite says which value it stands for
        bad = {k: str(v) for k, v in st.items() if isinstance(v, float) and not math.isfinite(v)}
        print(json.dumps({**st, **dict.fromkeys(bad), "not_finite": bad}, indent=1, allow_nan=False))
    else:
        print(f"noise multiplier σ={st['sigma']:g}  sample rate q={st['sample_rate']:g}  "
              f"trials={st['trials']:,} per hypothesis  δ={st['delta']:g}")
        print(f"γ={st['gamma']:g}  (tail probability of each one-sided Clopper–Pearson endpoint, Eqs. 29–30: "
              "α/(4·canaries) = 0.05/(4·5))")
        print(f"ε_theory            {st['epsilon_theory']:.3f}")
        print(f"expected ε_lower    {st['epsilon_lower_expected']:.3f}  at μ_eff={st['mu_eff']:.3f}"
              f"{' (capped at 1/σ)' if st['mu_eff_capped'] else ''}")
        print(f"ε as trials → ∞     {st['epsilon_asymptotic']:.3f}")
        reach = separable_epsilon(st["sample_rate"], st["trials"], st["gamma"], st["delta"])
        print(f"reach (any canary)  {reach:.3f}  the most these trials can certify (a perfectly separable canary)"
              + ("; below ε_theory: no violation can be shown" if reach < st["epsilon_theory"] else ""))
    return 0


def resolve_run_dir(name: str, results_dir: str | Path = "results") -> tuple[Path, list[Path]]:
    """The run folder ``pe-kit results NAME`` prints, and every match newest first: ``name`` itself, or the folders
    ``name`` / ``name-…`` under ``results_dir`` holding a ``results.md``. Raises FileNotFoundError when none match."""
    path = Path(name).expanduser()
    if (path / "results.md").is_file():
        return path, [path]
    root = Path(results_dir).expanduser().resolve()
    runs = sorted((d for d in root.iterdir() if (d / "results.md").is_file()),
                  key=lambda d: (d / "results.md").stat().st_mtime, reverse=True) if root.is_dir() else []
    key = path.name
    matches = [d for d in runs if d.name == key or d.name.startswith(f"{key}-")] if key else []
    if matches and len(path.parts) <= 1:
        return matches[0], matches
    have = (f"run folders with a results.md under {root}: {', '.join(d.name for d in runs)}" if runs
            else f"no run folder under {root} has a results.md yet")
    raise FileNotFoundError(f"{path / 'results.md'} not found and no run named {key!r} or {key + '-…'!r}; {have}. "
                            "Run 'pe-kit reproduce' first (or pass --results-dir where your runs are)")


def _results(args) -> int:
    if args.run_dir is None:
        print("pe-kit results: give RUN_DIR (e.g. results/quick or quick)", file=sys.stderr)
        return 2
    try:
        run_dir, matches = resolve_run_dir(args.run_dir, args.results_dir)
    except FileNotFoundError as exc:
        print(f"pe-kit: {exc}", file=sys.stderr)
        return 2
    if len(matches) > 1 or run_dir != Path(args.run_dir).expanduser():
        others = (f" (newest of {len(matches)}; others: {', '.join(d.name for d in matches[1:])})"
                  if len(matches) > 1 else "")
        print(f"pe-kit: {run_dir / 'results.md'}{others}", file=sys.stderr)
    print((run_dir / "results.md").read_text())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pe-kit`` console script. Returns the exit code (0 ok, 1 failure, 2 usage)."""
    args = build_parser().parse_args(argv)
    commands = {"reproduce": _reproduce, "presets": lambda _: _presets(), "explore": _explore}
    try:
        return commands.get(args.command, _results)(args)
    except BrokenPipeError:  # `pe-kit results DIR | head` closed the pipe: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except ModuleNotFoundError as exc:  # a lighter install than the main one
        if not exc.name or exc.name.split(".")[0] == "pe_kit":
            raise
        print(f"pe-kit {args.command}: needs {exc.name}, which this install lacks; the pe-kit commands need the main "
              "install: bash scripts/bootstrap.sh (or pip install 'pe_kit[notebooks]')", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
