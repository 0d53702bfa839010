"""Stage 7 — studies: a World on real data and its designs, and the computations behind every notebook.

Modules: ``world`` (data → world → design → ε_lower rows), ``pools`` (paraphrase pools), ``setup`` (settings and
world from parameters), ``designs`` (02, 03), ``checks`` (01, 03), ``audits`` (04), ``ablations`` (05),
``multiround_study`` / ``multiround_setup`` (06, Fig. 2), ``implementation_audit`` (07), ``one_run`` (08),
``mechanism_audit`` (``pe_kit.audit_mechanism``), ``release_audit`` (``audit_release``).
"""
