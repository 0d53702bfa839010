"""Stage 4 — audit statistics: moments and LLRs, bounds, trial engine, sweeps, accounting.

Modules: ``moments`` (Eqs. 2–4, 14, 15, 22, 31–35), ``trials`` (scalar problems, E.1), ``samplers`` and
``engine`` (streaming trials), ``expectations`` (expected ε_lower), ``confusion`` (Eqs. 28–30 on counts),
``threshold_rules`` (how calibration freezes the threshold), ``bounds`` (calibrate and evaluate),
``canary`` (one canary end to end, §2.1 Steps 2–5), ``sweep`` (sweep tasks, tightness curve),
``composed`` (multi-round audit, Eq. 36), ``accounting`` (ε_theory and the attack ceiling, Opacus PRV),
``blackbox`` (audits of a release implementation through its own function), ``outcome`` (``Audit``, the one
result type of every audit), ``scores`` (``audit_scores`` / ``audit_one_run``: scores a user already has).
It sits below ``attack``: the attack objective of Eq. 6 is the audit's own μ_eff with Σ̂ of Eq. 35.
"""
