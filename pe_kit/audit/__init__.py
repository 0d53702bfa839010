"""Stage 4 — audit statistics: moments and LLRs, bounds, trial engine, sweeps, accounting.

Modules: ``moments`` (Eqs. 2–4, 14, 15, 22, 31–35), ``trials``, ``samplers`` and ``engine`` (trials),
``expectations``, ``confusion`` and ``bounds`` (Eqs. 28–30), ``threshold_rules``, ``canary`` (§2.1 Steps 2–5),
``sweep``, ``composed`` and ``adaptive`` (Eq. 36), ``accounting`` (ε_theory), ``blackbox``, ``outcome`` (``Audit``),
``scores``, ``one_run``. It sits below ``attack`` (Eq. 6 is the audit's own μ_eff with Σ̂ of Eq. 35).
"""
