"""Tidy result rows (one per arm × bank × variant × canary × setting, with provenance), the step-level resume
cache, the notebooks' ``<output_dir>/<notebook>.csv`` files, and ``results.md`` rendered from their union.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from pe_kit.cache import atomic_write_bytes, content_hash, read_verified, write_verified
from pe_kit.code_hash import versions
from pe_kit.report.tables import (IDEALISED_TITLE, ONE_RUN_TITLE, PUBLISHED_TITLE, SHIFT_ROWS_SHOWN, _fmt,
                                  add_epsilon_interval, dropped_note, epsilon_interval, idealised_table, markdown_table,
                                  one_run_table, pool_generator_note, population_shift_table, published_table,
                                  spread_cells, table_epsilon, table_epsilon_spread, truncation_table)

__all__ = ["StepCache", "short_cells", "tidy", "write_rows", "collect", "markdown_table", "epsilon_interval",
           "add_epsilon_interval", "LLR_RULES", "table_epsilon", "table_epsilon_spread", "spread_cells", "dropped_note",
           "pool_generator_note", "population_shift_table", "summary_markdown", "truncation_table", "RUN_COLUMNS"]

#: What makes an LLR-check row (``steps.checks.llr_checks``, column ``rule``) pass, in words.
LLR_RULES = {"close": "abs(observed − expected) ≤ tolerance", "at_most": "at most: observed ≤ tolerance",
             "at_least": "at least: observed ≥ tolerance"}

#: Columns every row of ``results.csv`` carries (added by ``tidy`` / ``collect``).
RUN_COLUMNS = ("notebook", "experiment", "preset", "seed", "version_pe_kit")


class StepCache:
    """A folder (e.g. ``<output_dir>/.steps``) of finished work items, one verified JSON file (``pe_kit.cache``) each,
    keyed by the content hash of their inputs, so an interrupted run resumes; a corrupt entry is recomputed."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.hits = 0
        self.misses = 0

    def path(self, *key_parts: Any) -> Path:
        """File of the item keyed by ``key_parts`` (any JSON-able values)."""
        return self.folder / f"{content_hash(*key_parts)[:32]}.json"

    def get_or_compute(self, key_parts: Sequence[Any], compute: Callable[[], Any]) -> Any:
        """The stored result for ``key_parts``, or ``compute()`` (JSON-able) stored."""
        path = self.path(*key_parts)
        stored = read_verified(path)
        if stored is not None:
            try:
                result = json.loads(stored)["result"]
                self.hits += 1
                return result
            except (ValueError, KeyError):
                pass
        self.misses += 1
        result = compute()
        write_verified(path, json.dumps({"key": _jsonable(list(key_parts)), "result": _jsonable(result)},
                                        allow_nan=True).encode())
        return result


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.number, np.bool_)):
        return x.item()
    return str(x) if isinstance(x, Path) else x


def tidy(rows: Iterable[Mapping[str, Any]], notebook: str, experiment: str | None = None,
         params: Mapping[str, Any] | None = None) -> list[dict]:
    """Rows stamped with their provenance (``RUN_COLUMNS``, ``param_*`` with lists as JSON, versions, the encoder's
    device and backend; a row's own keys win except ``notebook``) and :func:`add_attack_ceiling`."""
    from pe_kit.text.encoder import encoder_runtime

    params = params or {}
    vers = {**versions(), **encoder_runtime()}
    stamp = {f"param_{k}": json.dumps(_jsonable(v)) if isinstance(v, (list, tuple, dict)) else v
             for k, v in params.items() if k != "output_dir"}
    out = []
    for row in rows:
        r = {"notebook": notebook, "experiment": experiment, "preset": params.get("preset"), "seed": params.get("seed"),
             **vers, **stamp}
        r.update({k: _jsonable(v) for k, v in row.items()})
        r["notebook"] = notebook
        if r.get("experiment") is None:
            r["experiment"] = experiment
        add_attack_ceiling(r)
        out.append(r)
    return out


def _first(row: Mapping[str, Any], keys: Sequence[str]):
    for k in keys:
        v = row.get(k)
        if isinstance(v, (int, float)) and math.isfinite(float(v)):
            return float(v)
    return None


def add_attack_ceiling(row: dict) -> dict:
    """Add ``epsilon_ceiling`` (``audit.accounting.epsilon_ceiling_rounded``) and ``tightness`` = ε_lower / ceiling
    to an audit row in place, when it has finite ``epsilon_lower`` and ``mu_eff``, q, δ and no ceiling yet."""
    from pe_kit.audit.accounting import epsilon_ceiling_rounded, tightness

    if row.get("epsilon_ceiling") is not None:
        return row
    eps, mu = _first(row, ("epsilon_lower",)), _first(row, ("mu_eff",))
    q, delta = _first(row, ("mech_sample_rate", "sample_rate")), _first(row, ("audit_delta", "delta"))
    if eps is None or mu is None or q is None or delta is None or not (0 < q <= 1 and 0 < delta < 1) or mu < 0:
        return row
    ceiling = epsilon_ceiling_rounded(mu, q, delta)
    row["epsilon_ceiling"], row["tightness"] = ceiling, tightness(eps, ceiling)
    return row


