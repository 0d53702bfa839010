"""Frozen settings objects shared by the mechanism and the audit (docs/architecture.md, stage 0 base), the way every
setting is declared (:func:`setting` on a :class:`Section`), and the one typed validation (:func:`check_param`).

Defaults are the paper's (§3, App. D): k=5, C=0.1, σ=1, q=0.1, δ=1e-5, m=64, α=0.05, five canaries.

Each setting is a field of one section class, with its default, its ``ParamSpec`` (type and range) and a line of
doc; the section checks it on construction. The mechanism and audit sections live here (``MechanismSettings``,
``AuditSettings``, and ``MechanismConfig`` / ``AuditConfig`` on top of them), the world's (``WorldSettings``) too;
the study and notebook sections and the tree itself are in ``pe_kit.run.settings``. :data:`PARAM_TYPES` is a
live, read-only view of every declared field by name, so ``--set``, the presets, ``StudyConfig`` and the
notebooks' ``resolve_params`` check a value the same way: a bool is never a number, an integral float (``1e6``,
``200000.0``) is fine for an integer field, a fractional one is not, ranges are checked, and a list field takes
a single value as a one-element list.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["MechanismSettings", "MechanismConfig", "AuditSettings", "AuditConfig", "ParamSpec", "COUNT", "PARAM_TYPES",
           "Section", "WorldSettings", "ARMS", "FORMATS", "setting", "record_cap_setting", "RECORD_CAP", "check_param",
           "check_params", "closest"]


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


def setting(default, spec: ParamSpec, doc: str = ""):
    """A dataclass field of a settings section: its default, its type and range (``spec``) and one line of doc.

    The one place a setting is declared: ``Section.__post_init__`` checks the value against ``spec``, ``--set``
    and the notebooks' ``resolve_params`` look the spec up by name (:data:`PARAM_TYPES`), and the notebooks'
    parameters cells are generated from the declarations (``pe_kit.run.settings.parameters_cell``).
    A list default is stored as a tuple (frozen sections stay hashable).
    """
    from dataclasses import field

    if isinstance(default, list):
        default = tuple(default)
    return field(default=default, metadata={"spec": spec, "doc": doc})


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

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _SECTIONS.append(cls)

    def __post_init__(self) -> None:
        from dataclasses import fields

        for f in fields(self):
            spec = f.metadata.get("spec")
            if spec is not None:
                v = check_param(f.name, getattr(self, f.name), spec)
                object.__setattr__(self, f.name, tuple(v) if isinstance(v, list) else v)

    @classmethod
    def specs(cls) -> dict:
        """``{field name: ParamSpec}`` of the declared fields (inherited ones included), in field order."""
        from dataclasses import fields

        return {f.name: f.metadata["spec"] for f in fields(cls) if "spec" in f.metadata}

    def as_dict(self) -> dict:
        """Plain dict of the declared fields (tuples as lists), for result rows."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in
                ((name, getattr(self, name)) for name in self.specs())}


class _ParamTypes(Mapping):
    """``name → ParamSpec`` of every field declared on a registered :class:`Section` (read-only, live).

    A name declared on two classes must carry the very same ``ParamSpec`` object (``record_cap``); otherwise the
    lookup raises ``RuntimeError`` (a setting declared twice)."""

    def _index(self) -> dict:
        from dataclasses import fields, is_dataclass

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
            self._cache, self._key = out, key
        return self._cache

    def __getitem__(self, name: str) -> ParamSpec:
        return self._index()[name]

    def __iter__(self):
        return iter(self._index())

    def __len__(self) -> int:
        return len(self._index())


#: The type of every run parameter, by name: a live view of the fields declared on the settings sections
#: (``MechanismSettings``, ``AuditSettings`` here; the study and notebook sections in ``pe_kit.run.settings``).
PARAM_TYPES: Mapping = _ParamTypes()


def _number(name: str, value, spec: ParamSpec):
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name}={value!r} is not {spec.describe()}"
                         + (" (true/false is not a number)" if isinstance(value, bool) else ""))
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{name}={value!r} is not {spec.describe()} (must be finite)")
    if spec.kind == "int":
        if x != int(x):
            raise ValueError(f"{name}={value!r} is not {spec.describe()} (no fractional part allowed: use "
                             f"{math.floor(x)} or {math.ceil(x)})")
        out: float | int = int(x)
    else:
        out = x
    if spec.lo is not None and (x < spec.lo or (spec.lo_open and x == spec.lo)) or \
            spec.hi is not None and (x > spec.hi or (spec.hi_open and x == spec.hi)):
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


def check_params(values: dict, skip_none: bool = False) -> dict:
    """:func:`check_param` on every item of ``values``; returns a new dict (``skip_none``: keep None as is)."""
    return {k: (v if skip_none and v is None else check_param(k, v)) for k, v in values.items()}


ARMS = ("long", "short")
FORMATS = ("auto", "blogs", "yelp", "sentiment140")


