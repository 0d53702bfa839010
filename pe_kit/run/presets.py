"""Presets and parameters of the reproduction: the ``tiny`` / ``quick`` / ``paper`` sizes, ``--set`` overrides,
and each notebook's papermill parameters.

Source of the sizes: paper §3 and App. D (N = 1000, 500 aux, calibration = N, p = 8192, r = 64, m = 64,
5 canaries per variant, 10⁶ trials per hypothesis; 5·10⁶ for Fig. 1).
"""
from __future__ import annotations

__all__ = ["Preset", "PRESETS", "NOTEBOOKS", "NOTEBOOK_KEYS", "get_preset", "resolve_params", "notebook_params",
           "notebook_output_dir", "text_progress", "parse_override", "did_you_mean"]

import json
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from pe_kit.audit.trials import check_equal_populations
from pe_kit.config import check_param

#: Notebook stems, in run order. 06 (multi-round) and 07 (black-box implementation audits) run only if their
#: files exist; like 06, 07 takes its own parameters from ``Preset.extra`` (defaults in its parameters cell).
NOTEBOOKS = ("01_mechanism", "02_probe_design", "03_llr_checks", "04_audit", "05_ablations", "06_multiround_mauve",
             "07_audit_an_implementation", "08_one_run_audit")

_REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Preset:
    """Sizes and settings of one reproduction (every field can be overridden with ``--set key=value``).

    Data and study: ``data`` (None = the bundled 900-blogger sample), ``fmt`` (``auto|blogs|yelp|sentiment140``),
    ``arms`` / ``banks`` (notebook 04's grid; ``bankA`` = bundled label-only bank, ``public`` = records of
    users in no split, or a JSON Lines path), ``arm`` / ``bank`` (the single world of notebooks 01–03 and 05),
    ``record_cap`` (m), ``n_canary`` (canary split size), ``per_variant`` (canaries audited per variant),
    ``n_aux``, ``n_calibration``, ``n_test`` (N), ``bank_size`` (p), ``max_probes`` (r), ``pool_size`` (M,
    candidate pool of the paraphrase and nonce variants), ``paraphraser`` (how the paraphrase variants' pools are
    made: ``auto`` = the shipped SmolLM2 pool, WordNet where none matches; ``smollm2`` = SmolLM2 rewrites, shipped
    or generated; ``wordnet`` = synonym swaps; None = ``pe_kit.study.world.DEFAULT_PARAPHRASER``), ``model``,
    ``max_seq_length`` (token cap of the encoder; None = model default), ``variants`` (``"all"`` or names),
    ``on_error`` (``raise``: a malformed line of the data file stops the run, naming file and line; ``skip``:
    such lines are counted in the corpus report and dropped).

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
    n_calibration: int = 1000
    n_test: int = 1000
    bank_size: int = 8192
    max_probes: int = 64
    pool_size: int = 512
    paraphraser: str | None = None
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
    on_error: str = "raise"
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        """Plain dict (tuples as lists)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        name="tiny",
        description=("CI sizes on real data (tests/data/blogs-tiny.jsonl.gz, 80 bloggers × 16 posts), MiniLM-L6 at 32 "
                     "tokens, 2·10⁴ trials: checks that everything runs; its numbers are not meant to be read "
                     "(docs/presets.md)."),
        data=str(_REPO / "tests" / "data" / "blogs-tiny.jsonl.gz"), record_cap=16, n_canary=5, per_variant=2,
        n_aux=15, n_calibration=20, n_test=20, bank_size=256, max_probes=16, pool_size=64, max_seq_length=32,
        trials=20_000,
        llr_trials=20_000, sweep_arm="short", sweep_variants=("ordinary", "nonce"), sigmas=(0.5, 1.0, 2.0),
        qs=(0.05, 0.1, 0.3), sweep_trials=20_000, encoders=("all-MiniLM-L6-v2",), encoder_per_variant=1,
        tightness_trials=(1_000, 5_000, 20_000),
        extra={"06_multiround_mauve": {"rounds": 3, "pe_seeds": [0, 1], "mauve_seeds": [0, 1], "mauve_samples": 500},
               "07_audit_an_implementation": {"suite_trials": 20_000, "ladder": [1_000, 3_000, 10_000, 30_000],
                                              "repeats": 2, "repeat_trials": 5_000},
               "08_one_run_audit": {"probe_shares": [0.5, 1.0], "idealised_ms": [100, 1000], "idealised_repeats": 2,
                                    "published_repeats": 10, "published_sigmas": [1.0, 2.0]}}),
    "quick": Preset(
        name="quick",
        description=("The main job: the paper's protocol (m=64, p=8192, r=64, M=512, 5 canaries per variant) on the "
                     "bundled Blogs sample, reduced where the data or the clock forces it: N=290 test and 290 "
                     "calibration users, 150 aux users, MiniLM-L6 cut at 64 tokens, 2·10⁵ trials (why each, and "
                     "what it does to μ_eff: docs/presets.md)."),
        record_cap=64, n_canary=25, per_variant=5, n_aux=150, n_calibration=290, n_test=290, bank_size=8192,
        max_probes=64, pool_size=512, max_seq_length=64, trials=200_000, llr_trials=200_000,
        sigmas=(0.5, 0.75, 1.0, 1.5, 2.0), qs=(0.02, 0.05, 0.1, 0.2, 0.4), sweep_trials=200_000,
        encoder_per_variant=5, tightness_trials=(1_000, 10_000, 100_000, 1_000_000),
        extra={"06_multiround_mauve": {"bank_size": 512, "pe_seeds": [0, 1, 2]},
               "08_one_run_audit": {"idealised_ms": [100, 1000], "idealised_repeats": 3, "published_repeats": 20}}),
    "paper": Preset(
        name="paper",
        description=("The paper's sizes (§3, App. D: m=64, 500 aux, N=1000 test and 1000 calibration users, "
                     "p=8192, r=64, 10⁶ trials, 5·10⁶ for the sweeps), MiniLM-L6 at its own 256-token cap, on a "
                     "corpus you pass with --data; hours on 2 CPU cores (what differs from the paper: "
                     "docs/presets.md)."),
        n_canary=25,
        extra={"06_multiround_mauve": {"bank_size": 512, "trials": 5_000_000},
               "08_one_run_audit": {"idealised_ms": [1000, 10_000], "idealised_repeats": 10}},
    ),
}

