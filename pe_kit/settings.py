"""Every setting of the kit, declared once (one concept: the settings tree and its one check).

Each setting is a field of one frozen section class, declared with :func:`setting`: its default, its
:class:`ParamSpec` (type and range), one line of doc and, for the tree's shared sections, the notebooks that read
it. :func:`check_param` is the one check: sections run it on construction (``MechanismSettings(sample_rate=…)``),
``--set`` runs it in :func:`parse_override`, the notebooks' parameters in ``pe_kit.run.presets.resolve_params``, the
explorer (``pe_kit.report.widgets``) on its values and slider ranges (:func:`slider_range`). A bool is never a
number, a str never a number, an integral float (``1e6``) is fine for an integer field, a fractional one is not;
ranges are checked; a list field takes a single value as a one-element list.

Defaults are the paper's (§3, App. D): k=5, C=0.1, σ=1, q=0.1, δ=1e-5, m=64, α=0.05, five canaries.

The tree of a reproduction (:class:`Preset`): ``study`` (:class:`StudySettings`), ``mechanism``
(:class:`MechanismSettings`), ``audit`` (:class:`AuditSettings`) and one section per notebook
(:data:`NOTEBOOK_SECTIONS`). Paths: ``study.<field>``, ``mechanism.<field>``, ``audit.<field>``,
``<notebook>.<field>`` (``06.rounds``); a field name unique in the tree is its own short name (``n_test``,
``noise_multiplier``). ``<notebook>.<shared field>`` (``06.bank_size=512``) sets a shared value for that notebook
only; notebook 06 keeps the paper's Fig. 2 σ = 1.1088 and notebook 07 the black-box suite's δ = 1e-3 unless
``--set noise_multiplier=…`` / ``--set delta=…`` name another value for every notebook.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

__all__ = ["ParamSpec", "COUNT", "RECORD_CAP", "PARAM_TYPES", "Section", "setting", "record_cap_setting", "check_param",
           "closest", "did_you_mean", "slider_range", "ARMS", "FORMATS", "THRESHOLD_RULES",
           "WorldSettings", "MechanismSettings", "MechanismConfig", "AuditSettings", "AuditConfig", "StudySettings",
           "RunnerSettings", "NotebookSection", "LLRChecks", "Ablations", "MultiRound", "ImplementationAudit",
           "OneRun", "Preset", "SECTIONS", "NOTEBOOKS", "NOTEBOOK_SECTIONS", "NOTEBOOK_READS", "RUNNER_KEYS",
           "MECHANISM_KEYS", "SHORT", "notebook_keys", "notebook_stem", "locate", "parameters_cell", "parse_override"]


@dataclass(frozen=True)
class ParamSpec:
    """Type and range of one parameter.

    Attributes:
        kind: ``int`` | ``float`` | ``str`` | ``bool`` | ``dict``; with ``many=True`` a list of that kind.
        lo, hi: inclusive bounds (None = unbounded); lo_open / hi_open make them exclusive.
        optional: None is accepted (meaning "the default").
        choices: admissible values for ``str`` or numbers (also for list elements).
        word: a str accepted besides the typed value (``"all"`` variants, ``"auto"`` encoders).
    """

    kind: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    optional: bool = False
    many: bool = False
    choices: tuple = ()
    word: str | None = None

    def describe(self) -> str:
        """Human words for the accepted values, e.g. ``an integer ≥ 1`` or ``a list of numbers in (0, 1]``."""
        noun = {"int": "integer", "float": "number", "str": "text", "bool": "true/false", "dict": "mapping"}[self.kind]
        rng = ""
        if self.lo is not None and self.hi is not None:
            rng = f" in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
        elif self.lo is not None:
            rng = f" {'>' if self.lo_open else '≥'} {self.lo:g}"
        elif self.hi is not None:
            rng = f" {'<' if self.hi_open else '≤'} {self.hi:g}"
        if self.choices:
            rng = " (one of " + ", ".join(map(str, self.choices)) + ")"
        out = f"a list of {noun}s{rng}" if self.many else f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}{rng}"
        if self.word:
            out = f"'{self.word}' or " + out
        return out + (" or null" if self.optional else "")


#: A count (trials, releases, rounds, users …): an integer ≥ 1; an integral float (3.0, 1e6) is taken, 2.5 refused.
COUNT = ParamSpec("int", lo=1)
#: m, records kept per user: one declaration used by ``MechanismConfig`` and ``pe_kit.study.world.StudyConfig``.
RECORD_CAP = ParamSpec("int", lo=1)

_SECTIONS: list = []  # every Section subclass, in definition order (filled by Section.__init_subclass__)


def setting(default, spec: ParamSpec, doc: str = "", *, notebooks: str | None = None,
            slider: tuple[float, float] | None = None):
    """A dataclass field of a settings section: its default, its type and range (``spec``) and one line of doc.

    The one place a setting is declared: ``Section.__post_init__`` checks the value against ``spec``, ``--set``
    and the notebooks' ``resolve_params`` look the spec up by name (:data:`PARAM_TYPES`), and the notebooks'
    parameters cells are generated from the declarations (:func:`parameters_cell`).
    A list default is stored as a tuple (frozen sections stay hashable).

    Args:
        notebooks: the notebooks that read this shared field, e.g. ``"04"`` (None: every notebook that reads its
            section, ``Section.read_by``; ``""``: none, a runner key). slider: the explorer's default slider
            range (``pe_kit.report.widgets``; it widens to hold any value the spec accepts).
    """
    if isinstance(default, list):
        default = tuple(default)
    return field(default=default, metadata={"spec": spec, "doc": doc, "notebooks": notebooks, "slider": slider})


def record_cap_setting():
    """The ``record_cap`` field (m = 64, paper App. D), shared by the mechanism and the study configs."""
    return setting(64, RECORD_CAP, "m: records kept per user")


class Section:
    """Base of every frozen settings class: each field declared with :func:`setting` is checked on construction.

    Subclasses are dataclasses (``@dataclass(frozen=True)``); a field's value is normalised by
    :func:`check_param` against the field's own ``ParamSpec`` (an integral float becomes an int, a list a
    tuple). Every subclass registers itself, so :data:`PARAM_TYPES` knows its fields by name.

    Raises:
        ValueError: on construction, naming the field, the value and the accepted values.
    """

    #: the notebooks that read this section's fields (a field's ``notebooks`` overrides it)
    read_by = "01 02 03 04 05 06 07 08"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _SECTIONS.append(cls)

    def __post_init__(self) -> None:
        for f in fields(self):
            spec = f.metadata.get("spec")
            if spec is not None:
                v = check_param(f.name, getattr(self, f.name), spec)
                object.__setattr__(self, f.name, tuple(v) if isinstance(v, list) else v)

    @classmethod
    def specs(cls) -> dict:
        """``{field name: ParamSpec}`` of the declared fields (inherited ones included), in field order."""
        return {f.name: f.metadata["spec"] for f in fields(cls) if "spec" in f.metadata}

    @classmethod
    def readers(cls) -> dict:
        """``{field name: notebook numbers that read it}`` (``"04"``, ``"01 02 …"``; ``""`` for a runner key)."""
        return {f.name: cls.read_by if f.metadata["notebooks"] is None else f.metadata["notebooks"]
                for f in fields(cls) if "spec" in f.metadata}

    def as_dict(self) -> dict:
        """Plain dict of the declared fields (tuples as lists), for result rows."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in
                ((name, getattr(self, name)) for name in self.specs())}


