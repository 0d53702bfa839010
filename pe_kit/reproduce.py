"""The headless reproduction: run the narrative notebooks in order with papermill into ``results/<run-id>/``.

``pe-kit reproduce --preset quick`` (see ``pe_kit.cli``) calls :func:`run_reproduction`, which

1. resolves a :class:`Preset` (``tiny`` for CI, ``quick`` for a laptop, ``paper`` for the paper's sizes) and
   any ``--set key=value`` overrides, and derives each notebook's papermill parameters
   (:func:`notebook_params`; every notebook takes ``output_dir``, ``preset``, ``seed``, ``data`` and the
   sizes it uses, and writes ``<output_dir>/<notebook>.csv`` plus figures under ``<output_dir>/figures``);
2. executes each notebook unless a done-marker ``<run>/.done/<notebook>.json`` shows it already finished
   with the same parameters, the same notebook file and the same pe_kit code, and its output files are
   still there with the recorded sizes (then it is reused);
3. inside a notebook, every audit step is cached under ``<run>/.steps`` (``pe_kit.results.StepCache``),
   and embeddings under ``PE_KIT_CACHE``, so a rerun after a failure resumes mid-notebook;
4. on a failure, stops (or, with ``keep_going``, continues with the next notebook), names the notebook,
   the cell and the error, and keeps the executed notebook and everything that finished;
5. concatenates the notebooks' CSVs into ``results.csv`` and renders ``results.md``.

Source of the sizes: paper §3 and App. D (N = 1000, 500 aux, 500 calibration, p = 8192, r = 64, m = 64,
5 canaries per variant, 10⁶ trials per hypothesis; 5·10⁶ for Fig. 1).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .cache import atomic_write_bytes, cache_dir, content_hash

__all__ = ["Preset", "PRESETS", "NOTEBOOKS", "NOTEBOOK_KEYS", "ReproduceError", "NotebookStatus", "RunSummary",
           "get_preset", "resolve_params", "notebook_params", "text_progress", "notebooks_dir", "default_run_id",
           "run_reproduction", "parse_override"]

#: Notebook stems, in run order. 06 belongs to the multi-round work and runs only if its file exists.
NOTEBOOKS = ("01_mechanism", "02_probe_design", "03_llr_checks", "04_audit", "05_ablations", "06_multiround_mauve")

_REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Preset:
    """Sizes and settings of one reproduction (every field can be overridden with ``--set key=value``).

    Data and study: ``data`` (None = the bundled 900-blogger sample), ``fmt`` (``auto|blogs|yelp|sentiment140``),
    ``arms`` / ``banks`` (notebook 04's grid; ``bankA`` = bundled label-only bank, ``public`` = records of
    users in no split, or a JSON Lines path), ``arm`` / ``bank`` (the single world of notebooks 01–03 and 05),
    ``record_cap`` (m), ``n_canary`` (canary split size), ``per_variant`` (canaries audited per variant),
    ``n_aux``, ``n_calibration``, ``n_test`` (N), ``bank_size`` (p), ``max_probes`` (r), ``pool_size`` (M,
    candidate pool of the paraphrase and nonce variants), ``model``,
    ``max_seq_length`` (token cap of the encoder; None = model default), ``variants`` (``"all"`` or names).

    Trials (per hypothesis per split): ``trials`` (Table 2/4 and Table 3), ``llr_trials`` (notebook 03),
    ``sweep_trials`` (Fig. 1), ``tightness_trials`` (a list of budgets).

    Ablations: ``sigmas``, ``qs``, ``sweep_variants``, ``sweep_arm``, ``encoders`` (``"auto"`` = MiniLM-L6 plus
    MPNet if installed, or names/paths), ``encoder_variants``, ``encoder_per_variant``, ``tightness_variant``,
    ``ceiling_sigmas`` (notebook 03).

    ``description``: what the preset is for and how it differs from the paper (written into results.md).
    """

    name: str
    description: str
    data: str | None = None
    fmt: str = "auto"
    arms: tuple = ("long", "short")
    banks: tuple = ("bankA", "public")
    arm: str = "long"
    bank: str = "bankA"
    variants: Any = "all"
    record_cap: int = 64
    n_canary: int = 40
    per_variant: int = 5
    n_aux: int = 500
    n_calibration: int = 500
    n_test: int = 1000
    bank_size: int = 8192
    max_probes: int = 64
    pool_size: int = 512
    model: str = "all-MiniLM-L6-v2"
    max_seq_length: int | None = None
    trials: int = 1_000_000
    llr_trials: int = 1_000_000
    ceiling_sigmas: tuple = (0.5, 1.0, 2.0)
    sweep_arm: str = "short"
    sweep_variants: tuple = ("ordinary", "exact", "paraphrase-mu_eff", "nonce")
    sigmas: tuple = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
    qs: tuple = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
    sweep_trials: int = 5_000_000
    encoders: Any = "auto"
    encoder_variants: tuple = ("ordinary", "exact", "nonce")
    encoder_per_variant: int = 5
    tightness_variant: str = "nonce"
    tightness_trials: tuple = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        """Plain dict (tuples as lists)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        name="tiny",
        description=("CI sizes on real data (tests/data/blogs-tiny.jsonl.gz, 80 bloggers × 16 posts): 60 users in "
                     "splits, p=256, r=16, MiniLM-L6 at 32 tokens, 2·10⁴ trials. Checks that everything runs; "
                     "its numbers are not meant to be read."),
        data=str(_REPO / "tests" / "data" / "blogs-tiny.jsonl.gz"), record_cap=16, n_canary=5, per_variant=2,
        n_aux=15, n_calibration=15, n_test=25, bank_size=256, max_probes=16, pool_size=64, max_seq_length=32,
        trials=20_000,
        llr_trials=20_000, sweep_arm="short", sweep_variants=("ordinary", "nonce"), sigmas=(0.5, 1.0, 2.0),
        qs=(0.05, 0.1, 0.3), sweep_trials=20_000, encoders=("all-MiniLM-L6-v2",), encoder_per_variant=1,
        tightness_trials=(1_000, 5_000, 20_000),
        extra={"06_multiround_mauve": {"rounds": 3, "mauve_seeds": [0, 1], "mauve_samples": 500}}),
    "quick": Preset(
        name="quick",
        description=("Laptop sizes on the bundled Blogs sample (900 bloggers, posts ≤ 600 chars): record cap m=32; "
                     "5 real canaries shared by the five real-canary variants (paper: 5 independent ones each); "
                     "100 aux / 100 calibration / 200 test users; p=2048, r=64, candidate pools of M=256; "
                     "MiniLM-L6 truncated to 64 tokens; 2·10⁵ trials per hypothesis (paper: m=64, 500/500/1000, "
                     "p=8192, M=512, full-length texts, 10⁶ trials). Fewer trials and users give looser "
                     "Clopper–Pearson bounds, so ε_lower here sits below what the paper's sizes give."),
        record_cap=32, n_canary=5, per_variant=5, n_aux=100, n_calibration=100, n_test=200, bank_size=2048,
        max_probes=64, pool_size=256, max_seq_length=64, trials=200_000, llr_trials=200_000,
        sigmas=(0.5, 0.75, 1.0, 1.5, 2.0), qs=(0.02, 0.05, 0.1, 0.2, 0.4), sweep_trials=200_000,
        encoder_per_variant=5, tightness_trials=(1_000, 10_000, 100_000, 1_000_000)),
    "paper": Preset(
        name="paper",
        description=("The paper's sizes (§3, App. D): m=64, 40 canaries (5 per variant), 500 aux / 500 calibration / "
                     "1000 test users, p=8192, r=64, full-length MiniLM-L6, 10⁶ trials (5·10⁶ for the sweeps). "
                     "Needs a corpus with ≥ 2,040 eligible users per arm (--data PATH: Yelp, Sentiment140, or "
                     "the full Blogs corpus with a smaller n_test). Hours on 2 CPU cores."),
    ),
}

