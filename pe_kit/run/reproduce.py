"""The headless reproduction: run the narrative notebooks in order with papermill into ``results/<run-id>/``
(:func:`run_reproduction`), reusing each notebook whose done-marker (``pe_kit.run.markers``) still matches, then
join their CSVs into ``results.csv`` and ``results.md``.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from pe_kit.run.execute import ReproduceError, environ, execute_notebook, this_python_kernel
from pe_kit.run.markers import (bundled_data, code_fingerprint, default_run_id, input_digests, marker_key, marker_valid,
                                outputs_of, write_file)
from pe_kit.run.run_progress import RunClock, machine_info, run_estimate
from pe_kit.run.preflight import (_declared, check_bank_sizes, check_banks, check_models, check_notebook_overrides,
                                  unused_overrides)
from pe_kit.run.presets import _REPO, PRESETS, audited_mechanism, get_preset, notebook_params
from pe_kit.settings import NOTEBOOKS, Preset, check_param

__all__ = ["ReproduceError", "NotebookStatus", "RunSummary", "notebooks_dir", "default_run_id", "run_reproduction",
           "this_python_kernel", "run_sizes", "about_preset", "preset_changes", "input_digests", "marker_key"]


@dataclass
class NotebookStatus:
    """What happened to one notebook: ``status`` is ``ran``, ``reused`` or ``failed``; seconds of execution."""

    notebook: str
    status: str
    seconds: float = 0.0
    error: str | None = None


@dataclass
class RunSummary:
    """Outcome of :func:`run_reproduction`: the run folder, per-notebook statuses, results files, failures."""

    run_dir: Path
    statuses: list[NotebookStatus]
    results_csv: Path | None
    results_md: Path | None
    seconds: float
    failures: list[ReproduceError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no notebook failed."""
        return not self.failures


def notebooks_dir() -> Path:
    """Folder of the notebooks: env ``PE_KIT_NOTEBOOKS`` or ``notebooks/``; FileNotFoundError if neither exists."""
    env = os.environ.get("PE_KIT_NOTEBOOKS")
    path = Path(env) if env else _REPO / "notebooks"
    if not path.is_dir():
        raise FileNotFoundError(f"notebooks folder {path} not found; pass --notebooks-dir or set PE_KIT_NOTEBOOKS")
    return path