class _ParamTypes(Mapping):
    """``name → ParamSpec`` of every field declared on a registered :class:`Section` (read-only, live).

    A name declared on two classes must carry the very same ``ParamSpec`` object (``record_cap``); otherwise the
    lookup raises ``RuntimeError`` (a setting declared twice)."""

    _fields: dict = {}  # name → its dataclass field (default, doc, slider)

    def _index(self) -> dict:
        from dataclasses import is_dataclass

        key = len(_SECTIONS)
        if getattr(self, "_key", None) != key:
            out: dict = {}
            for cls in _SECTIONS:
                if not is_dataclass(cls):
                    continue
                for f in fields(cls):
                    spec = f.metadata.get("spec")
                    if spec is None:
                        continue
                    if f.name in out and out[f.name] is not spec:
                        raise RuntimeError(f"setting {f.name!r} is declared twice with different types "
                                           f"({out[f.name].describe()} and {spec.describe()}); declare it once")
                    out[f.name] = spec
                    self._fields[f.name] = f
            self._cache, self._key = out, key
        return self._cache

    def __getitem__(self, name: str) -> ParamSpec:
        return self._index()[name]

    def __iter__(self):
        return iter(self._index())

    def __len__(self) -> int:
        return len(self._index())


#: The type of every setting, by name: a live view of the fields declared on the settings sections.
PARAM_TYPES: Mapping = _ParamTypes()