_COMMON = ("output_dir", "preset", "seed", "data", "fmt", "model", "max_seq_length", "record_cap", "n_canary",
           "per_variant", "n_aux", "n_calibration", "n_test", "bank_size", "max_probes", "pool_size", "trials", "on_error")

#: The parameters each notebook declares in its ``parameters`` cell (besides the common ones).
NOTEBOOK_KEYS: dict[str, tuple] = {
    "01_mechanism": _COMMON + ("arm", "bank"),
    "02_probe_design": _COMMON + ("arm", "bank", "variants", "paraphraser"),
    "03_llr_checks": _COMMON + ("arm", "bank", "llr_trials", "ceiling_sigmas"),
    "04_audit": _COMMON + ("arms", "banks", "variants", "paraphraser"),
    "05_ablations": _COMMON + ("arm", "bank", "paraphraser", "sweep_arm", "sweep_variants", "sigmas", "qs",
                               "sweep_trials", "encoders", "encoder_variants", "encoder_per_variant",
                               "tightness_variant", "tightness_trials"),
    # notebook 08's own keys live in ``Preset.extra["08_one_run_audit"]`` (None = ``pe_kit.study.one_run.DEFAULTS``)
    "08_one_run_audit": _COMMON + ("arm", "bank", "one_run_qs", "probe_shares", "one_run_variants", "copies",
                                   "idealised_ms", "idealised_repeats", "published_repeats", "published_sigmas"),
}


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``key=value`` (value as JSON if it parses, else a comma list for ``a,b``, else a string).

    ``key`` is a ``Preset`` field (``trials``, ``variants`` …) or ``<notebook>.<parameter>`` for one notebook's
    own parameter, e.g. ``06.generator=openai`` or ``06_multiround_mauve.rounds=3`` (stored in ``Preset.extra``;
    ``pe_kit.run.reproduce`` checks that the notebook declares it). The value is checked and normalised by
    ``pe_kit.config.check_param`` (``trials=1e6`` → 1000000; ``trials=true``, ``max_probes=1.5`` rejected).

    Raises:
        ValueError: if ``text`` has no ``=``, the key is not a ``Preset`` field, the notebook is unknown
            (the message lists the valid keys), or the value has the wrong type or range (the message names
            the field and the accepted values).
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
                             "(or its number, e.g. 06.rounds=3)" + (did_you_mean(nb, NOTEBOOKS) if not matches else ""))
        key = f"{matches[0]}.{param}"
    else:
        valid = {f.name for f in fields(Preset)} - {"name", "description", "extra"}
        if key not in valid:
            raise ValueError(f"--set {key}=…: unknown setting{did_you_mean(key, valid)}; valid keys: "
                             f"{', '.join(sorted(valid))} (or <notebook>.<parameter>)")
    raw = raw.strip()
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = [v.strip() for v in raw.split(",")] if "," in raw else raw
    if raw.lower() in ("none", "null"):
        value = None
    if isinstance(value, list):  # "a,1e6" → each part parsed as JSON when it parses
        value = [_json_or_str(v) for v in value]
    default = {f.name: f.default for f in fields(Preset)}.get(key)
    if isinstance(default, tuple) and value is not None and not isinstance(value, list):
        value = [value]  # a single value for a list setting (``--set banks=public``)
    try:
        value = check_param(key, value)
    except ValueError as exc:
        raise ValueError(f"--set {key}={raw}: {exc}") from None
    return key, _absolute_paths(key, value)