@dataclass(frozen=True)
class WorldSettings(Section):
    """The fields that fix a study's world: data, data arm, splits, bank and encoder (``pe_kit.study.world.StudyConfig``
    and the study section of the settings tree, ``pe_kit.run.settings.StudySettings``, both take them from here).

    Attributes: see ``StudyConfig``. Raises: ValueError naming the field, the value and the accepted values.
    """

    data: str | None = setting(None, ParamSpec("str", optional=True), "corpus file; None: the bundled Blogs sample")
    fmt: str = setting("auto", ParamSpec("str", choices=FORMATS), "format of data")
    arm: str = setting("long", ParamSpec("str", choices=ARMS), "data arm of a single-world notebook")
    n_canary: int = setting(25, COUNT, "users in the canary split")
    n_aux: int = setting(500, COUNT, "aux users (Σ̂, Eq. 33)")
    n_calibration: int = setting(1000, COUNT, "calibration users (as many as n_test)")
    n_test: int = setting(1000, COUNT, "N: test users")
    bank: str = setting("bankA", ParamSpec("str"), "bank of a single-world notebook: bankA, bankB, public or a path")
    bank_size: int = setting(8192, COUNT, "p: bank entries")
    max_probes: int = setting(64, ParamSpec("int", lo=0), "r: probes of the paraphrase and nonce variants")
    model: str = setting("all-MiniLM-L6-v2", ParamSpec("str"), "encoder name or path")
    max_seq_length: int | None = setting(None, ParamSpec("int", lo=4, optional=True),
                                         "encoder token cap; None: the model's")
    record_cap: int = record_cap_setting()
    seed: int = setting(0, ParamSpec("int", lo=0), "seed of splits, designs and trials")
    on_error: str = setting("raise", ParamSpec("str", choices=("raise", "skip")),
                            "malformed data lines: raise (naming file and line) or skip (count and drop)")



@dataclass(frozen=True)
class MechanismSettings(Section):
    """The mechanism section of the settings tree: one PE histogram release (Eq. 1, Alg. A.1 lines 8–20).

    ε_theory (``pe_kit.audit.accounting.epsilon_theory``) is for add/remove of one user under Poisson
    sampling at rate q, composed over the releases.

    Attributes:
        top_k: k, votes per record (int ≥ 1).
        clip_norm: C, L2 clip of a user's normalized vote vector (float > 0).
        noise_multiplier: σ; the release noise is N(0, (σC)² I) (float ≥ 0).
        sample_rate: q, independent Bernoulli participation probability (0 < q ≤ 1).

    Raises:
        ValueError: naming the field and the admissible range.
    """

    top_k: int = setting(5, COUNT, "k: votes per record")
    clip_norm: float = setting(0.1, ParamSpec("float", lo=0, lo_open=True), "C: L2 clip of a user's vote vector")
    noise_multiplier: float = setting(1.0, ParamSpec("float", lo=0), "σ: noise std is σ·C")
    sample_rate: float = setting(0.1, ParamSpec("float", lo=0, hi=1, lo_open=True),
                                 "q: Poisson participation probability of a user")


@dataclass(frozen=True)
class MechanismConfig(MechanismSettings):
    """One PE histogram release (Eq. 1, Alg. A.1 lines 8–20): :class:`MechanismSettings` plus m.

    Attributes:
        top_k, clip_norm, noise_multiplier, sample_rate: see :class:`MechanismSettings`.
        record_cap: m, records kept per user (int ≥ 1).

    Raises:
        ValueError: naming the field and the admissible range.
    """

    record_cap: int = record_cap_setting()

    @property
    def noise_std(self) -> float:
        """Standard deviation σ·C of each histogram coordinate's Gaussian noise."""
        return self.noise_multiplier * self.clip_norm


#: The threshold rules' names (``pe_kit.audit.threshold_rules.RULES`` holds the rules; this stage cannot import them).
THRESHOLD_RULES = ("gaussian_model", "argmax", "anchored_argmax")


@dataclass(frozen=True)
class AuditSettings(Section):
    """The audit section of the settings tree: statistics of every audit (§2.1 Steps 2–5, App. E.6–E.7).

    Attributes:
        trials: trials per hypothesis, for calibration and again for the test (int ≥ 1).
        alpha: family-wise error over the canaries of one variant (0 < α < 1).
        delta: δ of the (ε, δ) statement (0 ≤ δ < 1).
        shrinkage: diagonal shrinkage of the aux second moment (Eq. 33), 0.1 in the paper.
        ridge: numerical ridge added to Σ̂ (Eq. 35), 1e-9 in the paper.
        threshold_rule: how the calibration split chooses the frozen threshold (§2.1 Step 5), a name of
            ``pe_kit.audit.threshold_rules.RULES``: ``"gaussian_model"`` (the default; docs/threshold_rules.md),
            ``"argmax"`` (the largest calibrated ε), ``"anchored_argmax"``, ``"penalised"``, ``"min_count"``.

    Raises:
        ValueError: naming the field and the admissible range.
    """

    trials: int = setting(1_000_000, COUNT, "trials per hypothesis per split")
    alpha: float = setting(0.05, ParamSpec("float", lo=0, hi=1, lo_open=True, hi_open=True),
                           "family-wise error over one variant's canaries")
    delta: float = setting(1e-5, ParamSpec("float", lo=0, hi=1, hi_open=True), "δ of the (ε, δ) statement")
    shrinkage: float = setting(0.1, ParamSpec("float", lo=0, hi=1), "diagonal shrinkage of Σ̂ (Eq. 33)")
    ridge: float = setting(1e-9, ParamSpec("float", lo=0), "ridge added to Σ̂ (Eq. 35)")
    threshold_rule: str = setting("gaussian_model", ParamSpec("str", choices=THRESHOLD_RULES),
                                  "how calibration freezes the threshold (docs/threshold_rules.md)")


@dataclass(frozen=True)
class AuditConfig(AuditSettings):
    """Audit statistics settings (§2.1 Steps 2–5, App. E.6–E.7): :class:`AuditSettings` plus the canary count.

    Attributes:
        trials, alpha, delta, shrinkage, ridge, threshold_rule: see :class:`AuditSettings`.
        n_canaries: canaries per variant; γ = α / (n_canaries · 4) (Eq. 30 ff.).

    Raises:
        ValueError: naming the field and the admissible range.
    """

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
