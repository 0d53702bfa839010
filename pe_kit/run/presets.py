"""Presets of the reproduction (``tiny`` / ``quick`` / ``paper``), ``--set`` overrides and each notebook's papermill
parameters. A preset is a ``pe_kit.settings.Preset``; :func:`preset` builds one from short names.

Sizes: paper §3 and App. D (N = 1000, 500 aux, calibration = N, p = 8192, r = 64, m = 64, 5 canaries per
variant, 10⁶ trials per hypothesis; 5·10⁶ for Fig. 1).
"""
from __future__ import annotations

__all__ = ["PRESETS", "NEEDS_DATA", "NOTEBOOK_KEYS", "get_preset", "resolve_params", "notebook_setup",
           "notebook_params", "notebook_output_dir", "preset", "audited_mechanism"]

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from pe_kit.settings import (MECHANISM_KEYS, NOTEBOOKS, AuditConfig, MechanismConfig, Preset, check_param, locate,
                             notebook_keys)

_REPO = Path(__file__).resolve().parents[2]


def preset(name: str, description: str, notebooks: Mapping[str, Mapping] | None = None, **values: Any) -> Preset:
    """A :class:`Preset` named ``name``: the tree's defaults with ``values`` (short names, e.g. ``n_test=290``)
    and ``notebooks`` (notebook number → its own values, e.g. ``{"06": {"rounds": 3}}``) set."""
    nb = {f"{k}.{p}": v for k, vals in (notebooks or {}).items() for p, v in vals.items()}
    return Preset(name, description).with_values({**values, **nb})


PRESETS: dict[str, Preset] = {
    "tiny": preset(
        "tiny",
        ("CI sizes on real data (tests/data/blogs-tiny.jsonl.gz, 80 bloggers × 16 posts), MiniLM-L6 at 32 "
                     "tokens, 2·10⁴ trials: checks that everything runs; its numbers are not meant to be read "
                     "(docs/presets.md)."),
        data=str(_REPO / "tests" / "data" / "blogs-tiny.jsonl.gz"), record_cap=16, n_canary=5, per_variant=2,
        n_aux=15, n_calibration=20, n_test=20, bank_size=256, max_probes=16, pool_size=64, max_seq_length=32,
        trials=20_000,
        llr_trials=20_000, sweep_arm="short", sweep_variants=("ordinary", "nonce"), sigmas=(0.5, 1.0, 2.0),
        qs=(0.05, 0.1, 0.3), sweep_trials=20_000, encoders=("all-MiniLM-L6-v2",), encoder_per_variant=1,
        tightness_trials=(1_000, 5_000, 20_000),
        notebooks={"06": {"rounds": 3, "pe_seeds": [0, 1], "mauve_seeds": [0, 1], "mauve_samples": 500},
                   "07": {"suite_trials": 20_000, "ladder": [1_000, 3_000, 10_000, 30_000],
                          "repeats": 2, "repeat_trials": 5_000},
                   "08": {"probe_shares": [0.5, 1.0], "idealised_ms": [100, 1000], "idealised_repeats": 2,
                                    "published_repeats": 10, "published_sigmas": [1.0, 2.0]}}),
    "quick": preset(
        "quick",
        ("The main job: the paper's protocol (m=64, p=8192, r=64, M=512, 5 canaries per variant) on the "
                     "bundled Blogs sample, reduced where the data or the clock forces it: N=290 test and 290 "
                     "calibration users, 150 aux users, MiniLM-L6 cut at 64 tokens, 2·10⁵ trials (why each, and "
                     "what it does to μ_eff: docs/presets.md)."),
        record_cap=64, n_canary=25, per_variant=5, n_aux=150, n_calibration=290, n_test=290, bank_size=8192,
        max_probes=64, pool_size=512, max_seq_length=64, trials=200_000, llr_trials=200_000,
        sigmas=(0.5, 0.75, 1.0, 1.5, 2.0), qs=(0.02, 0.05, 0.1, 0.2, 0.4), sweep_trials=200_000,
        encoder_per_variant=5, tightness_trials=(1_000, 10_000, 100_000, 1_000_000),
        notebooks={"06": {"bank_size": 512, "pe_seeds": [0, 1, 2]},
                   "08": {"idealised_ms": [100, 1000], "idealised_repeats": 3, "published_repeats": 20}}),
    "paper": preset(
        "paper",
        ("The paper's sizes (§3, App. D: m=64, 500 aux, N=1000 test users; 1000 calibration users, the paper 500; "
                     "p=8192, r=64, 10⁶ trials, 5·10⁶ for the sweeps), MiniLM-L6 at its own 256-token cap, on a "
                     "corpus you pass with --data; hours on 2 CPU cores (what differs from the paper: "
                     "docs/presets.md)."),
        n_canary=25,
        notebooks={"06": {"bank_size": 512, "trials": 5_000_000},
                   "08": {"idealised_ms": [1000, 10_000], "idealised_repeats": 10}},
    ),
}