@environ(PE_KIT_HEADLESS="1", TQDM_DISABLE="1")  # the kernels inherit them: plain progress lines, other bars off
def run_reproduction(preset: str | Preset = "quick", run_id: str | None = None, results_dir: str | Path = "results",
                     data: str | None = None, fmt: str | None = None, seed: int = 0,
                     overrides: Mapping[str, Any] | None = None, notebooks: Sequence[str] | None = None,
                     notebooks_folder: str | Path | None = None, force: bool = False, keep_going: bool = False,
                     kernel_name: str | None = None, log_output: bool = False, progress: bool = True,
                     echo: Callable[[str], None] = print, fit_data: bool = False) -> RunSummary:
    """Execute the notebooks in order into ``<results_dir>/<run_id>/`` (default :func:`default_run_id`; the same id
    resumes) and collect the results. The arguments are the ``pe-kit reproduce`` flags; ``echo`` takes the status
    lines. Returns ``RunSummary``. Raises ValueError for a bad preset, override or notebook name, an undeclared
    ``<notebook>.<parameter>``, or data too small (naming the ``--set`` keys, or ``--fit-data``); FileNotFoundError
    without a notebooks folder."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import papermill  # noqa: F401  (the runner's extra: missing, the run stops before any check or fit)

    seed = check_param("seed", seed)  # the notebooks' own check, before any kernel starts
    p = get_preset(preset, overrides, data, fmt)
    for check in (check_banks, check_bank_sizes, check_models):
        check(p)
    folder = Path(notebooks_folder) if notebooks_folder is not None else notebooks_dir()
    todo = _select(notebooks, folder)
    check_notebook_overrides(p, folder)
    p, fit_note, size_warnings = _fit(p, overrides, fit_data, echo, todo)
    unused = unused_overrides(overrides, todo, folder)
    for w in list(size_warnings) + unused:
        echo(f"pe-kit reproduce: WARNING: {w}")
    run_dir = Path(results_dir).expanduser().resolve() / (run_id or default_run_id(p, fit_note is not None))
    (run_dir / ".done").mkdir(parents=True, exist_ok=True)
    (run_dir / "notebooks").mkdir(exist_ok=True)
    fingerprint = code_fingerprint(folder / "steps")
    t_run = time.perf_counter()
    statuses: list[NotebookStatus] = []
    failures: list[ReproduceError] = []
    echo(f"pe-kit reproduce: preset {p.name}, seed {seed} → {run_dir}")
    jobs = []  # (notebook, file, parameters, done-marker key, reusable)
    for nb, src in ((nb, folder / f"{nb}.ipynb") for nb in todo):
        params = notebook_params(nb, p, run_dir, seed, _declared(src))
        key = marker_key(src, params, fingerprint)
        jobs.append((nb, src, params, key, not force and marker_valid(run_dir / ".done" / f"{nb}.json", key, run_dir)))
    to_run = [nb for nb, *_, reusable in jobs if not reusable]
    planned, line = run_estimate(to_run, p.name) if progress and to_run else (None, None)
    if line:
        echo(f"pe-kit reproduce: {line}")
    clock = RunClock(todo, p.name, planned=planned)
    for i, (nb, src, params, key, reusable) in enumerate(jobs, start=1):
        status, err = _notebook(nb, src, params, key, reusable, f"[{i}/{len(todo)}] {nb}", run_dir, clock,
                                p.per_variant, kernel_name, log_output, progress, echo)
        statuses.append(status)
        if err is not None:
            failures.append(err)
            if not keep_going:
                break
    total = time.perf_counter() - t_run
    warned = {"fit": fit_note, "sizes": size_warnings, "unused": unused}
    results_csv, results_md = _results(run_dir, p, seed, statuses, failures, total, warned, echo)
    write_file(run_dir / "run.json", json.dumps(
        {"preset": p.as_dict(), "seed": seed, "statuses": [asdict(s) for s in statuses], "seconds": total,
         "finished": _dt.datetime.now().isoformat(timespec="seconds"), "machine": machine_info(),
         "estimate": {"planned": planned, "line": line, "checks": clock.reported}},
        indent=1, default=str).encode())
    return RunSummary(run_dir, statuses, results_csv, results_md, total, failures)


_SIZE_SYMBOLS = {"record_cap": "m", "n_canary": "canaries", "per_variant": "per variant", "n_aux": "aux",
                 "n_calibration": "calibration", "n_test": "test", "bank_size": "p", "max_probes": "r",
                 "pool_size": "M", "max_seq_length": "token cap", "trials": "trials"}


def run_sizes(p: Preset) -> str:
    """One line with the sizes that shape a run's numbers (``m=64, canaries=25 (5 per variant), …``), and a clause
    per notebook's own size (``notebook 06: p=512``)."""
    cap = p.max_seq_length if p.max_seq_length is not None else "model default (256)"
    exact = f" (exact: r=m={p.record_cap} copies)" if p.max_probes != p.record_cap else ""
    line = (f"m={p.record_cap}, canaries={p.n_canary} ({p.per_variant} per variant), "
            f"aux/calibration/test={p.n_aux}/{p.n_calibration}/{p.n_test}, p={p.bank_size}, r={p.max_probes}{exact}, "
            f"M={p.pool_size}, token cap={cap}, trials={p.trials:,} per hypothesis (sweeps {p.sweep_trials:,})")
    for nb in sorted(p.extra):
        own = [(k, v) for k, v in p.extra[nb].items() if k in _SIZE_SYMBOLS and v != getattr(p, k)]
        if own:
            line += f"; notebook {nb.split('_')[0]}: " + ", ".join(f"{_SIZE_SYMBOLS[k]}={v}" for k, v in own)
    return line


def preset_changes(p: Preset) -> dict:
    """The settings of ``p`` (``Preset.paths``) that differ from the preset of the same name, a notebook's own as
    ``06.bank_size`` (``(as noise_multiplier)`` where a common value replaced it)."""
    base = PRESETS.get(p.name)
    if base is None:
        return {}
    new, old = p.paths(), base.paths()
    out = {}
    for k in [*new, *(k for k in old if k not in new)]:
        if new.get(k) != old.get(k):
            name = k if "." not in k else f"{k.split('_')[0]}.{k.split('.', 1)[1]}"
            out[name] = new[k] if k in new else f"(as {k.split('.', 1)[1]})"
    return out


