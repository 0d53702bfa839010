"""The one settings tree of a reproduction: study / mechanism / audit sections and one section per notebook.

Every setting is declared once, as a field of its section (``pe_kit.config.setting``: default, type and range,
one line of doc). From those declarations come the presets (``pe_kit.run.presets.PRESETS``, instances of
:class:`Preset`), the ``--set`` keys (:func:`locate`), the notebooks' parameters (:func:`notebook_keys`,
:func:`view`) and the notebooks' parameters cells (:func:`parameters_cell`; ``tests/test_settings.py`` checks
each notebook against it).

Paths: ``study.<field>``, ``mechanism.<field>``, ``audit.<field>``, ``<notebook>.<field>`` (``06.rounds``,
``06_multiround_mauve.rounds``). A field name unique in the tree is its own short name (``n_test``,
``noise_multiplier``, ``llr_trials``). ``<notebook>.<shared field>`` (``06.bank_size=512``) sets a study,
mechanism or audit value for that notebook only. The mechanism every notebook audits is the ``mechanism``
section (σ, q, k, C; ε_theory is for add/remove of one user under Poisson sampling at rate q) with δ and the
trials of the ``audit`` section; notebook 06 keeps the paper's Fig. 2 σ = 1.1088 and notebook 07 the suite's
δ = 1e-3 as their own values unless ``--set mechanism.noise_multiplier=…`` / ``--set audit.delta=…`` (or the short
names) name another value for every notebook.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from pe_kit.config import (ARMS, COUNT, AuditSettings, MechanismSettings, ParamSpec, Section, WorldSettings,
                           check_param, setting)
from pe_kit.study.implementation_audit import SUITE_DELTA

__all__ = ["StudySettings", "MechanismSettings", "AuditSettings", "RunnerSettings", "NotebookSection", "LLRChecks",
           "Ablations", "MultiRound", "ImplementationAudit", "OneRun", "Preset", "SECTIONS", "NOTEBOOKS",
           "NOTEBOOK_SECTIONS", "NOTEBOOK_READS", "RUNNER_KEYS", "MECHANISM_KEYS", "notebook_keys", "notebook_stem",
           "locate", "parameters_cell", "audited_mechanism", "did_you_mean"]


def did_you_mean(word: str, choices) -> str:
    """``"; did you mean 'trials'?"`` for the closest of ``choices`` (an iterable of str) to ``word``
    (``difflib.get_close_matches``, cutoff 0.6), or ``""`` when none is close."""
    from pe_kit.config import closest

    close = closest(word, sorted(str(c) for c in choices))
    return f"; did you mean {close!r}?" if close else ""


@dataclass(frozen=True)
class StudySettings(WorldSettings):
    """The study section: the world's data, splits, bank and encoder (``pe_kit.config.WorldSettings``, as in
    ``pe_kit.study.world.StudyConfig``), plus the grid and design sizes of the notebooks.

    Attributes (besides ``WorldSettings``'): arms / banks (notebook 04's grid), variants (``"all"`` or names),
    per_variant (canaries audited per variant), pool_size (M, candidate pool of the paraphrase and nonce variants),
    paraphraser (None = ``pe_kit.study.world.DEFAULT_PARAPHRASER``).
    """

    arms: tuple = setting(("long", "short"), ParamSpec("str", many=True, choices=ARMS), "notebook 04's data arms")
    banks: tuple = setting(("bankA", "public"), ParamSpec("str", many=True), "notebook 04's banks")
    variants: Any = setting("all", ParamSpec("str", many=True, word="all"), "'all' or a list of variant names")
    per_variant: int = setting(5, COUNT, "canaries audited per variant")
    pool_size: int = setting(512, COUNT, "M: candidate pool of the paraphrase and nonce variants")
    paraphraser: str | None = setting(None, ParamSpec("str", optional=True, choices=("smollm2", "auto", "wordnet")),
                                      "paraphrase pools: None (default route), auto, smollm2 or wordnet")


@dataclass(frozen=True)
class RunnerSettings(Section):
    """Parameters the runner sets (``--results-dir``, ``--preset``, ``--seed``), never ``--set``."""

    output_dir: str | None = setting(None, ParamSpec("str", optional=True),
                                     "None: results/interactive at the repository root")
    preset: str = setting("quick", ParamSpec("str"), "tiny, quick or paper (pe_kit.run.presets.PRESETS)")


@dataclass(frozen=True)
class NotebookSection(Section):
    """A notebook's own settings. ``shared``: study / mechanism / audit values for this notebook only
    (``{"bank_size": 512}``), each checked against its own declaration."""

    shared: Mapping = field(default_factory=dict)


@dataclass(frozen=True)
class LLRChecks(NotebookSection):
    """Notebook 03: trials per check and the σ grid of the 1/σ ceiling check (Eq. 20)."""

    llr_trials: int = setting(1_000_000, COUNT, "trials per hypothesis of each check")
    ceiling_sigmas: tuple = setting((0.5, 1.0, 2.0), ParamSpec("float", lo=0, lo_open=True, many=True),
                                    "σ grid of the ceiling check")


@dataclass(frozen=True)
class Ablations(NotebookSection):
    """Notebook 05: the Fig. 1 sweeps (the other mechanism values fixed at the mechanism section's), the Table 3
    encoder ablation and the tightness study."""

    sweep_arm: str = setting("short", ParamSpec("str", choices=ARMS), "data arm of the sweeps")
    sweep_variants: tuple = setting(("ordinary", "exact", "paraphrase-mu_eff", "nonce"),
                                    ParamSpec("str", many=True), "variants of the sweeps")
    sigmas: tuple = setting((0.5, 0.75, 1.0, 1.25, 1.5, 2.0), ParamSpec("float", lo=0, lo_open=True, many=True),
                            "σ grid (q fixed)")
    qs: tuple = setting((0.01, 0.02, 0.05, 0.1, 0.2, 0.5), ParamSpec("float", lo=0, hi=1, lo_open=True, many=True),
                        "q grid (σ fixed)")
    sweep_trials: int = setting(5_000_000, COUNT, "trials per hypothesis of the sweeps")
    encoders: Any = setting("auto", ParamSpec("str", many=True, word="auto"), "'auto' or model names / paths")
    encoder_variants: tuple = setting(("ordinary", "exact", "nonce"), ParamSpec("str", many=True),
                                      "variants of the encoder ablation")
    encoder_per_variant: int = setting(5, COUNT, "canaries per variant of the encoder ablation")
    tightness_variant: str = setting("nonce", ParamSpec("str"), "variant of the tightness study")
    tightness_trials: tuple = setting((1_000, 10_000, 100_000, 1_000_000, 10_000_000),
                                      ParamSpec("int", lo=1, many=True), "trial budgets of the tightness study")


@dataclass(frozen=True)
class MultiRound(NotebookSection):
    """Notebook 06 (Fig. 2): multi-round PE, its composed audit and MAUVE. Its own σ is the paper's 1.1088."""

    shared: Mapping = field(default_factory=lambda: {"noise_multiplier": 1.1088})
    rounds: int = setting(6, COUNT, "T: PE rounds")
    retain_fraction: float = setting(0.05, ParamSpec("float", lo=0, hi=1, lo_open=True, hi_open=True),
                                     "share of the population kept each round")
    variant: str = setting("nonce", ParamSpec("str"), "audited canary: nonce or ordinary")
    generator: str = setting("public-retrieval", ParamSpec("str", choices=("public-retrieval", "smollm2", "openai",
                                                                            "wordnet")), "variation generator")
    max_attempts: int = setting(5, COUNT, "generator calls per round to fill the g new texts")
    openai_base_url: str | None = setting(None, ParamSpec("str", optional=True), "server URL of the openai generator")
    openai_model: str | None = setting(None, ParamSpec("str", optional=True), "model of the openai generator")
    public_max_texts: int | None = setting(None, ParamSpec("int", lo=1, optional=True),
                                           "retrieval pool cap; None: ceil(3 · rounds · g)")
    pe_seeds: tuple = setting((0, 1, 2), ParamSpec("int", lo=0, many=True), "PE seeds (≥ 2 for an interval)")
    control: bool = setting(True, ParamSpec("bool"), "run the random-retention control (σ → ∞)")
    adaptive: bool = setting(True, ParamSpec("bool"), "run the adaptive audit")
    adaptive_trials: int | None = setting(None, ParamSpec("int", lo=1, optional=True),
                                          "trials of the adaptive audit; None: trials")
    mauve_seeds: tuple = setting((0, 1, 2), ParamSpec("int", lo=0, many=True), "k-means seeds of MAUVE")
    mauve_samples: int | None = setting(2000, ParamSpec("int", lo=2, optional=True), "per-side MAUVE subsample")
    reference_split: str = setting("calibration", ParamSpec("str", choices=("aux", "calibration", "test")),
                                   "MAUVE's reference split")
    checkpoint_dir: str | None = setting(None, ParamSpec("str", optional=True), "per-round checkpoints; None: the pe_kit cache")


@dataclass(frozen=True)
class ImplementationAudit(NotebookSection):
    """Notebook 07: black-box audits of the reference implementation and the seeded mutants; its own δ is the
    suite's ``pe_kit.study.implementation_audit.SUITE_DELTA`` (1e-3) unless ``--set delta=…`` names another."""

    shared: Mapping = field(default_factory=lambda: {"delta": SUITE_DELTA})
    suite_trials: int = setting(100_000, COUNT, "trials per hypothesis per split of the suite")
    ladder: tuple = setting((1_000, 3_000, 10_000, 30_000, 100_000), ParamSpec("int", lo=1, many=True),
                            "trial budgets of the 'trials needed' ladder")
    repeats: int = setting(20, COUNT, "re-audits of the reference and the non-violating mutants")
    repeat_trials: int = setting(20_000, COUNT, "trials of each re-audit")


@dataclass(frozen=True)
class OneRun(NotebookSection):
    """Notebook 08: one-run audits; None = ``pe_kit.study.one_run.DEFAULTS`` (one_run_qs: 1 and the mechanism's q)."""

    one_run_qs: tuple | None = setting(None, ParamSpec("float", lo=0, hi=1, lo_open=True, many=True, optional=True),
                                       "sampling rates q of the grid")
    probe_shares: tuple | None = setting(None, ParamSpec("float", lo=0, hi=1, lo_open=True, many=True,
                                                         optional=True), "probe budgets (shares of p)")
    one_run_variants: tuple | None = setting(None, ParamSpec("str", many=True, optional=True,
                                                             choices=("nonce", "natural")), "variants")
    copies: int | None = setting(None, ParamSpec("int", lo=1, optional=True), "copies per record; None: top_k")
    idealised_ms: tuple | None = setting(None, ParamSpec("int", lo=1, many=True, optional=True),
                                         "canaries m of the idealised game")
    idealised_repeats: int | None = setting(None, ParamSpec("int", lo=1, optional=True), "seeds per size")
    published_repeats: int | None = setting(None, ParamSpec("int", lo=2, optional=True),
                                            "Monte-Carlo games per σ of the published-value check")
    published_sigmas: tuple | None = setting(None, ParamSpec("float", many=True, optional=True,
                                                             choices=(0.5, 1.0, 2.0, 4.0)),
                                             "rows of Mahloujifar et al.'s Table 1")


#: The shared sections of the tree, by path prefix.
SECTIONS: dict[str, type] = {"study": StudySettings, "mechanism": MechanismSettings, "audit": AuditSettings}
#: Notebook stems, in run order, and each one's own section.
NOTEBOOK_SECTIONS: dict[str, type] = {
    "01_mechanism": NotebookSection, "02_probe_design": NotebookSection, "03_llr_checks": LLRChecks,
    "04_audit": NotebookSection, "05_ablations": Ablations, "06_multiround_mauve": MultiRound,
    "07_audit_an_implementation": ImplementationAudit, "08_one_run_audit": OneRun}
NOTEBOOKS = tuple(NOTEBOOK_SECTIONS)
RUNNER_KEYS = ("output_dir", "preset", "seed")

_WORLD = ("data", "fmt", "on_error", "model", "max_seq_length", "record_cap", "n_canary", "per_variant", "n_aux",
          "n_calibration", "n_test", "bank_size", "max_probes", "pool_size")
_MECH = tuple(MechanismSettings.specs())
_AUDIT = tuple(AuditSettings.specs())
#: The settings that name the audited mechanism: ``--set`` of one applies to every notebook (``get_preset``).
MECHANISM_KEYS = _MECH + ("delta", "alpha")
#: The shared (study / mechanism / audit) settings each notebook reads; its own section's fields come on top.
NOTEBOOK_READS: dict[str, tuple] = {
    "01_mechanism": _WORLD + ("arm", "bank") + _MECH + _AUDIT,
    "02_probe_design": _WORLD + ("arm", "bank", "variants", "paraphraser") + _MECH + _AUDIT,
    "03_llr_checks": _WORLD + ("arm", "bank") + _MECH + _AUDIT,
    "04_audit": _WORLD + ("arms", "banks", "variants", "paraphraser") + _MECH + _AUDIT,
    "05_ablations": _WORLD + ("arm", "bank", "paraphraser") + _MECH + _AUDIT,
    "06_multiround_mauve": tuple(k for k in _WORLD if k not in ("per_variant", "pool_size")) + ("arm", "bank")
    + _MECH + _AUDIT,
    "07_audit_an_implementation": _MECH + ("alpha", "delta"),
    "08_one_run_audit": _WORLD + ("arm", "bank") + _MECH + _AUDIT,
}


def _own(stem: str) -> dict:
    return NOTEBOOK_SECTIONS[stem].specs()


def _shared_specs() -> dict:
    out: dict = {}
    for sec, cls in SECTIONS.items():
        for k, spec in cls.specs().items():
            out[k] = (sec, spec)
    return out


_SHARED = _shared_specs()
#: short name → (section or notebook stem, field); a field name that two sections declare has no short name.
SHORT: dict[str, tuple] = {k: (sec, k) for k, (sec, _) in _SHARED.items() if k != "seed"}
for _stem in NOTEBOOKS:
    for _k in _own(_stem):
        assert _k not in SHORT, f"setting {_k!r} is declared twice (in {SHORT.get(_k)} and {_stem})"
        SHORT[_k] = (_stem, _k)


def notebook_stem(nb: str) -> str:
    """``"06"`` or ``"06_multiround_mauve"`` → ``"06_multiround_mauve"``.

    Raises:
        ValueError: for an unknown notebook, listing the notebooks (with a did-you-mean).
    """
    matches = [n for n in NOTEBOOKS if n == nb or n.split("_")[0] == nb]
    if not matches:
        raise ValueError(f"use <notebook>.<parameter> with a notebook of {', '.join(NOTEBOOKS)} "
                         f"(or its number, e.g. 06.rounds=3){did_you_mean(nb, NOTEBOOKS)}")
    return matches[0]


def notebook_keys(stem: str) -> tuple:
    """The parameters notebook ``stem`` takes: the runner's, the shared ones it reads, its own section's."""
    own = tuple(k for k in _own(stem))
    return RUNNER_KEYS + NOTEBOOK_READS[stem] + own


def _spec(name: str) -> ParamSpec:
    if name in ("output_dir", "preset"):
        return RunnerSettings.specs()[name]
    if name in _SHARED:
        return _SHARED[name][1]
    return NOTEBOOK_SECTIONS[SHORT[name][0]].specs()[name]


def _describe(names) -> str:
    return ", ".join(f"{k} ({_spec(k).describe()})" for k in names)


def locate(key: str) -> tuple[str, str, str]:
    """Where ``--set key=…`` points in the tree.

    Args:
        key: a short name (``n_test``), ``<section>.<field>`` (``mechanism.noise_multiplier``) or
            ``<notebook>.<field>`` (``06.rounds``, ``06_multiround_mauve.bank_size``).

    Returns:
        (section: ``study`` / ``mechanism`` / ``audit`` or a notebook stem, field, canonical key): the canonical
        key is the short name for a short name or a ``<section>.<field>``, else ``<stem>.<field>``.

    Raises:
        ValueError: an unknown section, notebook or field (the message lists the section's settings with their
            ranges, or a notebook's parameters, with a did-you-mean), or a runner-owned key.
    """
    key = key.strip()
    if "." not in key:
        if key in RUNNER_KEYS:
            raise ValueError(f"{key} is set by the runner; use --{'results-dir' if key == 'output_dir' else key}")
        if key not in SHORT:
            valid = sorted(SHORT)
            raise ValueError(f"unknown setting{did_you_mean(key, valid)}; valid keys: {', '.join(valid)} "
                             "(or <section>.<field>: study, mechanism, audit; or <notebook>.<parameter>)")
        sec, name = SHORT[key]
        return sec, name, key
    head, name = key.split(".", 1)
    if head in SECTIONS:
        specs = SECTIONS[head].specs()
        if name not in specs or name == "seed":
            raise ValueError(f"the {head} section has no setting {name!r}"
                             f"{did_you_mean(name, specs)}; its settings: {_describe(k for k in specs if k != 'seed')}")
        return head, name, name
    stem = notebook_stem(head)
    if name in RUNNER_KEYS:
        raise ValueError(f"{name} is set by the runner; use --{'results-dir' if name == 'output_dir' else name} "
                         "instead")
    takes = [k for k in notebook_keys(stem) if k not in RUNNER_KEYS]
    if name not in takes:
        raise ValueError(f"notebook {stem} has no parameter {name!r}{did_you_mean(name, takes)}; "
                         f"its parameters are: {', '.join(sorted(takes))}")
    return stem, name, f"{stem}.{name}"


def _default_notebooks() -> dict:
    return {stem: cls() for stem, cls in NOTEBOOK_SECTIONS.items()}


def _plain(v):
    return list(v) if isinstance(v, tuple) else v


@dataclass(frozen=True)
class Preset:
    """The settings tree of one reproduction: name, description and its sections (every value can be changed
    with ``--set <path>=<value>``, :func:`locate`).

    Attributes:
        name, description: what the preset is for and how it differs from the paper (written into results.md).
        study: :class:`StudySettings`. mechanism: ``MechanismSettings`` (σ, q, k, C). audit: ``AuditSettings``
            (trials, α, δ, shrinkage, ridge). notebooks: stem → that notebook's section (:data:`NOTEBOOK_SECTIONS`).

    A short name reads the value (``p.n_test``, ``p.noise_multiplier``, ``p.llr_trials``); :meth:`view` gives the
    values one notebook sees. Build changed copies with :meth:`with_values`.
    """

    name: str
    description: str = ""
    study: StudySettings = field(default_factory=StudySettings)
    mechanism: MechanismSettings = field(default_factory=MechanismSettings)
    audit: AuditSettings = field(default_factory=AuditSettings)
    notebooks: Mapping = field(default_factory=_default_notebooks)

    def __getattr__(self, name: str):
        if name.startswith("__") or name not in SHORT:
            raise AttributeError(name)
        sec, f = SHORT[name]
        obj = object.__getattribute__(self, sec) if sec in SECTIONS else object.__getattribute__(self, "notebooks")[sec]
        return getattr(obj, f)

    def section(self, sec: str) -> Section:
        """The section ``study`` / ``mechanism`` / ``audit`` or a notebook stem's."""
        return getattr(self, sec) if sec in SECTIONS else self.notebooks[sec]

    def with_values(self, values: Mapping[str, Any]) -> "Preset":
        """A copy with ``values`` set (keys as in :func:`locate`); each value checked against its declaration.

        Raises:
            ValueError: an unknown key (see :func:`locate`) or a value of the wrong type or range, naming the key,
                the value and the accepted values.
        """
        changes: dict[str, dict] = {}
        shared: dict[str, dict] = {}
        for key, value in values.items():
            sec, name, canon = locate(key)
            v = check_param(canon if "." not in key else key, value, _spec(name))
            v = tuple(v) if isinstance(v, list) else v
            if sec not in SECTIONS and name not in _own(sec):
                shared.setdefault(sec, {})[name] = v
            else:
                changes.setdefault(sec, {})[name] = v
        kw: dict[str, Any] = {s: replace(getattr(self, s), **c) for s, c in changes.items() if s in SECTIONS}
        nbs = dict(self.notebooks)
        for stem in set(changes) - set(SECTIONS) | set(shared):
            sec = nbs[stem]
            own = changes.get(stem, {})
            if stem in shared:
                own = {**own, "shared": {**sec.shared, **shared[stem]}}
            nbs[stem] = replace(sec, **own)
        if nbs != dict(self.notebooks):
            kw["notebooks"] = nbs
        return replace(self, **kw) if kw else self

    def without_shared(self, names) -> "Preset":
        """A copy in which no notebook keeps its own value of the shared settings ``names``."""
        nbs = {stem: replace(sec, shared={k: v for k, v in sec.shared.items() if k not in names})
               for stem, sec in self.notebooks.items()}
        return replace(self, notebooks=nbs)

    def shared_values(self) -> dict:
        """Every shared setting (study, mechanism, audit) by short name (tuples as lists)."""
        return {k: _plain(getattr(self.section(sec), k)) for k, (sec, _) in _SHARED.items()}

    def view(self, stem: str | None = None) -> dict:
        """The values notebook ``stem`` sees (None: no notebook's own values): every short name, the shared
        sections overlaid with the notebook's ``shared`` values (tuples as lists)."""
        out = self.shared_values()
        for nb, sec in self.notebooks.items():
            out.update({k: _plain(getattr(sec, k)) for k in _own(nb)})
        if stem is not None:
            out.update({k: _plain(v) for k, v in self.notebooks[stem].shared.items()})
        return out

    @property
    def extra(self) -> dict:
        """stem → that notebook's values that differ from its section's defaults (own fields and ``shared``)."""
        out = {}
        for stem, sec in self.notebooks.items():
            base = NOTEBOOK_SECTIONS[stem]()
            d = {k: _plain(getattr(sec, k)) for k in _own(stem) if getattr(sec, k) != getattr(base, k)}
            d.update({k: _plain(v) for k, v in sec.shared.items() if base.shared.get(k) != v})
            if d:
                out[stem] = d
        return out

    def paths(self) -> dict:
        """Every value by canonical key (short name, or ``<stem>.<field>``; notebooks' ``shared`` included)."""
        out = self.shared_values()
        for stem, sec in self.notebooks.items():
            out.update({f"{stem}.{k}": _plain(getattr(sec, k)) for k in _own(stem)})
            out.update({f"{stem}.{k}": _plain(v) for k, v in sec.shared.items()})
        return out

    def as_dict(self) -> dict:
        """Plain flat dict: name, description, :meth:`view` (no notebook) and ``extra``."""
        return {"name": self.name, "description": self.description, **self.view(), "extra": self.extra}


def audited_mechanism(p: Preset) -> str:
    """The results.md line that says which mechanism the run audited: σ, q, k, C, m, δ, α and its ε_theory
    (``pe_kit.audit.accounting.epsilon_theory``: Opacus PRV accountant, add/remove of one user under Poisson
    sampling at rate q, one release), plus each notebook's own mechanism values (notebook 06: σ = 1.1088).

    Args: p: the run's preset. Returns: str.
    """
    from pe_kit.audit.accounting import epsilon_theory

    v = p.view()
    eps = epsilon_theory(v["noise_multiplier"], v["sample_rate"], v["delta"])
    line = (f"σ (noise_multiplier)={v['noise_multiplier']:g}, q (sample_rate)={v['sample_rate']:g}, "
            f"k (top_k)={v['top_k']}, C (clip_norm)={v['clip_norm']:g}, m (record_cap)={v['record_cap']}, "
            f"δ={v['delta']:g}, α={v['alpha']:g}: ε_theory={eps:.3f} for one release (Opacus PRV accountant; "
            "add/remove of one user under Poisson sampling at rate q); every CSV row carries these as param_* "
            "columns, and the mechanism it audited as mech_* columns (the sweeps vary σ or q)")
    mech = ("noise_multiplier", "sample_rate", "top_k", "clip_norm", "delta", "alpha")
    for stem, sec in p.notebooks.items():
        own = {k: x for k, x in sec.shared.items() if k in mech}
        if own:
            line += f"; notebook {stem.split('_')[0]}: " + ", ".join(f"{k}={x:g}" for k, x in own.items())
    return line


def _doc(name: str) -> str:
    from dataclasses import fields as _fields

    for cls in (*SECTIONS.values(), RunnerSettings, *NOTEBOOK_SECTIONS.values()):
        for f in _fields(cls):
            if f.name == name and f.metadata.get("doc"):
                return f.metadata["doc"]
    return ""


def parameters_cell(stem: str) -> str:
    """The source of notebook ``stem``'s ``parameters`` cell, generated from the declarations: the runner's keys,
    then one ``name = None`` line per setting it takes (None: the preset's value), with its doc and accepted values
    (no ``=`` in a comment: papermill's parameter parser would skip the line).

    Returns:
        str (no trailing newline), e.g. ``noise_multiplier = None  # σ: noise std is σ·C: a number ≥ 0``.
    """
    lines = ["# Parameters: papermill injects values after this cell; None takes the preset's value.",
             "# Each setting is declared once, in pe_kit.run.settings (type, range, meaning; --set <name>=…).",
             'output_dir = None  # None: results/interactive at the repository root', 'preset = "quick"  # tiny, quick '
             'or paper', "seed = 0"]
    groups = [("study", [k for k in NOTEBOOK_READS[stem] if _SHARED.get(k, ("",))[0] == "study"]),
              ("mechanism", [k for k in NOTEBOOK_READS[stem] if k in _MECH]),
              ("audit", [k for k in NOTEBOOK_READS[stem] if k in _AUDIT]),
              (f"notebook {stem.split('_')[0]}", list(_own(stem)))]
    for title, names in groups:
        if names:
            lines.append(f"# {title}")
            lines += [f"{k} = None  # {_doc(k)}: {_spec(k).describe()}" for k in names]
    return "\n".join(lines)