#: The parameters each notebook takes (runner keys, the shared settings it reads, its own section's fields),
#: derived from the declarations in ``pe_kit.settings``.
NOTEBOOK_KEYS: dict[str, tuple] = {stem: notebook_keys(stem) for stem in NOTEBOOKS}


#: Presets without bundled data: ``data=None`` is refused and ``--data PATH`` is required.
NEEDS_DATA = ("paper",)


def get_preset(name: str | Preset, overrides: Mapping[str, Any] | None = None, data: str | None = None,
               fmt: str | None = None) -> Preset:
    """A preset by name (or a ``Preset``) with ``data``/``fmt`` and ``overrides`` (``--set`` keys) applied and checked.
    Yelp / Sentiment140 data sets the arms to long / short and the banks to public. An override of a
    ``MECHANISM_KEYS`` setting replaces every notebook's own value unless ``<notebook>.<key>`` is given too.

    Raises ValueError for an unknown preset or key, a bad value, a world ``StudyConfig`` refuses, or the paper
    preset without ``data``; IsADirectoryError / FileNotFoundError for a ``data`` that is a folder or no file."""
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
    if fmt is not None and fmt != "auto":
        changes["fmt"] = fmt
    from pe_kit.data.loaders import check_path, guess_format

    if data is not None:
        changes["data"] = str(Path(data).expanduser().resolve())
        arm = {"yelp": "long", "sentiment140": "short"}.get(changes.get("fmt") or guess_format(data))
        if arm is not None:
            changes.update(arms=(arm,), arm=arm, sweep_arm=arm, banks=("public",), bank="public")
    # the audited mechanism (σ, q, k, C, δ, α) given without a notebook replaces every notebook's own value
    named = {name for sec, name, canon in map(locate, overrides) if canon == name and name in MECHANISM_KEYS}
    p = p.without_shared(named)
    from pe_kit.study.world import StudyConfig

    try:  # every notebook's world obeys StudyConfig's rules (calibration and test of one size N, r ≤ p) before any runs
        p = p.with_values({**changes, **overrides})
        for stem in (None, *NOTEBOOKS):
            StudyConfig.from_params(p.view(stem))
    except ValueError as exc:
        raise ValueError(f"{exc} (preset {p.name})") from None
    if p.name in NEEDS_DATA and p.data is None:
        raise ValueError(f"the {p.name} preset needs the full corpus: pass --data PATH (Yelp reviews JSON, "
                         "Sentiment140 CSV, or a Blog-corpus JSON Lines file with --format blogs; scripts/paper_run.sh "
                         "sets N per arm)")
    if p.data is not None:
        check_path(p.data, "--data")
    return p