def _declared(name: str):
    """The dataclass field that declares ``name`` (None for a name no section declares)."""
    PARAM_TYPES.get(name)  # brings the index up to date
    return _ParamTypes._fields.get(name)


def _fix(name: str, spec: ParamSpec) -> str:
    """``": pass a float, e.g. 1e-05"``: the kind a numeric field takes, with its declared default as example."""
    f = _declared(name.split(".")[-1].split("[")[0])
    default = f.default if f is not None and PARAM_TYPES[f.name] is spec else None
    eg = f", e.g. {default!r}" if isinstance(default, (int, float)) and not isinstance(default, bool) else ""
    return f": pass {'an integer' if spec.kind == 'int' else 'a float'}{eg}"


def slider_range(name: str) -> tuple[float, float]:
    """The explorer's default slider range of setting ``name``, declared with it (``setting(slider=…)``)."""
    return _declared(name).metadata["slider"]


def _number(name: str, value, spec: ParamSpec):
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name}={value!r} is not {spec.describe()}"
                         + (" (true/false is not a number)" if isinstance(value, bool) else "") + _fix(name, spec))
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{name}={value!r} is not {spec.describe()} (must be finite)")
    def inside(v: float) -> bool:
        return not (spec.lo is not None and (v < spec.lo or (spec.lo_open and v == spec.lo))
                    or spec.hi is not None and (v > spec.hi or (spec.hi_open and v == spec.hi)))

    if spec.kind == "int":
        if x != int(x):
            near = [v for v in (math.floor(x), math.ceil(x)) if inside(v)] or [math.ceil(x)]
            raise ValueError(f"{name}={value!r} is not {spec.describe()} (no fractional part allowed: use "
                             f"{' or '.join(map(str, near))})")
        out: float | int = int(x)
    else:
        out = x
    if not inside(x):
        raise ValueError(f"{name}={value!r} is out of range: use {spec.describe()}")
    if spec.choices and out not in spec.choices:
        raise ValueError(f"{name}={value!r} is not accepted: use one of {', '.join(map(str, spec.choices))}")
    return out


def _one(name: str, value, spec: ParamSpec):
    if spec.kind in ("int", "float"):
        return _number(name, value, spec)
    if spec.kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{name}={value!r} is not true/false")
        return value
    if spec.kind == "dict":
        if not isinstance(value, dict):
            raise ValueError(f"{name}={value!r} is not a mapping")
        return value
    if isinstance(value, os.PathLike):  # a pathlib.Path for data, bank, model, output_dir …
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name}={value!r} is not {spec.describe()}")
    if spec.choices and value not in spec.choices:
        raise ValueError(f"{name}={value!r} is not accepted: use one of {', '.join(map(str, spec.choices))}")
    return value


def check_param(name: str, value, spec: ParamSpec | None = None):
    """Validate and normalise one parameter value against its type (``PARAM_TYPES[name]`` by default).

    Args:
        name: the parameter (its last dotted part is looked up, so ``06_multiround_mauve.rounds`` works).
        value: the value (JSON-like: int, float, str, bool, None, list/tuple, dict).
        spec: the type (default ``PARAM_TYPES``; a name without a type is returned unchanged).

    Returns:
        the normalised value: ``int`` for integer fields (``1e6`` → 1000000), ``float`` for number
        fields, a ``list`` for list fields (a single value becomes a one-element list), else the value.

    Raises:
        ValueError: naming the field, the value and the accepted values (``trials=True is not an integer
        ≥ 1 (true/false is not a number)``).
    """
    spec = spec or PARAM_TYPES.get(name.split(".")[-1])
    if spec is None:
        return value
    if value is None:
        if spec.optional:
            return None
        raise ValueError(f"{name}=null is not accepted: use {spec.describe()}")
    if spec.word is not None and value == spec.word:
        return value
    if isinstance(value, str) and not value.strip():  # ``--set paraphraser=`` (nothing after the =)
        raise ValueError(f"{name} is empty: use {spec.describe()}")
    if spec.many:
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        if not items:
            raise ValueError(f"{name}=[] is empty: use {spec.describe()}")
        return [_one(f"{name}[{i}]" if len(items) > 1 else name, v, spec) for i, v in enumerate(items)]
    if isinstance(value, (list, tuple)):
        raise ValueError(f"{name}={value!r} is a list: use {spec.describe()}")
    return _one(name, value, spec)


