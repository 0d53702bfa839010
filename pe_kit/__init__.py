"""pe_kit: audit the user-level differential privacy of Private Evolution (PE).

Spec: "Canaries in the Bank: Auditing User-Level Privacy in Private Evolution". The public face (this module, the
facade) is a handful of calls, each returning a frozen ``Audit`` with the fields of a results-CSV row::

    import pe_kit as pk
    r = pk.audit_scores(in_scores, out_scores, delta=1e-5, alpha=0.05)         # scores you already have
    r = pk.audit_one_run(scores, included, delta=1e-5, sample_rate=0.05)      # one release, m canaries
    r = pk.audit_mechanism("my.jsonl", variant="nonce", mechanism=pk.MechanismConfig(noise_multiplier=0.8))
    b = pk.audit_release(my_release_fn, "my.jsonl", variant="nonce")           # your release function, a battery
    print(r.epsilon_lower, r.epsilon_theory, r.mu_eff)

Names load on first use (PEP 562), so ``import pe_kit`` imports nothing heavy. Below the facade, one subpackage per
stage of one audit, lower stages never importing higher ones (``docs/architecture.md``): ``settings`` / ``cache`` →
``data`` → ``text`` → ``pe`` → ``audit`` → ``attack`` → ``report`` → ``study`` → ``run``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

#: public name → the module that defines it
_EXPORTS = {
    "audit_scores": "pe_kit.audit.scores",
    "audit_one_run": "pe_kit.audit.scores",
    "audit_mechanism": "pe_kit.study.mechanism_audit",
    "audit_release": "pe_kit.study.release_audit",
    "Audit": "pe_kit.audit.outcome",
    "MechanismConfig": "pe_kit.settings",
    "AuditConfig": "pe_kit.settings",
    "StudyConfig": "pe_kit.study.world",
    "epsilon_theory": "pe_kit.audit.accounting",
}

__all__ = [*_EXPORTS, "__version__"]

if TYPE_CHECKING:  # for type checkers and IDEs only; at run time the names load lazily
    from pe_kit.audit.accounting import epsilon_theory
    from pe_kit.audit.outcome import Audit
    from pe_kit.audit.scores import audit_one_run, audit_scores
    from pe_kit.settings import AuditConfig, MechanismConfig
    from pe_kit.study.mechanism_audit import audit_mechanism
    from pe_kit.study.release_audit import audit_release
    from pe_kit.study.world import StudyConfig


def __getattr__(name: str):
    """Load a public name from its module on first access."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pe_kit' has no attribute {name!r}; the public names are {sorted(__all__)}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
