"""The field machinery of the settings tree: :class:`ParamSpec`, :func:`setting`, :class:`Section` and
:func:`check_param`, the one check.
"""
from __future__ import annotations

import math
import os
from dataclasses import Field, dataclass, field, fields

__all__ = ["ParamSpec", "PARAM_TYPES", "Section", "setting", "check_param", "closest", "did_you_mean", "slider_range"]


@dataclass(frozen=True)
class ParamSpec:
    """Type and range of one parameter: ``kind`` (``int`` | ``float`` | ``str`` | ``bool`` | ``dict``; ``many``: a
    list of them), inclusive ``lo`` / ``hi`` (``lo_open`` / ``hi_open``: exclusive), ``optional`` (None accepted),
    ``choices``, ``word`` (a str accepted besides the typed value: ``"all"``, ``"auto"``)."""

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
        """The accepted values in words, e.g. ``an integer ≥ 1`` or ``a list of numbers in (0, 1]``."""
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


#: The type of every setting, by name, filled as each section class is defined.
PARAM_TYPES: dict[str, ParamSpec] = {}
_FIELDS: dict = {}  # name → its dataclass field (default, doc, slider)


def setting(default, spec: ParamSpec, doc: str = "", *, notebooks: str | None = None,
            slider: tuple[float, float] | None = None):
    """A dataclass field of a settings section: default (a list stored as a tuple), type and range, one line of doc.
    ``notebooks``: the notebooks reading this shared field (None: every reader of its section; ``""``: none, a runner
    key). ``slider``: the explorer's default slider range."""
    if isinstance(default, list):
        default = tuple(default)
    return field(default=default, metadata={"spec": spec, "doc": doc, "notebooks": notebooks, "slider": slider})


class Section:
    """Base of every frozen settings dataclass: each :func:`setting` field is normalised by :func:`check_param` on
    construction (ValueError), and each subclass registers in :data:`PARAM_TYPES`."""

    #: the notebooks that read this section's fields (a field's ``notebooks`` overrides it)
    read_by = "01 02 03 04 05 06 07 08"

    def __init_subclass__(cls, **kwargs):
        """Register the class's own :func:`setting` fields; RuntimeError for a name declared with another type."""
        super().__init_subclass__(**kwargs)
        for name, f in vars(cls).items():
            spec = f.metadata.get("spec") if isinstance(f, Field) else None
            if spec is None:
                continue
            if PARAM_TYPES.get(name, spec) is not spec:
                raise RuntimeError(f"setting {name!r} is declared twice with different types "
                                   f"({PARAM_TYPES[name].describe()} and {spec.describe()}); declare it once")
            PARAM_TYPES[name], _FIELDS[name] = spec, f

    def __post_init__(self) -> None:
        for name, spec in self.specs().items():
            v = check_param(name, getattr(self, name), spec)
            object.__setattr__(self, name, tuple(v) if isinstance(v, list) else v)

    @classmethod
    def specs(cls) -> dict:
        """``{field name: ParamSpec}`` of the declared fields, inherited ones included."""
        return {f.name: f.metadata["spec"] for f in fields(cls) if "spec" in f.metadata}

    @classmethod
    def readers(cls) -> dict:
        """``{field name: notebook numbers that read it}`` (``"04"``, ``"01 02 …"``; ``""`` for a runner key)."""
        return {f.name: cls.read_by if f.metadata["notebooks"] is None else f.metadata["notebooks"]
                for f in fields(cls) if "spec" in f.metadata}

    @classmethod
    def from_params(cls, params, **overrides):
        """The section of the fields ``params`` (a mapping) sets, ``overrides`` on top (None or missing: the
        default)."""
        kw = {k: params[k] for k in cls.specs() if params.get(k) is not None}
        kw.update((k, v) for k, v in overrides.items() if v is not None)
        return cls(**kw)

    def as_dict(self) -> dict:
        """Plain dict of the declared fields (tuples as lists), for result rows."""
        return {k: plain(getattr(self, k)) for k in self.specs()}


