"""The settings tree of a reproduction (:class:`Preset`), its ``--set`` paths (:func:`parse_override`) and the
notebooks' parameters cells (:func:`parameters_cell`).

Paths: ``study.<field>``, ``mechanism.<field>``, ``audit.<field>``, ``<notebook>.<field>``; a field name unique in
the tree is its own short name. ``<notebook>.<shared field>`` sets it for that notebook only.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pe_kit.settings.fields import _FIELDS, PARAM_TYPES, Section, check_param, did_you_mean, plain
from pe_kit.settings.sections import (Ablations, AuditSettings, ImplementationAudit, LLRChecks, MechanismSettings,
                                      MultiRound, NotebookSection, OneRun, StudySettings)

__all__ = ["Preset", "SECTIONS", "NOTEBOOKS", "NOTEBOOK_SECTIONS", "NOTEBOOK_READS", "RUNNER_KEYS", "MECHANISM_KEYS",
           "SHORT", "notebook_keys", "notebook_stem", "locate", "parameters_cell", "parse_override"]


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


_SHARED = {k: sec for sec, cls in SECTIONS.items() for k in cls.specs()}  # shared field → its section
#: short name → (section or notebook stem, field); a field name that two sections declare has no short name.
SHORT: dict[str, tuple] = {k: (sec, k) for k, sec in _SHARED.items() if k != "seed"}
for _stem in NOTEBOOKS:
    for _k in NOTEBOOK_SECTIONS[_stem].specs():
        assert _k not in SHORT, f"setting {_k!r} is declared twice (in {SHORT.get(_k)} and {_stem})"
        SHORT[_k] = (_stem, _k)


def notebook_stem(nb: str) -> str:
    """``"06"`` or ``"06_multiround_mauve"`` → ``"06_multiround_mauve"``; raises ValueError for an unknown notebook."""
    matches = [n for n in NOTEBOOKS if n == nb or n.split("_")[0] == nb]
    if not matches:
        raise ValueError(f"use <notebook>.<parameter> with a notebook of {', '.join(NOTEBOOKS)} "
                         f"(or its number, e.g. 06.rounds=3){did_you_mean(nb, NOTEBOOKS)}")
    return matches[0]


def notebook_keys(stem: str) -> tuple:
    """The parameters notebook ``stem`` takes: the runner's, the shared ones it reads, its own."""
    return RUNNER_KEYS + NOTEBOOK_READS[stem] + tuple(NOTEBOOK_SECTIONS[stem].specs())


def locate(key: str) -> tuple[str, str, str]:
    """Where ``--set key=…`` points: (section or notebook stem, field, canonical key: the short name, or
    ``<stem>.<field>`` for a notebook's). Raises ValueError for an unknown or runner-owned key."""
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
            listed = ", ".join(f"{k} ({spec.describe()})" for k, spec in specs.items() if k != "seed")
            raise ValueError(f"the {head} section has no setting {name!r}{did_you_mean(name, specs)}; its settings: "
                             f"{listed}")
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