_COMMON = ("output_dir", "preset", "seed", "data", "fmt", "model", "max_seq_length", "record_cap", "n_canary",
           "per_variant", "n_aux", "n_calibration", "n_test", "bank_size", "max_probes", "pool_size", "trials")

#: The parameters each notebook declares in its ``parameters`` cell (besides the common ones).
NOTEBOOK_KEYS: dict[str, tuple] = {
    "01_mechanism": _COMMON + ("arm", "bank"),
    "02_probe_design": _COMMON + ("arm", "bank", "variants"),
    "03_llr_checks": _COMMON + ("arm", "bank", "llr_trials", "ceiling_sigmas"),
    "04_audit": _COMMON + ("arms", "banks", "variants"),
    "05_ablations": _COMMON + ("arm", "bank", "sweep_arm", "sweep_variants", "sigmas", "qs", "sweep_trials", "encoders",
                               "encoder_variants", "encoder_per_variant", "tightness_variant", "tightness_trials"),
}


class ReproduceError(RuntimeError):
    """A notebook of the reproduction failed; the message names the notebook, the cell and the error.

    Attributes: notebook (stem), cell_index (int or None), executed (path of the partially executed notebook).
    """

    def __init__(self, message: str, notebook: str | None = None, cell_index: int | None = None,
                 executed: Path | None = None):
        super().__init__(message)
        self.notebook, self.cell_index, self.executed = notebook, cell_index, executed


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


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``key=value`` (value as JSON if it parses, else a comma list for ``a,b``, else a string).

    ``key`` is a ``Preset`` field (``trials``, ``variants`` …) or ``<notebook>.<parameter>`` for one notebook's
    own parameter, e.g. ``06.generator=openai`` or ``06_multiround_mauve.rounds=3`` (stored in ``Preset.extra``).

    Raises:
        ValueError: if ``text`` has no ``=``, the key is not a ``Preset`` field, or the notebook is unknown
            (the message lists the valid keys).
    """
    if "=" not in text:
        raise ValueError(f"--set {text!r}: use key=value, e.g. --set trials=100000")
    key, raw = text.split("=", 1)
    key = key.strip()
    if "." in key:
        nb, param = key.split(".", 1)
        matches = [n for n in NOTEBOOKS if n == nb or n.split("_")[0] == nb]
        if not matches or not param.isidentifier():
            raise ValueError(f"--set {key}=…: use <notebook>.<parameter> with a notebook of {', '.join(NOTEBOOKS)} "
                             "(or its number, e.g. 06.rounds=3)")
        key = f"{matches[0]}.{param}"
    else:
        valid = {f.name for f in fields(Preset)} - {"name", "description", "extra"}
        if key not in valid:
            raise ValueError(f"--set {key}=…: unknown setting; valid keys: {', '.join(sorted(valid))} "
                             "(or <notebook>.<parameter>)")
    raw = raw.strip()
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = [v.strip() for v in raw.split(",")] if "," in raw else raw
    if raw.lower() in ("none", "null"):
        value = None
    default = {f.name: f.default for f in fields(Preset)}.get(key)
    if isinstance(default, tuple) and value is not None and not isinstance(value, list):
        value = [value]  # a single value for a list setting (``--set banks=public``)
    return key, _absolute_paths(key, value)


def _absolute_paths(key: str, value: Any) -> Any:
    """Make relative file paths in path-like settings absolute against the current directory.

    Notebooks run with the run folder as their working directory, so ``--set banks=my_bank.jsonl``
    must be resolved where the command was typed. Applies to ``data``/``bank``/``banks`` keys (also
    ``<notebook>.data`` …); ``file:<path>`` keeps its prefix; names that are not existing files are kept.
    """
    if key.split(".")[-1] not in ("data", "bank", "banks"):
        return value
    if isinstance(value, list):
        return [_absolute_paths(key, v) for v in value]
    if not isinstance(value, str):
        return value
    prefix, path = ("file:", value[5:]) if value.startswith("file:") else ("", value)
    candidate = Path(path).expanduser()
    if not candidate.is_absolute() and candidate.is_file():
        return prefix + str(candidate.resolve())
    return value


def get_preset(name: str | Preset, overrides: Mapping[str, Any] | None = None, data: str | None = None,
               fmt: str | None = None) -> Preset:
    """A preset by name (or a ``Preset``), with ``data``/``fmt`` and field overrides applied and checked.

    With user data of format ``yelp`` the data arms default to ``("long",)``, with ``sentiment140`` to
    ``("short",)`` (the paper's two datasets), and banks to ``("public",)`` (the bundled bank A is
    generated for the Blogs corpus).

    Raises:
        ValueError: unknown preset or key, a size below 1, or the paper preset without ``data``.
    """
    if isinstance(name, Preset):
        p = name
    elif name not in PRESETS:
        raise ValueError(f"preset={name!r} is unknown; use one of {sorted(PRESETS)}")
    else:
        p = PRESETS[name]
    changes: dict[str, Any] = {}
    if data is not None:
        changes["data"] = str(Path(data).expanduser().resolve())
    if fmt is not None and fmt != "auto":
        changes["fmt"] = fmt
    if data is not None:
        f = fmt or "auto"
        name_l = Path(data).name.lower()
        kind = f if f != "auto" else ("sentiment140" if name_l.endswith((".csv", ".csv.gz")) else
                                       "yelp" if "yelp" in name_l else "blogs")
        if kind == "yelp":
            changes.update(arms=("long",), arm="long", sweep_arm="long", banks=("public",), bank="public")
        elif kind == "sentiment140":
            changes.update(arms=("short",), arm="short", sweep_arm="short", banks=("public",), bank="public")
    valid = {f.name for f in fields(Preset)}
    extra = {nb: dict(v) for nb, v in p.extra.items()}
    for k, v in (overrides or {}).items():
        if "." in k:  # a notebook's own parameter
            nb, param = k.split(".", 1)
            extra.setdefault(nb, {})[param] = v
            changes["extra"] = extra
            continue
        if k not in valid or k in ("name", "extra"):
            raise ValueError(f"override {k!r} is not a preset field; valid: {', '.join(sorted(valid - {'name', 'extra'}))}")
        changes[k] = tuple(v) if isinstance(v, list) else v
    p = replace(p, **changes)
    for k in ("record_cap", "n_canary", "per_variant", "n_aux", "n_calibration", "n_test", "bank_size", "pool_size", "trials",
              "llr_trials", "sweep_trials", "encoder_per_variant"):
        v = getattr(p, k)
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{k}={v!r} must be an integer ≥ 1 (preset {p.name})")
    if p.max_probes < 0 or p.max_probes > p.bank_size:
        raise ValueError(f"max_probes={p.max_probes} must lie in [0, bank_size={p.bank_size}]")
    if p.name == "paper" and p.data is None:
        raise ValueError("the paper preset needs the full corpus: pass --data PATH (Yelp reviews JSON, Sentiment140 "
                         "CSV, or a Blog-corpus JSON Lines file with --format blogs --set n_test=900)")
    if p.data is not None and not Path(p.data).is_file():
        raise ValueError(f"data={p.data!r} does not exist; pass an existing file with --data PATH")
    return p


def resolve_params(notebook: str, preset: str | Preset = "quick", **given: Any) -> dict:
    """The parameter dict a notebook works with: the preset's values for its keys, replaced by ``given``
    values that are not None. Notebooks call this first, so they run interactively with only ``preset`` set.

    Args:
        notebook: stem (e.g. ``"04_audit"``); unknown stems get the common keys.
        preset: a name from ``PRESETS`` or a ``Preset``.
        given: the notebook's parameters (``output_dir``, ``seed``, sizes …); None means "from the preset".

    Returns:
        dict with every key of ``NOTEBOOK_KEYS[notebook]`` (``output_dir`` default ``results/interactive``,
        ``seed`` default 0). Lists stay lists.

    Side effect: when run by ``pe-kit reproduce`` (env ``PE_KIT_HEADLESS=1``) progress bars switch to plain
    text (:func:`text_progress`), so they stream to the terminal with ``--log-output`` instead of being
    invisible notebook widgets.
    """
    if os.environ.get("PE_KIT_HEADLESS") == "1":
        text_progress()
    p = preset if isinstance(preset, Preset) else get_preset(preset, data=given.get("data"), fmt=given.get("fmt"))
    keys = NOTEBOOK_KEYS.get(notebook, _COMMON)
    base = p.as_dict()
    out: dict[str, Any] = {}
    for k in keys:
        if given.get(k) is not None:
            out[k] = given[k]
        elif k == "preset":
            out[k] = p.name
        elif k == "output_dir":
            out[k] = str(Path("results") / "interactive")
        elif k == "seed":
            out[k] = 0
        else:
            out[k] = base.get(k)
    for k, v in given.items():  # keys outside the table (e.g. a notebook's own extras) pass through
        if k not in out and v is not None:
            out[k] = v
    Path(out["output_dir"]).mkdir(parents=True, exist_ok=True)
    return out


def text_progress() -> None:
    """Make ``tqdm.auto`` bars plain text (stderr) in this process, as in a terminal.

    In a Jupyter kernel ``tqdm.auto`` draws ipywidgets, which a headless papermill run cannot show.
    """
    import tqdm.auto
    import tqdm.std

    tqdm.auto.tqdm = tqdm.std.tqdm


def notebook_params(notebook: str, preset: Preset, output_dir: Path, seed: int,
                    declared: Sequence[str] | None = None) -> dict:
    """Papermill parameters for one notebook: its keys from the preset, plus ``output_dir``/``seed``.

    For a notebook outside ``NOTEBOOK_KEYS`` (e.g. 06), every preset field, entry of
    ``preset.extra[notebook]`` and common key that the notebook declares in its ``parameters`` cell
    (``declared``) is passed. JSON-able values only (tuples → lists).
    """
    base = {**preset.as_dict(), **dict(preset.extra.get(notebook, {})), "preset": preset.name,
            "output_dir": str(output_dir), "seed": int(seed)}
    keys = NOTEBOOK_KEYS.get(notebook)
    if keys is None:
        keys = tuple(k for k in base if declared is not None and k in declared)
        if declared is not None and "output_dir" not in declared:
            keys = keys + ("output_dir",)
    out = {k: base.get(k) for k in keys}
    if declared is not None:
        out = {k: v for k, v in out.items() if k in declared or k == "output_dir"}
    return out


def this_python_kernel() -> str:
    """Name of a Jupyter kernel that runs *this* Python interpreter, registered for this process only.

    A user-level ``python3`` kernelspec (``~/.local/share/jupyter``) may point at another interpreter and
    would win over the virtual environment's; papermill would then execute the notebooks with other code.
    This writes a spec named ``pe_kit-<hash of sys.executable>`` under ``cache_dir()/jupyter`` and puts
    that folder first on ``JUPYTER_PATH`` (inherited by child processes); nothing outside the cache is
    touched. Returns the kernel name to pass to ``papermill.execute_notebook``.
    """
    name = "pe_kit-" + content_hash(sys.executable)[:12]
    root = cache_dir() / "jupyter"
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": f"Python (pe_kit, {sys.executable})", "language": "python"}
    path = root / "kernels" / name / "kernel.json"
    data = json.dumps(spec, indent=1).encode()
    if not path.is_file() or path.read_bytes() != data:
        atomic_write_bytes(path, data)
    current = os.environ.get("JUPYTER_PATH", "")
    if str(root) not in current.split(os.pathsep):
        os.environ["JUPYTER_PATH"] = str(root) + (os.pathsep + current if current else "")
    return name


def notebooks_dir() -> Path:
    """Folder of the notebooks: env ``PE_KIT_NOTEBOOKS`` or the repository's ``notebooks/``.

    Raises:
        FileNotFoundError: if neither exists (pass ``notebooks_dir=`` / ``--notebooks-dir``).
    """
    env = os.environ.get("PE_KIT_NOTEBOOKS")
    path = Path(env) if env else _REPO / "notebooks"
    if not path.is_dir():
        raise FileNotFoundError(f"notebooks folder {path} not found; pass --notebooks-dir or set PE_KIT_NOTEBOOKS")
    return path


def default_run_id(preset: Preset) -> str:
    """``<preset>`` for the default data, ``<preset>-<data file stem>`` otherwise (so reruns resume)."""
    if preset.data is None or preset.name == "tiny" and Path(preset.data) == Path(PRESETS["tiny"].data):
        return preset.name
    stem = Path(preset.data).name.split(".")[0]
    return f"{preset.name}-{stem}"


def _write(path: Path, data: bytes) -> None:
    """Atomic write, then the usual read permissions (the temp file starts private)."""
    atomic_write_bytes(path, data)
    os.chmod(path, 0o644)


def _code_fingerprint() -> str:
    """Hash of the pe_kit modules a notebook's outputs can depend on (all but the runner and the CLI)."""
    pkg = Path(__file__).parent
    return content_hash(*[(p.name, p.read_bytes()) for p in sorted(pkg.glob("*.py"))
                          if p.name not in ("cli.py", "reproduce.py")])[:16]