def plain(v):
    """``v`` with a tuple as a list (settings store lists as tuples)."""
    return list(v) if isinstance(v, tuple) else v


def _fix(name: str, spec: ParamSpec) -> str:
    """``": pass a float, e.g. 1e-05"``: the kind a numeric field takes, its default as example."""
    key = name.split(".")[-1].split("[")[0]
    default = _FIELDS[key].default if PARAM_TYPES.get(key) is spec else None
    eg = f", e.g. {default!r}" if isinstance(default, (int, float)) and not isinstance(default, bool) else ""
    return f": pass {'an integer' if spec.kind == 'int' else 'a float'}{eg}"


def slider_range(name: str) -> tuple[float, float]:
    """The explorer's default slider range of setting ``name`` (``setting(slider=…)``)."""
    return _FIELDS[name].metadata["slider"]


#: The largest magnitude a number setting takes: an integer stays exact in float64 (2**53), a number's square and
#: its products in the audit stay finite (σ² in the accountant, (σC)²‖w‖² in the trials; float64 ends at 1.8e308).
_MAX_INT, _MAX_FLOAT = 2**53, 1e100


def _number(name: str, value, spec: ParamSpec):
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name}={value!r} is not {spec.describe()}"
                         + (" (true/false is not a number)" if isinstance(value, bool) else "") + _fix(name, spec))
    try:
        x = float(value)
    except OverflowError:  # an int beyond float64
        x = math.inf
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
    if abs(value) > (_MAX_INT if spec.kind == "int" else _MAX_FLOAT):
        raise ValueError(f"{name}={value!r} is out of range: use {spec.describe()}, " + (
            "at most 2**53 = 9,007,199,254,740,992 (larger integers are not exact in float64)" if spec.kind == "int"
            else "at most 1e+100 in magnitude (larger values overflow float64: σ² in the accountant, (σC)²‖w‖² in "
                 "the trials)"))
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
        raise ValueError(f"{name}={value!r} is not accepted: use {f'{spec.word!r} or ' if spec.word else ''}one of "
                         f"{', '.join(map(str, spec.choices))}")
    return value


def check_param(name: str, value, spec: ParamSpec | None = None):
    """Validate and normalise one value against its type (default ``PARAM_TYPES`` of ``name``'s last dotted part; a
    name without a type is returned unchanged). Returns ``int`` for integer fields (``1e6`` → 1000000), ``float`` for
    numbers, a ``list`` for list fields (a single value becomes one element); a bool or str is never a number.
    Raises ValueError naming the field, the value and the accepted values."""
    spec = spec or PARAM_TYPES.get(name.split(".")[-1])
    if spec is None:
        return value
    if hasattr(value, "dtype") and hasattr(value, "tolist"):  # a numpy scalar or array: its Python value(s)
        if value.ndim > 1:
            raise ValueError(f"{name} is a {value.ndim}-D array of shape {value.shape}: use {spec.describe()}")
        value = value.tolist()
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
        if spec.choices and spec.kind == "str":  # no choice holds a comma: "ordinary,nonce" names two
            items = [w for v in items for w in (map(str.strip, v.split(",")) if isinstance(v, str) else [v])]
        if not items:
            raise ValueError(f"{name}=[] is empty: use {spec.describe()}")
        return [_one(f"{name}[{i}]" if len(items) > 1 else name, v, spec) for i, v in enumerate(items)]
    if isinstance(value, (list, tuple)):
        raise ValueError(f"{name}={value!r} is a list: use {spec.describe()}")
    return _one(name, value, spec)


def closest(word, choices) -> str | None:
    """The choice closest to ``word`` (``difflib.get_close_matches``, cutoff 0.6) or None: the kit's did-you-mean."""
    import difflib

    return next(iter(difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)), None)


def did_you_mean(word: str, choices) -> str:
    """``"; did you mean 'trials'?"`` for the :func:`closest` of ``choices`` to ``word``, or ``""``."""
    close = closest(word, sorted(str(c) for c in choices))
    return f"; did you mean {close!r}?" if close else ""
