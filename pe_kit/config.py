"""Frozen settings objects shared by the mechanism and the audit (docs/architecture.md, stage 0 base), and the one
typed validation of every run parameter (``PARAM_TYPES`` / :func:`check_param`).

Defaults are the paper's (§3, App. D): k=5, C=0.1, σ=1, q=0.1, δ=1e-5, m=64, α=0.05, five canaries.

``check_param`` is used by the CLI's ``--set``, the presets, ``StudyConfig``, the notebooks'
``resolve_params`` and the two config classes below, so a value means the same everywhere: a bool is
never a number, an integral float (``1e6``, ``200000.0``) is fine for an integer field, a fractional one
is not, ranges are checked, and a list field takes a single value as a one-element list.
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass

__all__ = ["MechanismConfig", "AuditConfig", "ParamSpec", "PARAM_TYPES", "check_param", "check_params"]


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


_I1, _F = ParamSpec("int", lo=1), ParamSpec("float")
_ARMS = ("long", "short")
#: The type of every run parameter (preset fields, ``StudyConfig`` fields, notebooks' own parameters).
PARAM_TYPES: dict[str, ParamSpec] = {
    "data": ParamSpec("str", optional=True), "fmt": ParamSpec("str", optional=True,
                                                              choices=("auto", "blogs", "yelp", "sentiment140")),
    "arms": ParamSpec("str", many=True, choices=_ARMS), "arm": ParamSpec("str", choices=_ARMS),
    "sweep_arm": ParamSpec("str", choices=_ARMS), "banks": ParamSpec("str", many=True), "bank": ParamSpec("str"),
    "variants": ParamSpec("str", many=True, word="all"), "sweep_variants": ParamSpec("str", many=True),
    "encoder_variants": ParamSpec("str", many=True), "tightness_variant": ParamSpec("str"),
    "variant": ParamSpec("str"), "model": ParamSpec("str"), "encoders": ParamSpec("str", many=True, word="auto"),
    "record_cap": _I1, "n_canary": _I1, "per_variant": _I1, "n_aux": _I1, "n_calibration": _I1, "n_test": _I1,
    "bank_size": _I1, "max_probes": ParamSpec("int", lo=0), "pool_size": _I1,
    "max_seq_length": ParamSpec("int", lo=4, optional=True), "trials": _I1, "llr_trials": _I1, "sweep_trials": _I1,
    "encoder_per_variant": _I1, "tightness_trials": ParamSpec("int", lo=1, many=True),
    "ceiling_sigmas": ParamSpec("float", lo=0, lo_open=True, many=True),
    "sigmas": ParamSpec("float", lo=0, lo_open=True, many=True), "qs": ParamSpec("float", lo=0, hi=1, lo_open=True, many=True),
    "seed": ParamSpec("int", lo=0), "top_k": _I1, "clip_norm": ParamSpec("float", lo=0, lo_open=True),
    "noise_multiplier": ParamSpec("float", lo=0), "sample_rate": ParamSpec("float", lo=0, hi=1, lo_open=True),
    "alpha": ParamSpec("float", lo=0, hi=1, lo_open=True, hi_open=True),
    "delta": ParamSpec("float", lo=0, hi=1, hi_open=True), "n_canaries": _I1,
    "shrinkage": ParamSpec("float", lo=0, hi=1), "ridge": ParamSpec("float", lo=0),
    "rounds": _I1, "max_attempts": _I1, "retain_fraction": ParamSpec("float", lo=0, hi=1, lo_open=True, hi_open=True),
    "generator": ParamSpec("str", choices=("public-retrieval", "smollm2", "openai", "wordnet")),
    "openai_base_url": ParamSpec("str", optional=True), "openai_model": ParamSpec("str", optional=True),
    "public_max_texts": ParamSpec("int", lo=1, optional=True), "mauve_seeds": ParamSpec("int", lo=0, many=True),
    "mauve_samples": ParamSpec("int", lo=2, optional=True), "pe_seeds": ParamSpec("int", lo=0, many=True),
    "adaptive_trials": ParamSpec("int", lo=1, optional=True),
    "reference_split": ParamSpec("str", choices=("aux", "calibration", "test")),
    "checkpoint_dir": ParamSpec("str", optional=True), "output_dir": ParamSpec("str"), "preset": ParamSpec("str"),
    "on_error": ParamSpec("str", choices=("raise", "skip")),
    # paraphrase pool route (pe_kit.study.world.paraphrase_pool); None = pe_kit.study.world.DEFAULT_PARAPHRASER
    "paraphraser": ParamSpec("str", optional=True, choices=("smollm2", "auto", "wordnet")),
    # notebook 07 (black-box implementation audits)
    "suite_trials": _I1, "ladder": ParamSpec("int", lo=1, many=True), "repeats": _I1, "repeat_trials": _I1,
    # notebook 08 (one-run audit; None = pe_kit.study.one_run.DEFAULTS)
    "one_run_qs": ParamSpec("float", lo=0, hi=1, lo_open=True, many=True, optional=True),
    "probe_shares": ParamSpec("float", lo=0, hi=1, lo_open=True, many=True, optional=True),
    "one_run_variants": ParamSpec("str", many=True, optional=True, choices=("nonce", "natural")),
    "copies": ParamSpec("int", lo=1, optional=True), "idealised_ms": ParamSpec("int", lo=1, many=True, optional=True),
    "idealised_repeats": ParamSpec("int", lo=1, optional=True),
    # Monte-Carlo games per σ (a standard error needs ≥ 2) and rows of the source's Table 1 (one_run_checks.TABLE1)
    "published_repeats": ParamSpec("int", lo=2, optional=True),
    "published_sigmas": ParamSpec("float", many=True, optional=True, choices=(0.5, 1.0, 2.0, 4.0)),
}


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
            raise ValueError(f"{name}={value!r} is not {spec.describe()} (no fractional part allowed)")
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


@dataclass(frozen=True)
class MechanismConfig:
    """One PE histogram release (Eq. 1, Alg. A.1 lines 8–20).

    Attributes:
        top_k: k, votes per record (int ≥ 1).
        clip_norm: C, L2 clip of a user's normalized vote vector (float > 0).
        noise_multiplier: σ; the release noise is N(0, (σC)² I) (float ≥ 0).
        sample_rate: q, independent Bernoulli participation probability (0 < q ≤ 1).
        record_cap: m, records kept per user (int ≥ 1).

    Raises:
        ValueError: naming the field and the admissible range.
    """

    top_k: int = 5
    clip_norm: float = 0.1
    noise_multiplier: float = 1.0
    sample_rate: float = 0.1
    record_cap: int = 64

    def __post_init__(self) -> None:
        for k in ("top_k", "clip_norm", "noise_multiplier", "sample_rate", "record_cap"):
            object.__setattr__(self, k, check_param(k, getattr(self, k)))

    @property
    def noise_std(self) -> float:
        """Standard deviation σ·C of each histogram coordinate's Gaussian noise."""
        return self.noise_multiplier * self.clip_norm

    def as_dict(self) -> dict:
        """Plain dict of the settings (for result rows)."""
        return asdict(self)