ARMS = ("long", "short")
FORMATS = ("auto", "blogs", "yelp", "sentiment140")


@dataclass(frozen=True)
class WorldSettings(Section):
    """The fields that fix a study's world: data, data arm, splits, bank and encoder (``pe_kit.study.world.StudyConfig``
    and the study section of the settings tree, :class:`StudySettings`, both take them from here).

    Attributes: see ``StudyConfig``. Raises: ValueError naming the field, the value and the accepted values.
    """

    read_by = "01 02 03 04 05 06 08"  # notebook 07 audits implementations, not a world

    data: str | None = setting(None, ParamSpec("str", optional=True), "corpus file; None: the bundled Blogs sample")
    fmt: str = setting("auto", ParamSpec("str", choices=FORMATS), "format of data")
    arm: str = setting("long", ParamSpec("str", choices=ARMS), "data arm of a single-world notebook",
                       notebooks="01 02 03 05 06 08")
    n_canary: int = setting(25, COUNT, "users in the canary split")
    n_aux: int = setting(500, COUNT, "aux users (Σ̂, Eq. 33)")
    n_calibration: int = setting(1000, COUNT, "calibration users (as many as n_test)")
    n_test: int = setting(1000, COUNT, "N: test users")
    bank: str = setting("bankA", ParamSpec("str"), "bank of a single-world notebook: bankA, bankB, public or a path",
                        notebooks="01 02 03 05 06 08")
    bank_size: int = setting(8192, COUNT, "p: bank entries")
    max_probes: int = setting(64, ParamSpec("int", lo=0), "r: probes of the paraphrase and nonce variants")
    model: str = setting("all-MiniLM-L6-v2", ParamSpec("str"), "encoder name or path")
    max_seq_length: int | None = setting(None, ParamSpec("int", lo=4, optional=True),
                                         "encoder token cap; None: the model's")
    record_cap: int = record_cap_setting()
    seed: int = setting(0, ParamSpec("int", lo=0), "seed of splits, designs and trials", notebooks="")  # --seed
    on_error: str = setting("raise", ParamSpec("str", choices=("raise", "skip")),
                            "malformed data lines: raise (naming file and line) or skip (count and drop)")

@dataclass(frozen=True)
class MechanismSettings(Section):
    """The mechanism section of the tree: one PE histogram release (Eq. 1, Alg. A.1 lines 8–20), k, C, σ, q.

    ε_theory (``pe_kit.audit.accounting.epsilon_theory``) is for add/remove of one user under Poisson sampling at
    rate q. Raises: ValueError naming the field, the value and the admissible range.
    """

    top_k: int = setting(5, COUNT, "k: votes per record")
    clip_norm: float = setting(0.1, ParamSpec("float", lo=0, lo_open=True), "C: L2 clip of a user's vote vector")
    noise_multiplier: float = setting(1.0, ParamSpec("float", lo=0), "σ: noise std is σ·C", slider=(0.3, 3.0))
    sample_rate: float = setting(0.1, ParamSpec("float", lo=0, hi=1, lo_open=True),
                                 "q: Poisson participation probability of a user", slider=(1e-3, 1.0))


@dataclass(frozen=True)
class MechanismConfig(MechanismSettings):
    """One PE histogram release as the mechanism code takes it: :class:`MechanismSettings` plus m (App. D); in the
    tree m is the study's ``record_cap`` (it also caps the loaded records)."""

    record_cap: int = record_cap_setting()

    @property
    def noise_std(self) -> float:
        """Standard deviation σ·C of each histogram coordinate's Gaussian noise."""
        return self.noise_multiplier * self.clip_norm


#: The threshold rules' names (``pe_kit.audit.threshold_rules.RULES`` holds the rules; this stage cannot import them).
THRESHOLD_RULES = ("gaussian_model", "argmax", "anchored_argmax")