@dataclass(frozen=True)
class Preset:
    """The settings tree of one reproduction: ``study``, ``mechanism``, ``audit`` and ``notebooks`` (stem → section);
    a short name reads the value (``p.n_test``)."""

    name: str
    description: str = ""
    study: StudySettings = field(default_factory=StudySettings)
    mechanism: MechanismSettings = field(default_factory=MechanismSettings)
    audit: AuditSettings = field(default_factory=AuditSettings)
    notebooks: Mapping = field(default_factory=lambda: {stem: cls() for stem, cls in NOTEBOOK_SECTIONS.items()})

    def __getattr__(self, name: str):
        if name.startswith("__") or name not in SHORT:
            raise AttributeError(name)
        return getattr(self.section(SHORT[name][0]), name)

    def section(self, sec: str) -> Section:
        """The section ``study`` / ``mechanism`` / ``audit`` or a notebook stem's."""
        return getattr(self, sec) if sec in SECTIONS else self.notebooks[sec]

    def with_values(self, values: Mapping[str, Any]) -> "Preset":
        """A copy with ``values`` set (keys as :func:`locate`); ValueError for a bad key or value."""
        changes: dict[str, dict] = {}
        for key, value in values.items():
            sec, name, _ = locate(key)
            change = changes.setdefault(sec, {})
            if sec not in SECTIONS and name not in NOTEBOOK_SECTIONS[sec].specs():  # one notebook's shared value
                v = check_param(key, value, PARAM_TYPES[name])
                change["shared"] = {**change.get("shared", self.notebooks[sec].shared),
                                    name: tuple(v) if isinstance(v, list) else v}
            else:  # checked once, when its section is built below
                change[name] = value
        kw: dict[str, Any] = {s: replace(getattr(self, s), **c) for s, c in changes.items() if s in SECTIONS}
        nbs = {stem: replace(sec, **changes[stem]) if stem in changes else sec for stem, sec in self.notebooks.items()}
        if nbs != dict(self.notebooks):
            kw["notebooks"] = nbs
        return replace(self, **kw) if kw else self

    def without_shared(self, names) -> "Preset":
        """A copy in which no notebook keeps its own value of the shared settings ``names``."""
        if not names:
            return self
        nbs = {stem: replace(sec, shared={k: v for k, v in sec.shared.items() if k not in names})
               for stem, sec in self.notebooks.items()}
        return replace(self, notebooks=nbs)

    def shared_values(self) -> dict:
        """Every shared setting by short name."""
        return {k: plain(getattr(self.section(sec), k)) for k, sec in _SHARED.items()}

    def view(self, stem: str | None = None) -> dict:
        """Every short name's value, overlaid with notebook ``stem``'s ``shared`` values (None: none)."""
        out = self.shared_values()
        for sec in self.notebooks.values():
            out.update(sec.as_dict())
        if stem is not None:
            out.update({k: plain(v) for k, v in self.notebooks[stem].shared.items()})
        return out

    @property
    def extra(self) -> dict:
        """stem → that notebook's values (own and ``shared``) that differ from its section's defaults."""
        out = {}
        for stem, sec in self.notebooks.items():
            base = NOTEBOOK_SECTIONS[stem]()
            d = {k: v for k, v in sec.as_dict().items() if v != plain(getattr(base, k))}
            d.update({k: plain(v) for k, v in sec.shared.items() if base.shared.get(k) != v})
            if d:
                out[stem] = d
        return out

    def paths(self) -> dict:
        """Every value by canonical key, notebooks' ``shared`` included."""
        out = self.shared_values()
        for stem, sec in self.notebooks.items():
            out.update({f"{stem}.{k}": plain(v) for k, v in {**sec.as_dict(), **sec.shared}.items()})
        return out

    def as_dict(self) -> dict:
        """Flat dict: name, description, :meth:`view` and ``extra``."""
        return {"name": self.name, "description": self.description, **self.view(), "extra": self.extra}


def parameters_cell(stem: str) -> str:
    """Notebook ``stem``'s ``parameters`` cell: the runner's keys, then ``name = None  # doc: accepted values`` per
    setting (no ``=`` in a comment, which papermill would skip)."""
    lines = ["# Parameters: papermill injects values after this cell; None takes the preset's value.",
             "# Each setting is declared once, in pe_kit.settings (type, range, meaning; --set <name>=…).",
             'output_dir = None  # None: results/interactive at the repository root', 'preset = "quick"  # tiny, quick '
             'or paper', "seed = 0"]
    groups = [(sec, [k for k in NOTEBOOK_READS[stem] if _SHARED[k] == sec]) for sec in SECTIONS]
    for title, names in groups + [(f"notebook {stem[:2]}", list(NOTEBOOK_SECTIONS[stem].specs()))]:
        if names:
            lines.append(f"# {title}")
            lines += [f"{k} = None  # {_FIELDS[k].metadata['doc']}: {PARAM_TYPES[k].describe()}" for k in names]
    return "\n".join(lines)


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``key=value`` (JSON, else a comma list for ``a,b``, else a string) into (canonical key, value checked by
    :func:`check_param`). Raises ValueError: no ``=``, a key not in the tree, or a bad value."""
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
    """Relative file paths of ``data`` / ``bank`` / ``banks`` made absolute (notebooks run in the run folder);
    ``file:<path>`` keeps its prefix."""
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