def write_rows(rows: Sequence[Mapping[str, Any]], output_dir: str | Path, notebook: str) -> Path:
    """Write rows to ``<output_dir>/<notebook>.csv`` atomically; ValueError if ``rows`` is empty."""
    if not rows:
        raise ValueError(f"notebook {notebook!r} produced no result rows; check its parameters (variants, sizes)")
    path = Path(output_dir) / f"{notebook}.csv"
    atomic_write_bytes(path, pd.DataFrame(list(rows)).to_csv(index=False).encode())
    os.chmod(path, 0o644)
    return path


def collect(run_dir: str | Path, notebooks: Sequence[str]) -> pd.DataFrame:
    """The given notebooks' ``<run_dir>/<nb>.csv`` concatenated, ``RUN_COLUMNS`` first; empty if none."""
    frames = []
    for nb in notebooks:
        path = Path(run_dir) / f"{nb}.csv"
        if path.is_file() and path.stat().st_size > 0:
            df = pd.read_csv(path)
            if "notebook" not in df.columns:
                df.insert(0, "notebook", nb)
            frames.append(df)
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True, sort=False)
    first = [c for c in RUN_COLUMNS if c in df.columns]
    return df[first + [c for c in df.columns if c not in first]]


def _section(title: str, body: str) -> str:
    return f"\n## {title}\n\n{body}"


def _answer(df: pd.DataFrame | None) -> str:
    """results.md's opening: :mod:`.paper_compare`'s table; ``""`` without notebook 04's rows."""
    from pe_kit.report.paper_compare import comparison_markdown, comparison_table

    if df is None or df.empty or "experiment" not in df.columns:
        return ""
    table = comparison_table(df[df["experiment"] == "table2"])
    if table.empty:
        return ""
    return ("\n## The answer: ε_lower per variant beside the paper's Table 2 and Table 4\n\n"
            "ε_lower is the audit's 95 %-confidence lower bound on the release's ε (Eq. 28), ε_theory the accountant's "
            "ε; the paper reports the max over five canaries, the median and range show how far single canaries "
            "differ. The long arm stands in for the paper's Yelp, the short arm for Sentiment140; the paper's bank B "
            "is `bankB`, and the public bank (the kit's own third bank) is set beside the paper's bank-B values as the "
            "nearest it has. The per-canary detail follows below.\n\n" + comparison_markdown(table))


def summary_markdown(df: pd.DataFrame, meta: Mapping[str, Any] | None = None, figures: Sequence[str] = ()) -> str:
    """Render ``results.md``: ε_lower beside the paper's Tables 2 / 4, the run settings (``meta``), the truncation
    counts, one section per experiment (:data:`_SECTIONS`, others as a compact table) and the ``figures`` listed."""
    from pe_kit.audit.accounting import NEIGHBOURING_RELATION

    out = ["# pe_kit reproduction results\n", _answer(df),
           f"\nε_theory is the accountant's user-level guarantee (Opacus PRV) under the neighbouring relation: "
           f"{NEIGHBOURING_RELATION} (docs/your_mechanism.md); ε_lower bounds ε for the same relation from below.\n"]
    if meta:
        out.append("\n## Settings of this run\n\n| setting | value |\n|---|---|\n")
        out += [f"| {k} | {_fmt(v, '.3g') if isinstance(v, float) else str(v).replace('|', '/')} |\n"
                for k, v in meta.items()]
    if df is None or df.empty:
        return "".join(out) + "\n(no result rows)\n"
    trunc = truncation_table(df)
    if not trunc.empty:
        out.append(_section("Texts cut by the encoder (longer than its token cap, embedded truncated)",
                            markdown_table(trunc)))
    exp = df.get("experiment", pd.Series([None] * len(df))).fillna("other")
    for names, render in _SECTIONS:
        part = df[exp.isin(names)]
        if not part.empty:
            out.append(render(part))
    for name in sorted(set(exp) - {n for names, _ in _SECTIONS for n in names}):
        part = df[exp == name].dropna(axis=1, how="all")
        skip = ("param_", "version_", "python", "study_", "mech_", "audit_", "calibration_", "test_", "pe_")
        keep = [c for c in part.columns if not c.startswith(skip) and c not in RUN_COLUMNS[:4]
                and part[c].astype(str).nunique() > 1][:10]
        out.append(_section(f"{name} ({', '.join(sorted(set(part['notebook'].astype(str))))})",
                            markdown_table(part[keep])))
    if figures:
        out.append(_section("Figures", "".join(f"- [{f}]({f})\n" for f in figures)))
    return "".join(out)