@dataclass(frozen=True)
class AuditSettings(Section):
    """The audit section of the tree: statistics of every audit (§2.1 Steps 2–5, App. E.6–E.7); trials count
    calibration and test trials per hypothesis, each; the threshold rules are ``pe_kit.audit.threshold_rules.RULES``
    (docs/threshold_rules.md). Raises: ValueError naming the field, the value and the admissible range.
    """

    trials: int = setting(1_000_000, COUNT, "trials per hypothesis per split", notebooks="01 02 03 04 05 06 08",
                          slider=(1e3, 1e9))
    alpha: float = setting(0.05, ParamSpec("float", lo=0, hi=1, lo_open=True, hi_open=True),
                           "family-wise error over one variant's canaries")
    delta: float = setting(1e-5, ParamSpec("float", lo=0, hi=1, hi_open=True), "δ of the (ε, δ) statement")
    shrinkage: float = setting(0.1, ParamSpec("float", lo=0, hi=1), "diagonal shrinkage of Σ̂ (Eq. 33)",
                               notebooks="01 02 03 04 05 06 08")
    ridge: float = setting(1e-9, ParamSpec("float", lo=0), "ridge added to Σ̂ (Eq. 35)", notebooks="01 02 03 04 05 06 08")
    threshold_rule: str = setting("gaussian_model", ParamSpec("str", choices=THRESHOLD_RULES),
                                  "how calibration freezes the threshold (docs/threshold_rules.md)",
                                  notebooks="01 02 03 04 05 06 08")


@dataclass(frozen=True)
class AuditConfig(AuditSettings):
    """One audit's statistics as the audit code takes them: :class:`AuditSettings` plus the canaries per variant
    (γ = α / (4 · n_canaries), App. E.6); in the tree that count is the study's ``per_variant``."""

    n_canaries: int = setting(5, COUNT, "canaries per variant")

    @property
    def gamma(self) -> float:
        """Tail probability of each one-sided Clopper–Pearson bound: α / (n_canaries · 4) (App. E.6)."""
        return self.alpha / (self.n_canaries * 4)


def closest(word, choices) -> str | None:
    """The choice closest to ``word`` (``difflib.get_close_matches``, cutoff 0.6), or None:
    the one did-you-mean of the kit's errors."""
    import difflib

    return next(iter(difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)), None)


def did_you_mean(word: str, choices) -> str:
    """``"; did you mean 'trials'?"`` for the closest of ``choices`` (an iterable of str) to ``word``
    (``difflib.get_close_matches``, cutoff 0.6), or ``""`` when none is close."""
    close = closest(word, sorted(str(c) for c in choices))
    return f"; did you mean {close!r}?" if close else ""


