"""pe_kit: audit the user-level differential privacy of Private Evolution (PE).

Spec: "Canaries in the Bank: Auditing User-Level Privacy in Private Evolution". One subpackage per stage
of one audit, lower stages never importing higher ones (``docs/architecture.md``; checked by
``tests/test_layout.py``):

``config`` / ``cache`` (settings, content-addressed files) → ``data`` (users, arms, splits) → ``text``
(encoders, generators, banks, variation) → ``pe`` (mechanism, multi-round loop, release protocol, mutants) →
``audit`` (moments, LLRs, bounds, trial engine, sweeps, accounting, black-box audits) → ``attack`` (variants,
greedy selection, bug canaries) → ``report``
(tidy rows, figures, widgets, MAUVE) → ``run`` (studies, notebooks' steps, presets, papermill, CLI).
"""
from .config import AuditConfig, MechanismConfig

__version__ = "0.1.0"
__all__ = ["AuditConfig", "MechanismConfig", "__version__"]
