"""Stage 7 — studies: a World on real data and its designs, and the set-up and calls the notebooks build on.

Modules: ``world`` (data → world → design → ε_lower rows), ``pools`` (paraphrase pools), ``setup`` (settings and
world from parameters), ``mechanism_audit`` (``pe_kit.audit_mechanism``),
``release_audit`` (``audit_release``). The other notebooks' steps live in ``notebooks/steps``.
"""