@dataclass(frozen=True)
class StudySettings(WorldSettings):
    """The study section: the world's data, splits, bank and encoder (:class:`WorldSettings`, as in
    ``pe_kit.study.world.StudyConfig``), plus the grid and design sizes of the notebooks.

    Attributes (besides ``WorldSettings``'): arms / banks (notebook 04's grid), variants (``"all"`` or names),
    per_variant (canaries audited per variant), pool_size (M, candidate pool of the paraphrase and nonce variants),
    paraphraser (None = ``pe_kit.study.world.DEFAULT_PARAPHRASER``).
    """

    arms: tuple = setting(("long", "short"), ParamSpec("str", many=True, choices=ARMS), "notebook 04's data arms",
                          notebooks="04")
    banks: tuple = setting(("bankA", "public"), ParamSpec("str", many=True), "notebook 04's banks", notebooks="04")
    variants: Any = setting("all", ParamSpec("str", many=True, word="all"), "'all' or a list of variant names",
                            notebooks="02 04")
    per_variant: int = setting(5, COUNT, "canaries audited per variant", notebooks="01 02 03 04 05 08")
    pool_size: int = setting(512, COUNT, "M: candidate pool of the paraphrase and nonce variants",
                             notebooks="01 02 03 04 05 08")
    paraphraser: str | None = setting(None, ParamSpec("str", optional=True, choices=("smollm2", "auto", "wordnet")),
                                      "paraphrase pools: None (default route), auto, smollm2 or wordnet",
                                      notebooks="02 04 05")


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
    suite's ``pe_kit.study.implementation_audit.SUITE_DELTA`` (1e-3, ``audit.blackbox.DEFAULT_DELTA``) unless
    ``--set delta=…`` names another."""

    shared: Mapping = field(default_factory=lambda: {"delta": 1e-3})
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

#: shared field → the notebook numbers that read it, from the declarations (``setting(notebooks=…)``), in tree order
_READERS = {k: nbs.split() for cls in SECTIONS.values() for k, nbs in cls.readers().items()}
#: The shared (study / mechanism / audit) settings each notebook reads; its own section's fields come on top.
NOTEBOOK_READS: dict[str, tuple] = {stem: tuple(k for k, nbs in _READERS.items() if stem[:2] in nbs)
                                    for stem in NOTEBOOKS}
#: The settings every notebook reads: the audited mechanism (σ, q, k, C) and its (ε, δ) statement (δ, α); ``--set``
#: of one applies to every notebook (``pe_kit.run.presets.get_preset``).
MECHANISM_KEYS = tuple(k for k, nbs in _READERS.items() if len(nbs) == len(NOTEBOOKS))


def _own(stem: str) -> dict:
    return NOTEBOOK_SECTIONS[stem].specs()


_SHARED = {k: (sec, spec) for sec, cls in SECTIONS.items() for k, spec in cls.specs().items()}
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
    return RUNNER_KEYS + NOTEBOOK_READS[stem] + tuple(_own(stem))


def _describe(names) -> str:
    return ", ".join(f"{k} ({PARAM_TYPES[k].describe()})" for k in names)


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
            sec, name, _ = locate(key)
            if sec not in SECTIONS and name not in _own(sec):  # one notebook's shared value: no section holds it
                v = check_param(key, value, PARAM_TYPES[name])
                shared.setdefault(sec, {})[name] = tuple(v) if isinstance(v, list) else v
            else:  # checked once, when its section is built below
                changes.setdefault(sec, {})[name] = value
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


def parameters_cell(stem: str) -> str:
    """The source of notebook ``stem``'s ``parameters`` cell, generated from the declarations: the runner's keys,
    then one ``name = None`` line per setting it takes (None: the preset's value), with its doc and accepted values
    (no ``=`` in a comment: papermill's parameter parser would skip the line).

    Returns:
        str (no trailing newline), e.g. ``noise_multiplier = None  # σ: noise std is σ·C: a number ≥ 0``.
    """
    lines = ["# Parameters: papermill injects values after this cell; None takes the preset's value.",
             "# Each setting is declared once, in pe_kit.settings (type, range, meaning; --set <name>=…).",
             'output_dir = None  # None: results/interactive at the repository root', 'preset = "quick"  # tiny, quick '
             'or paper', "seed = 0"]
    groups = [(sec, [k for k in NOTEBOOK_READS[stem] if _SHARED[k][0] == sec]) for sec in SECTIONS]
    for title, names in groups + [(f"notebook {stem[:2]}", list(_own(stem)))]:
        if names:
            lines.append(f"# {title}")
            lines += [f"{k} = None  # {_declared(k).metadata['doc']}: {PARAM_TYPES[k].describe()}" for k in names]
    return "\n".join(lines)


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``key=value`` (value as JSON if it parses, else a comma list for ``a,b``, else a string).

    ``key`` is a path of the settings tree (:func:`locate`): a short name (``trials``,
    ``noise_multiplier``, ``rounds``), ``<section>.<field>`` (``mechanism.noise_multiplier``, ``audit.delta``)
    or ``<notebook>.<parameter>`` (``06.rounds=3``, ``06_multiround_mauve.bank_size=512``: for that notebook only).
    The value is checked and normalised against the field's own declaration (``trials=1e6`` → 1000000;
    ``trials=true``, ``max_probes=1.5`` rejected).

    Returns:
        (canonical key, value): the short name for a short name or ``<section>.<field>``, else ``<stem>.<field>``.

    Raises:
        ValueError: if ``text`` has no ``=``, the key is not in the tree (the message lists the valid keys, or the
            section's settings with their ranges, with a did-you-mean), or the value has the wrong type or range
            (the message names the key, the value and the accepted values).
    """
    if "=" not in text:
        raise ValueError(f"--set {text!r}: use key=value, e.g. --set trials=100000")
    key, raw = text.split("=", 1)
    key = key.strip()
    try:
        sec, name, canon = locate(key)
    except ValueError as exc:
        raise ValueError(f"--set {key}=…: {exc}") from None
    raw = raw.strip()
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = [v.strip() for v in raw.split(",")] if "," in raw else raw
    if raw.lower() in ("none", "null"):
        value = None
    if isinstance(value, list):  # "a,1e6" → each part parsed as JSON when it parses
        value = [_json_or_str(v) for v in value]
    try:
        value = check_param(key, value, PARAM_TYPES[name])
    except ValueError as exc:
        raise ValueError(f"--set {key}={raw}: {exc}") from None
    return canon, _absolute_paths(canon, value)


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