def audited_mechanism(p: Preset) -> str:
    """The results.md line naming the audited σ, q, k, C, m, δ, α, ε_theory and each notebook's own values."""
    from pe_kit.audit.accounting import epsilon_theory

    v = p.view()
    eps = epsilon_theory(v["noise_multiplier"], v["sample_rate"], v["delta"])
    line = (f"σ (noise_multiplier)={v['noise_multiplier']:g}, q (sample_rate)={v['sample_rate']:g}, "
            f"k (top_k)={v['top_k']}, C (clip_norm)={v['clip_norm']:g}, m (record_cap)={v['record_cap']}, "
            f"δ={v['delta']:g}, α={v['alpha']:g}: ε_theory={eps:.3f} for one release (Opacus PRV accountant; "
            "add/remove of one user under Poisson sampling at rate q); every CSV row carries these as param_* "
            "columns, and the mechanism it audited as mech_* columns (the sweeps vary σ or q)")
    for stem, sec in p.notebooks.items():
        own = {k: x for k, x in sec.shared.items() if k in MECHANISM_KEYS}
        if own:
            line += f"; notebook {stem.split('_')[0]}: " + ", ".join(f"{k}={x:g}" for k, x in own.items())
    return line


def notebook_output_dir(output_dir: str | os.PathLike | None = None, start: str | os.PathLike | None = None) -> str:
    """The folder a notebook writes to, created if missing (OSError if it cannot be): ``output_dir``, or for None
    ``results/interactive`` in the checkout at or above ``start`` (else under ``start``)."""
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
    """The parameter dict a notebook works with: the preset's values for ``NOTEBOOK_KEYS[notebook]`` (unknown stems:
    notebook 01's), replaced by the ``given`` values that are not None, each checked by ``check_param`` (ValueError).
    ``output_dir`` defaults to :func:`notebook_output_dir`, ``seed`` to 0."""
    p = preset if isinstance(preset, Preset) else get_preset(preset, data=given.get("data"), fmt=given.get("fmt"))
    stem = notebook if notebook in NOTEBOOKS else None
    base = {**p.view(stem), "preset": p.name, "seed": 0}
    out = {k: base.get(k) for k in NOTEBOOK_KEYS[stem or "01_mechanism"]}
    # keys outside the table (e.g. a notebook's own extras) pass through
    out.update({k: check_param(k, v) for k, v in given.items() if v is not None})
    if out["output_dir"] is None:
        out["output_dir"] = notebook_output_dir()
    notebook_output_dir(out["output_dir"])
    return out


def notebook_setup(notebook: str, namespace: Mapping[str, Any], n_canaries: int | None = None) -> tuple:
    """``(params, mechanism, audit)`` of a notebook from its parameters cell's ``namespace`` (its ``globals()``): the
    cell's values over the preset's (:func:`resolve_params`), its ``MechanismConfig`` and ``AuditConfig``
    (γ = α / (4·n_canaries), App. E.6; ``n_canaries`` None: ``per_variant``, else 1), each value checked once.
    Raises ValueError naming the field, the value and the accepted values."""
    keys = NOTEBOOK_KEYS.get(notebook, NOTEBOOK_KEYS["01_mechanism"])
    configs = {**MechanismConfig.specs(), **AuditConfig.specs()}
    given = {k: namespace.get(k) for k in keys if k != "preset"}
    params = resolve_params(notebook, namespace["preset"], **{k: v for k, v in given.items() if k not in configs})
    params.update({k: v for k, v in given.items() if k in configs and v is not None})
    n = (params.get("per_variant") or 1) if n_canaries is None else n_canaries
    mechanism, audit = MechanismConfig.from_params(params), AuditConfig.from_params(params, n_canaries=n)
    params.update({k: getattr(c, k) for c in (mechanism, audit) for k in c.specs() if k in params})
    return params, mechanism, audit


def notebook_params(notebook: str, preset: Preset, output_dir: Path, seed: int,
                    declared: Sequence[str] | None = None) -> dict:
    """Papermill parameters of one notebook: its ``NOTEBOOK_KEYS`` as ``Preset.view`` gives them, plus ``output_dir`` /
    ``seed``, restricted to ``declared`` when given (every declared value outside the tree); JSON-able (tuples → lists).
    """
    base = {**preset.view(notebook if notebook in NOTEBOOKS else None), "preset": preset.name,
            "output_dir": str(output_dir), "seed": int(seed)}
    keys = NOTEBOOK_KEYS.get(notebook, () if declared is None else tuple(base))  # outside the tree: what it declares
    out = {k: base[k] for k in keys if k in base and (declared is None or k in declared or k == "output_dir")}
    out.setdefault("output_dir", str(output_dir))
    return out