def about_preset(p: Preset, changed: bool) -> str:
    """``p.description``, or when ``changed`` a line naming the preset and pointing to the run's sizes."""
    if not changed:
        return p.description
    return (f"preset {p.name}, with the settings listed under 'changed from the preset'; this run's sizes are "
            "under 'sizes of this run' (the preset's own description and sizes: pe-kit presets)")


def _fit(p: Preset, overrides: Mapping[str, Any] | None, fit_data: bool, echo: Callable[[str], None],
         notebooks: Sequence[str] | None = None):
    """Check ``p`` against its data (own data only): fit it (``fit_data``) or refuse it; then the stability
    warnings. Returns (preset, fit summary or None, warnings)."""
    from pe_kit.run.fit import arms_used, data_profile, fit_preset, reserved_for, stability_warnings

    if bundled_data(p):
        return p, None, stability_warnings(p, notebooks=notebooks)
    prof = data_profile(p.data, p.fmt, p.record_cap, p.on_error, isolated=True,   # pass 1, in a child process
                        reserved=reserved_for(p, notebooks))
    fit = fit_preset(p, prof, fixed=list(overrides or {}), notebooks=notebooks)
    note = None
    if fit.fitted and not fit_data and not fit.definite:  # only the estimated public-bank size is short
        echo(f"pe-kit reproduce: WARNING: {fit.reasons[0]} (an estimate; notebook 01 will say if the bank cannot "
             "be drawn; --fit-data would set " + ", ".join(f"{k}={n}" for k, (o, n) in fit.changes.items()) + ")")
    elif fit.fitted and not fit_data:
        raise ValueError(f"data {p.data} is too small for preset {p.name}: {fit.reasons[0]}. Add --fit-data to fit "
                         "the sizes to the data (it prints what it chose), or set them yourself: --set "
                         + " --set ".join(f"{k}={new}" for k, (old, new) in fit.changes.items()))
    if fit.fitted and fit_data:
        p, note = fit.preset, fit.summary()
        echo(f"pe-kit reproduce: {note}")
    warnings = stability_warnings(p, prof, notebooks)
    if arms_used(p, notebooks):  # pass 2 once, in a child: every notebook's build_world reads the stored selection
        from pe_kit.data.corpus_cache import run_isolated

        sel = run_isolated("select", data=p.data, fmt=p.fmt, record_cap=p.record_cap, on_error=p.on_error)
        echo(f"pe-kit reproduce: data {p.data}: {sel['users']:,} users, {sel['records']:,} records at record_cap="
             f"{p.record_cap} stored by content (pe_kit.data.corpus_cache); the notebooks read them, not the file")
    return p, note, warnings


def _select(notebooks: Sequence[str] | None, folder: Path) -> list[str]:
    """The notebook stems to run, in ``NOTEBOOKS`` order: ``notebooks`` (stems, numbers or file names) or every one in
    ``folder``. Raises ValueError for a named notebook missing, FileNotFoundError when none is left."""
    if notebooks is None:
        todo = [nb for nb in NOTEBOOKS if (folder / f"{nb}.ipynb").is_file()]
    else:
        todo = []
        for nb in notebooks:
            stem = nb[:-6] if nb.endswith(".ipynb") else nb
            matches = [k for k in NOTEBOOKS if k == stem or k.split("_")[0] == stem]
            stem = matches[0] if matches else stem
            if not (folder / f"{stem}.ipynb").is_file():
                raise ValueError(f"notebook {nb!r} not found in {folder}; available: "
                                 f"{', '.join(sorted(q.stem for q in folder.glob('*.ipynb')))}")
            todo.append(stem)
        todo.sort(key=lambda s: NOTEBOOKS.index(s) if s in NOTEBOOKS else len(NOTEBOOKS))
    if not todo:
        raise FileNotFoundError(f"no notebooks to run in {folder}")
    return todo