def _table(title: str, cols: Sequence[str] | None = None, floatfmt: str = ".3f", filled: bool = False,
           by: Sequence[str] | None = None, prep: Callable[[pd.DataFrame], pd.DataFrame] | None = None):
    """A results.md section of one experiment's rows: ``prep(rows)``, its ``cols`` that exist (all for None; with
    ``filled`` only those holding a value), sorted by ``by``."""
    def render(part: pd.DataFrame) -> str:
        part = prep(part) if prep else part
        part = part[[c for c in (cols or part.columns) if c in part.columns and (not filled or part[c].notna().any())]]
        return _section(title, markdown_table(part.sort_values(list(by)) if by else part, floatfmt))
    return render


def _table2_sections(t2: pd.DataFrame) -> str:
    """Notebook 04's sections: ε_lower per variant with its spread, the audit detail per cell, the population shift."""
    tab = table_epsilon_spread(t2)
    out = [_section("ε_lower by variant (Table 2 / Table 4 analogue): max / median (min–max) over canaries",
                    "The paper reports the max over five canaries; the median and range show how much single "
                    "canaries of one variant differ." + (f" {dropped_note(tab)}" if dropped_note(tab) else "")
                    + (f" {pool_generator_note(t2)}" if pool_generator_note(t2) else "")
                    + "\n\n" + markdown_table(tab, index=True))]
    spec = dict(canaries=("epsilon_lower", "size"), epsilon_lower_max=("epsilon_lower", "max"),
                epsilon_lower_median=("epsilon_lower", "median"), epsilon_lower_min=("epsilon_lower", "min"),
                mu_eff_median=("mu_eff", "median"), mu_eff_min=("mu_eff", "min"), mu_eff_max=("mu_eff", "max"),
                mu_eff_ceiling=("mu_eff_ceiling", "max"), trials=("trials", "max"))
    if "population_shift" in t2.columns:
        spec["population_shift"] = ("population_shift", lambda s: int(pd.Series(s).astype(bool).sum()))
    cell = ["study_arm", "bank_source", "variant"]
    agg = t2.groupby(cell, sort=False).agg(**spec).reset_index()
    if "epsilon_ceiling" in t2.columns:  # the attack ceiling of the best canary, and how close the audit came
        best = t2.loc[t2.groupby(cell, sort=False)["epsilon_lower"].idxmax()]
        for c in ("epsilon_ceiling", "tightness", "epsilon_theory"):
            agg[c] = best[c].to_numpy()
    out.append(_section("Audit detail (per arm, bank and variant; ceiling and tightness of the best canary)",
                        "`population_shift`: canaries whose test-split FPR interval at the frozen threshold is "
                        "disjoint from the calibration split's (two-sided Clopper–Pearson; per canary in the "
                        "next section).\n\n" + markdown_table(agg)))
    shift = population_shift_table(t2)
    n, k = shift.attrs["checked"], shift.attrs["flagged"]
    if n:
        shown = shift if n <= SHIFT_ROWS_SHOWN else shift[shift["population_shift"]]
        out.append(_section(
            "Population shift per canary: FPR at the frozen threshold, calibration vs test split",
            "Each canary's threshold is frozen on the calibration split's trials; its false-positive rate is then "
            "measured on the test split's. Both rates get a two-sided Clopper–Pearson interval (γ each side, "
            "`pe_kit.audit.bounds.population_shift`); a canary is flagged when the intervals are disjoint (the "
            "test users see another FPR than the one the threshold was chosen on, so its ε_lower on test can "
            "collapse). The calibration FPR is read on the trials the threshold was chosen on, so it leans "
            "slightly low; a flag with test above calibration can come from that choice as well as from the "
            f"populations. **{k} of {n} canaries flagged.**"
            + ("" if n <= SHIFT_ROWS_SHOWN else f" The {k} flagged canaries are listed; every canary's rates and "
               "intervals are in results.csv (`fpr_calibration*`, `fpr_test*`).")
            + "\n\n" + (markdown_table(shown) if len(shown) else "")))
    return "".join(out)


def _encoder_section(enc: pd.DataFrame) -> str:
    """Notebook 05's encoder ablation (Table 3 analogue)."""
    from pe_kit.report.paper_compare import variant_order
    from pe_kit.text.models import encoder_ablation_note

    enc = enc[enc["epsilon_lower"].notna()]
    tab = spread_cells(enc.groupby(["variant", "study_model"])["epsilon_lower"]).unstack("study_model")
    tab = tab.reindex(variant_order(tab.index))
    tab.columns.name = None
    note = encoder_ablation_note(list(dict.fromkeys(enc["study_model"].astype(str))))
    return _section("Encoder ablation (Table 3 analogue): max / median (min–max) ε_lower over canaries",
                    "The paper reports the max over canaries; the median and range are shown beside it.\n\n"
                    + markdown_table(tab, index=True) + (f"\n**{note}**\n" if note else ""))