def did_you_mean(word: str, choices) -> str:
    """``"; did you mean 'trials'?"`` for the closest of ``choices`` (an iterable of str) to ``word``
    (``difflib.get_close_matches``, cutoff 0.6), or ``""`` when none is close."""
    import difflib

    close = difflib.get_close_matches(str(word), sorted(str(c) for c in choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _json_or_str(v: Any) -> Any:
    if not isinstance(v, str):
        return v
    try:
        return json.loads(v)
    except json.JSONDecodeError:
        return v


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


#: Presets without bundled data: ``data=None`` is refused and ``--data PATH`` is required.
NEEDS_DATA = ("paper",)


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
    overrides = dict(overrides or {})
    # --set data=… / --set fmt=… mean the same as --data / --format (own-data arms and banks included)
    if data is None and overrides.get("data") is not None:
        data = overrides.pop("data")
    if fmt is None and overrides.get("fmt") is not None:
        fmt = overrides.pop("fmt")
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
    for k, v in overrides.items():
        if "." in k:  # a notebook's own parameter
            nb, param = k.split(".", 1)
            extra.setdefault(nb, {})[param] = v
            changes["extra"] = extra
            continue
        if k not in valid or k in ("name", "extra"):
            raise ValueError(f"override {k!r} is not a preset field{did_you_mean(k, valid - {'name', 'extra'})}; "
                             f"valid: {', '.join(sorted(valid - {'name', 'extra'}))}")
        changes[k] = v
    p = replace(p, **changes)
    checked = {}
    for f in fields(Preset):  # one typed validation (pe_kit.config.check_param) for every field
        if f.name in ("name", "description", "extra"):
            continue
        try:
            v = check_param(f.name, getattr(p, f.name))
        except ValueError as exc:
            raise ValueError(f"{exc} (preset {p.name})") from None
        checked[f.name] = tuple(v) if isinstance(v, list) else v
    for nb, values in p.extra.items():
        for k, v in values.items():
            check_param(f"{nb}.{k}", v)
    p = replace(p, **checked)
    try:  # the same rule audit_canary and the sweeps enforce, checked before any notebook runs
        check_equal_populations(p.n_calibration, p.n_test)
    except ValueError as exc:
        raise ValueError(f"{exc} (preset {p.name})") from None
    if p.max_probes < 0 or p.max_probes > p.bank_size:
        raise ValueError(f"max_probes={p.max_probes} must lie in [0, bank_size={p.bank_size}]")
    if p.name in NEEDS_DATA and p.data is None:
        raise ValueError(f"the {p.name} preset needs the full corpus: pass --data PATH (Yelp reviews JSON, Sentiment140 "
                         "CSV, or a Blog-corpus JSON Lines file with --format blogs; scripts/paper_run.sh sets N per arm)")
    if p.data is not None and Path(p.data).is_dir():
        from pe_kit.data.loaders import folder_message

        raise ValueError(folder_message(p.data))
    if p.data is not None and not Path(p.data).is_file():
        raise ValueError(f"data={p.data!r} does not exist; pass an existing file with --data PATH")
    return p


def notebook_output_dir(output_dir: str | os.PathLike | None = None, start: str | os.PathLike | None = None) -> str:
    """The folder a notebook writes its rows and figures to; created if missing.

    ``pe-kit reproduce`` always passes ``output_dir`` (``results/<run-id>``). A notebook run by hand in JupyterLab
    leaves it None, and then writes to ``results/interactive`` in the same ``results/`` folder as the CLI: at the
    root of the pe_kit checkout that holds the working directory (JupyterLab starts kernels in the notebook's
    folder, ``notebooks/``), never inside the source tree's ``notebooks/``.

    Args:
        output_dir: an explicit folder (str or path; returned unchanged, as str), or None for the default.
        start: where to look for the checkout (default: the working directory). The root is the nearest folder at
            or above it holding ``pyproject.toml`` and ``pe_kit/__init__.py``; outside a checkout,
            ``<start>/results/interactive``.

    Returns:
        str path of the folder (absolute for the default).

    Raises:
        OSError: if the folder cannot be created.
    """
    if output_dir is not None:
        out = Path(output_dir)
    else:
        here = Path(start if start is not None else Path.cwd()).resolve()
        root = next((d for d in (here, *here.parents)
                     if (d / "pyproject.toml").is_file() and (d / "pe_kit" / "__init__.py").is_file()), here)
        out = root / "results" / "interactive"
    out.mkdir(parents=True, exist_ok=True)
    return str(out)


def resolve_params(notebook: str, preset: str | Preset = "quick", **given: Any) -> dict:
    """The parameter dict a notebook works with: the preset's values for its keys, replaced by ``given``
    values that are not None. Notebooks call this first, so they run interactively with only ``preset`` set.

    Args:
        notebook: stem (e.g. ``"04_audit"``); unknown stems get the common keys.
        preset: a name from ``PRESETS`` or a ``Preset``.
        given: the notebook's parameters (``output_dir``, ``seed``, sizes …); None means "from the preset".

    Returns:
        dict with every key of ``NOTEBOOK_KEYS[notebook]`` (``output_dir`` default ``results/interactive`` at the
        checkout's root, :func:`notebook_output_dir`; ``seed`` default 0), each checked by ``pe_kit.config.check_param`` (integral floats become ints,
        list fields lists).

    Raises:
        ValueError: a value of the wrong type or range (``trials=True``), naming the field and the accepted values.

    Side effect: when run by ``pe-kit reproduce`` (env ``PE_KIT_HEADLESS=1``) third-party progress bars are
    silenced (:func:`text_progress`); pe_kit's long steps report through ``pe_kit.progress``.
    """
    if os.environ.get("PE_KIT_HEADLESS") == "1":
        text_progress()
    p = preset if isinstance(preset, Preset) else get_preset(preset, data=given.get("data"), fmt=given.get("fmt"))
    keys = NOTEBOOK_KEYS.get(notebook, _COMMON)
    base = {**p.as_dict(), **dict(p.extra.get(notebook, {}))}
    out: dict[str, Any] = {}
    for k in keys:
        if given.get(k) is not None:
            out[k] = given[k]
        elif k == "preset":
            out[k] = p.name
        elif k == "output_dir":
            out[k] = notebook_output_dir()
        elif k == "seed":
            out[k] = 0
        else:
            out[k] = base.get(k)
    for k, v in given.items():  # keys outside the table (e.g. a notebook's own extras) pass through
        if k not in out and v is not None:
            out[k] = v
    out = {k: check_param(k, v) for k, v in out.items()}  # the same typed validation as --set and presets
    notebook_output_dir(out["output_dir"])
    return out


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


def text_progress() -> None:
    """Silence third-party ``tqdm.auto`` bars in this (headless) kernel.

    In a Jupyter kernel ``tqdm.auto`` draws ipywidgets, which a headless papermill run cannot show, and a
    text bar would fill the executed notebook with carriage returns and cursor codes. pe_kit's own long
    steps report through ``pe_kit.progress`` (plain lines, see there); other libraries' bars created after
    this call are disabled unless they pass ``disable=False`` (Hugging Face bars are also off through
    ``HF_HUB_DISABLE_PROGRESS_BARS``, set by ``pe_kit.run.reproduce``).
    """
    import tqdm.auto
    import tqdm.std

    class _QuietTqdm(tqdm.std.tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("disable", True)
            super().__init__(*args, **kwargs)

    tqdm.auto.tqdm = _QuietTqdm