@dataclass(frozen=True)
class AuditConfig:
    """Audit statistics settings (§2.1 Steps 2–5, App. E.6–E.7).

    Attributes:
        trials: trials per hypothesis, for calibration and again for the test (int ≥ 1).
        alpha: family-wise error over the canaries of one variant (0 < α < 1).
        delta: δ of the (ε, δ) statement (0 ≤ δ < 1).
        n_canaries: canaries per variant; γ = α / (n_canaries · 4) (Eq. 30 ff.).
        shrinkage: diagonal shrinkage of the aux second moment (Eq. 33), 0.1 in the paper.
        ridge: numerical ridge added to Σ̂ (Eq. 35), 1e-9 in the paper.

    Raises:
        ValueError: naming the field and the admissible range.
    """

    trials: int = 1_000_000
    alpha: float = 0.05
    delta: float = 1e-5
    n_canaries: int = 5
    shrinkage: float = 0.1
    ridge: float = 1e-9

    def __post_init__(self) -> None:
        for k in ("trials", "alpha", "delta", "n_canaries", "shrinkage", "ridge"):
            object.__setattr__(self, k, check_param(k, getattr(self, k)))

    @property
    def gamma(self) -> float:
        """Tail probability of each one-sided Clopper–Pearson bound: α / (n_canaries · 4) (App. E.6)."""
        return self.alpha / (self.n_canaries * 4)

    def as_dict(self) -> dict:
        """Plain dict of the settings (for result rows)."""
        return asdict(self)