def _llr_rules(llr: pd.DataFrame) -> pd.DataFrame:
    """The LLR checks with their pass rule in words (:data:`LLR_RULES`)."""
    return llr.assign(rule=llr["rule"].map(lambda r: LLR_RULES.get(r, r))) if "rule" in llr.columns else llr


_SWEEP = ("variant", "{x}", "mu_eff", "epsilon_lower", "epsilon_ci_low", "epsilon_ci_high", "epsilon_theory", "trials")

#: results.md's sections after the truncation table, in order: (experiments, renderer of their rows).
_SECTIONS = (
    (("table2",), _table2_sections),
    (("probe_design",), _table("Probe design: μ_eff per variant (notebook 02)", (
        "variant", "canary_id", "mu_eff", "mu_eff_ceiling", "canary_norm", "clip_norm", "canary_votes_on_P", "n_coords",
        "background_voters"))),
    (("mechanism",), _table("One PE release on real data (notebook 01)", ("quantity", "value", "note"), ".4g")),
    (("llr_check",), _table("LLR derivation checks (notebook 03, App. E)", (
        "check", "variant", "expected", "observed", "abs_error", "rule", "tolerance", "passed"), ".4g",
        prep=_llr_rules)),
    *((((name,), _table(title, [c.format(x=x) for c in _SWEEP], by=("variant", x))) for name, x, title in (
        ("sigma_sweep", "mech_noise_multiplier", "σ sweep (Fig. 1 analogue)"),
        ("q_sweep", "mech_sample_rate", "q sweep (Fig. 1 analogue)")))),
    (("encoder",), _encoder_section),
    (("tightness",), _table("Tightness: ε_lower vs trials", (
        "variant", "trials", "epsilon_lower", "epsilon_expected", "mu_eff", "epsilon_theory", "source"))),
    (("implementation_audit",), _table("Black-box implementation audit: seeded bugs (notebook 07)", (
        "implementation", "design", "expected_violation", "violation", "epsilon_lower", "epsilon_ci_low",
        "epsilon_ci_high", "epsilon_theory", "epsilon_ceiling", "mu_eff", "trials", "trials_needed", "seconds"))),
    (("fig2_multiround",), _table(
        "Multi-round PE: MAUVE per round, DP run (arm dp) and random-retention control (arm control), per PE seed "
        "(Fig. 2 analogue, notebook 06)", ("variant", "arm", "pe_seed", "round", "releases", "participants",
                                           "mauve_mean", "mauve_sd", "mu_eff_composed", "epsilon_lower",
                                           "epsilon_theory", "trials"), filled=True)),
    (("fig2_multiround_gain",), _table(
        "Multi-round PE: MAUVE gain of the DP feedback (DP − control, interval over PE seeds)",
        ("round", "gain", "ci_low", "ci_high", "level", "n_seeds", "treated_mean", "control_mean", "significant"),
        filled=True)),
    (("fig2_multiround_audit",), _table(
        "Multi-round PE: ε after t releases, frozen-bank and adaptive audits (Eq. 36)",
        ("releases", "epsilon_theory", "epsilon_lower_frozen", "epsilon_lower_adaptive", "frac_retention_changed",
         "frac_bank_changed", "n_banks", "trials", "adaptive_trials"), filled=True)),
    (("one_run_published",), _table(PUBLISHED_TITLE, prep=published_table)),
    (("one_run", "multi_trial"), _table(ONE_RUN_TITLE, prep=one_run_table)),
    (("one_run_idealised",), _table(IDEALISED_TITLE, prep=idealised_table)),
)


def short_cells(csv_path: Path, per_variant: int) -> list[str]:
    """Lines naming the Table 2 cells that audited fewer than ``per_variant`` canaries (a design skipped)."""
    cols = ("experiment", "study_arm", "study_bank", "variant", "canary_id")
    try:
        df = pd.read_csv(csv_path, low_memory=False, usecols=lambda c: c in cols)
    except (OSError, ValueError):
        return []
    if not set(cols) <= set(df.columns):
        return []
    t2 = df[df["experiment"] == "table2"]
    counts = t2.groupby(["study_arm", "study_bank", "variant"], sort=False)["canary_id"].nunique()
    return [f"{arm}/{bank} {variant}: {n} of {per_variant} canaries audited (the others were skipped: see the "
            "executed notebook's warnings)" for (arm, bank, variant), n in counts.items() if n < per_variant]
