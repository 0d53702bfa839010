"""pe_kit: audit the user-level differential privacy of Private Evolution (PE).

Spec: "Canaries in the Bank: Auditing User-Level Privacy in Private Evolution". Modules (one concept
each): ``config`` (settings), ``data`` (user-partitioned text), ``embedding`` (cached encoder),
``mechanism`` (Eq. 1, Alg. A.1), ``probes`` (Table 1, App. B), ``audit`` (Eqs. 2–5, App. E),
``selection`` (greedy forward selection, Alg. B.1), ``banks`` (candidate banks), ``generation``
(paraphrase / candidate generators), ``trials`` (membership trials), ``engine`` (streaming trials at
10⁹ scale), ``sweep`` (Dask sweeps), ``bounds`` (Clopper–Pearson, Eq. 28), ``accounting`` (ε_theory,
Opacus PRV), ``study`` (end-to-end rows), ``multiround`` / ``variation`` (Alg. A.1, Eq. 36),
``utility`` (MAUVE), ``plots`` / ``widgets`` (figures, explorers), ``reproduce`` / ``cli`` (papermill
runs), ``cache`` (content-addressed files).
"""
from .config import AuditConfig, MechanismConfig

__version__ = "0.1.0"
__all__ = ["AuditConfig", "MechanismConfig", "__version__"]