def _notebook(nb: str, src: Path, params: dict, key: str, reusable: bool, head: str, run_dir: Path, clock: RunClock,
              per_variant: int, kernel_name, log_output: bool, progress: bool,
              echo: Callable[[str], None]) -> tuple[NotebookStatus, ReproduceError | None]:
    """Reuse notebook ``nb`` (a valid done-marker) or execute it and write its marker; its status lines echoed after
    ``head``. Returns its status and, for a failure, the ``ReproduceError`` (else None)."""
    from pe_kit.report.results import short_cells

    marker = run_dir / ".done" / f"{nb}.json"
    if reusable:
        info = json.loads(marker.read_text())
        echo(f"{head}: reused (finished {info.get('finished', '?')}, {info.get('seconds', 0):.0f} s)")
        clock.finish(nb, reused=True)
        return NotebookStatus(nb, "reused", float(info.get("seconds", 0.0))), None
    marker.unlink(missing_ok=True)
    out_nb = run_dir / "notebooks" / f"{nb}.ipynb"
    echo(f"{head}: running …; {clock.line()}" if progress else f"{head}: running …")
    clock.start(nb)
    t0 = time.perf_counter()
    err = execute_notebook(nb, src, out_nb, params, run_dir, kernel_name, log_output, echo)
    outs = outputs_of(run_dir, nb)
    if err is None and f"{nb}.csv" not in outs:
        err = ReproduceError(f"notebook {nb} finished but wrote no {run_dir / (nb + '.csv')}; every notebook "
                             "must write its rows with pe_kit.report.results.write_rows", nb, None, out_nb)
    dt = time.perf_counter() - t0
    clock.finish(nb)
    if err is not None:
        echo(f"{head}: FAILED after {dt:.0f} s\n  {err}")  # the one full report of this failure
        return NotebookStatus(nb, "failed", dt, str(err)), err
    info = {"notebook": nb, "key": key, "params": params, "outputs": outs, "seconds": dt,
            "finished": _dt.datetime.now().isoformat(timespec="seconds")}
    write_file(marker, json.dumps(info, indent=1, default=str).encode())
    echo(f"{head}: done in {dt:.0f} s ({len(outs)} files)" + (f"; {clock.line()}" if progress else ""))
    for line in clock.checks():
        echo(f"pe-kit reproduce: {line}")
    for line in short_cells(run_dir / f"{nb}.csv", per_variant):
        echo(f"    {line}")
    return NotebookStatus(nb, "ran", dt), None


def _results(run_dir: Path, p: Preset, seed: int, statuses: list, failures: list, total: float, warned: dict,
             echo: Callable[[str], None]) -> tuple[Path | None, Path | None]:
    """Write ``results.csv`` (the rows of every finished notebook of ``run_dir``) and ``results.md`` (settings,
    sizes, statuses and the ``warned`` notes); (None, None) when no notebook wrote rows."""
    from pe_kit.report.results import collect, summary_markdown

    others = sorted(q.stem for q in (run_dir / ".done").glob("*.json") if q.stem not in NOTEBOOKS)
    df = collect(run_dir, [nb for nb in (*NOTEBOOKS, *others) if (run_dir / ".done" / f"{nb}.json").is_file()])
    if df.empty:
        return None, None
    results_csv = run_dir / "results.csv"
    write_file(results_csv, df.to_csv(index=False).encode())
    figures = sorted(str(f.relative_to(run_dir)) for f in (run_dir / "figures").glob("*.png"))
    changed = preset_changes(p)
    meta = {"preset": p.name, "about this preset": about_preset(p, bool(changed)), "seed": seed,
            "sizes of this run": run_sizes(p), "mechanism audited": audited_mechanism(p),
            "changed from the preset (--set / --data / --fit-data)":
                ", ".join(f"{k}={v}" for k, v in changed.items()) or "none",
            "data": p.data or "bundled Blogs sample (pe_kit/data_files/blogs-900.jsonl.gz)",
            "notebooks": ", ".join(f"{s.notebook} ({s.status}, {s.seconds:.0f} s)" for s in statuses),
            "total notebook time": f"{sum(s.seconds for s in statuses):.0f} s",
            "this invocation": f"{total:.0f} s", "rows": len(df)}
    if warned["fit"]:
        meta["fitted to the data (--fit-data)"] = warned["fit"]
    if warned["sizes"]:
        meta["WARNING: sizes too small for stable numbers"] = " ".join(
            f"({i}) {w}" for i, w in enumerate(warned["sizes"], start=1))
    if warned["unused"]:
        meta["WARNING: settings no notebook of this run reads"] = " ".join(warned["unused"])
    if failures:
        meta["FAILED"] = "; ".join(f"{f.notebook} (cell {f.cell_index})" for f in failures)
    results_md = run_dir / "results.md"
    write_file(results_md, summary_markdown(df, meta, figures).encode())
    echo(f"results: {results_csv} ({len(df)} rows), {results_md}")
    return results_csv, results_md