def _outputs(run_dir: Path, nb: str) -> dict:
    files = [run_dir / f"{nb}.csv"] + sorted((run_dir / "figures").glob(f"{nb}_*"))
    return {str(f.relative_to(run_dir)): f.stat().st_size for f in files if f.is_file()}


def _marker_valid(marker: Path, key: str, run_dir: Path) -> bool:
    try:
        info = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    if info.get("key") != key:
        return False
    outs = info.get("outputs") or {}
    if f"{marker.stem}.csv" not in outs:
        return False
    return all((run_dir / rel).is_file() and (run_dir / rel).stat().st_size == size and size > 0
               for rel, size in outs.items())


def _declared(path: Path) -> list[str]:
    """Names assigned at the top level of the notebook's ``parameters`` cell (robust to any comments)."""
    import re

    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            return re.findall(r"^([A-Za-z_]\w*)\s*(?::[^=]+)?=(?!=)", cell.source, flags=re.M)
    return []


def run_reproduction(preset: str | Preset = "quick", run_id: str | None = None, results_dir: str | Path = "results",
                     data: str | None = None, fmt: str | None = None, seed: int = 0,
                     overrides: Mapping[str, Any] | None = None, notebooks: Sequence[str] | None = None,
                     notebooks_folder: str | Path | None = None, force: bool = False, keep_going: bool = False,
                     kernel_name: str | None = None, log_output: bool = False, progress: bool = True,
                     echo: Callable[[str], None] = print) -> RunSummary:
    """Execute the notebooks in order into ``<results_dir>/<run_id>/`` and collect the results.

    Args:
        preset: ``tiny`` | ``quick`` | ``paper`` or a ``Preset``.
        run_id: folder name (default :func:`default_run_id`); rerunning the same id resumes.
        results_dir: parent of run folders. data, fmt: a user corpus (``--data PATH --format …``).
        seed: seeds splits, designs and trials. overrides: preset fields to change (``--set``).
        notebooks: stems to run (default all of ``NOTEBOOKS`` whose file exists), always in ``NOTEBOOKS`` order
            for known stems. notebooks_folder: where the ``.ipynb`` live (default :func:`notebooks_dir`).
        force: re-execute notebooks even when their done-marker is valid (audit steps stay cached).
        keep_going: after a failed notebook, run the next ones anyway.
        kernel_name: Jupyter kernel (default: ``this_python_kernel()``, i.e. this very interpreter).
        log_output: stream the cells' stdout/stderr (progress bars, prints) to this process's stdout/stderr.
        progress: papermill's per-cell tqdm bar. echo: where status lines go.

    Returns:
        ``RunSummary`` (``ok`` is False when a notebook failed; ``failures`` holds the ``ReproduceError``s).

    Raises:
        ValueError: bad preset, override or notebook name. FileNotFoundError: no notebooks folder.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    headless_before = os.environ.get("PE_KIT_HEADLESS")
    os.environ["PE_KIT_HEADLESS"] = "1"  # inherited by the kernels: text progress bars
    try:
        return _run(preset, run_id, results_dir, data, fmt, seed, overrides, notebooks, notebooks_folder, force,
                    keep_going, kernel_name, log_output, progress, echo)
    finally:
        if headless_before is None:
            os.environ.pop("PE_KIT_HEADLESS", None)
        else:
            os.environ["PE_KIT_HEADLESS"] = headless_before


def _run(preset, run_id, results_dir, data, fmt, seed, overrides, notebooks, notebooks_folder, force, keep_going,
         kernel_name, log_output, progress, echo) -> RunSummary:
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    from .results import collect, summary_markdown

    p = get_preset(preset, overrides, data, fmt)
    folder = Path(notebooks_folder) if notebooks_folder is not None else notebooks_dir()
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
    run_dir = Path(results_dir).expanduser().resolve() / (run_id or default_run_id(p))
    (run_dir / ".done").mkdir(parents=True, exist_ok=True)
    (run_dir / "notebooks").mkdir(exist_ok=True)
    fingerprint = _code_fingerprint()
    t_run = time.perf_counter()
    statuses: list[NotebookStatus] = []
    failures: list[ReproduceError] = []
    echo(f"pe-kit reproduce: preset {p.name}, seed {seed} → {run_dir}")
    for i, nb in enumerate(todo, start=1):
        src = folder / f"{nb}.ipynb"
        declared = _declared(src)
        params = notebook_params(nb, p, run_dir, seed, declared)
        key = content_hash(src.read_bytes(), json.dumps(params, sort_keys=True, default=str), fingerprint)
        marker = run_dir / ".done" / f"{nb}.json"
        head = f"[{i}/{len(todo)}] {nb}"
        if not force and _marker_valid(marker, key, run_dir):
            info = json.loads(marker.read_text())
            echo(f"{head}: reused (finished {info.get('finished', '?')}, {info.get('seconds', 0):.0f} s)")
            statuses.append(NotebookStatus(nb, "reused", float(info.get("seconds", 0.0))))
            continue
        marker.unlink(missing_ok=True)
        out_nb = run_dir / "notebooks" / f"{nb}.ipynb"
        echo(f"{head}: running …")
        t0 = time.perf_counter()
        try:
            pm.execute_notebook(str(src), str(out_nb), parameters=params, kernel_name=kernel_name or this_python_kernel(),
                                progress_bar=progress, cwd=str(run_dir),
                                stdout_file=sys.stdout if log_output else None,
                                stderr_file=sys.stderr if log_output else None)
        except PapermillExecutionError as exc:
            err = ReproduceError(
                f"notebook {nb} failed in cell {exc.cell_index} (execution count {exc.exec_count}; cells counted "
                f"from 0 in the executed notebook, which includes papermill's injected-parameters cell): "
                f"{exc.ename}: {exc.evalue}\n  executed notebook with the traceback: {out_nb}\n"
                f"  finished notebooks and cached steps are kept; rerun the same command to resume",
                nb, exc.cell_index, out_nb)
        except Exception as exc:  # kernel death, missing kernel, bad parameters …
            err = ReproduceError(f"notebook {nb} failed before or between cells: {type(exc).__name__}: {exc}\n"
                                 f"  partial notebook (if any): {out_nb}", nb, None, out_nb)
        else:
            err = None
            outs = _outputs(run_dir, nb)
            if f"{nb}.csv" not in outs:
                err = ReproduceError(f"notebook {nb} finished but wrote no {run_dir / (nb + '.csv')}; every notebook "
                                     "must write its rows with pe_kit.results.write_rows", nb, None, out_nb)
        dt = time.perf_counter() - t0
        if err is not None:
            echo(f"{head}: FAILED after {dt:.0f} s\n  {err}")
            statuses.append(NotebookStatus(nb, "failed", dt, str(err)))
            failures.append(err)
            if not keep_going:
                break
            continue
        info = {"notebook": nb, "key": key, "params": params, "outputs": outs, "seconds": dt,
                "finished": _dt.datetime.now().isoformat(timespec="seconds")}
        _write(marker, json.dumps(info, indent=1, default=str).encode())
        echo(f"{head}: done in {dt:.0f} s ({len(outs)} files)")
        statuses.append(NotebookStatus(nb, "ran", dt))
    # every notebook of this run folder that finished (now or before), in run order
    others = sorted(p.stem for p in (run_dir / ".done").glob("*.json") if p.stem not in NOTEBOOKS)
    df = collect(run_dir, [nb for nb in (*NOTEBOOKS, *others) if (run_dir / ".done" / f"{nb}.json").is_file()])
    results_csv = results_md = None
    total = time.perf_counter() - t_run
    if not df.empty:
        results_csv = run_dir / "results.csv"
        _write(results_csv, df.to_csv(index=False).encode())
        figures = sorted(str(f.relative_to(run_dir)) for f in (run_dir / "figures").glob("*.png"))
        meta = {"preset": p.name, "about this preset": p.description, "seed": seed,
                "data": p.data or "bundled Blogs sample (pe_kit/data_files/blogs-900.jsonl.gz)",
                "notebooks": ", ".join(f"{s.notebook} ({s.status}, {s.seconds:.0f} s)" for s in statuses),
                "total notebook time": f"{sum(s.seconds for s in statuses):.0f} s",
                "this invocation": f"{total:.0f} s", "rows": len(df)}
        if failures:
            meta["FAILED"] = "; ".join(f"{f.notebook} (cell {f.cell_index})" for f in failures)
        results_md = run_dir / "results.md"
        _write(results_md, summary_markdown(df, meta, figures).encode())
        echo(f"results: {results_csv} ({len(df)} rows), {results_md}")
    _write(run_dir / "run.json", json.dumps(
        {"preset": p.as_dict(), "seed": seed, "statuses": [asdict(s) for s in statuses], "seconds": total,
         "finished": _dt.datetime.now().isoformat(timespec="seconds")}, indent=1, default=str).encode())
    return RunSummary(run_dir, statuses, results_csv, results_md, total, failures)
