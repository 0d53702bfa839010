"""Stage 7 — studies: a World on real data and its designs, and the computations behind every notebook.

Modules: ``world`` (``StudyConfig``, ``World``, ``build_world``, ``make_design``, ``audit_design``: data → world →
design → ε_lower rows), ``pools`` (a canary's paraphrase pool), the notebooks' steps: ``setup`` (settings and world
from a notebook's parameters), ``designs`` (02, 03), ``checks`` (01, 03), ``audits`` (04), ``ablations`` (05),
``multiround_study`` (Fig. 2), ``multiround_setup`` (notebook 06's world, mechanism, design and generator), ``implementation_audit`` (the
seeded-bug suite, notebook 07), ``one_run`` (notebook 08), ``mechanism_audit`` (``pe_kit.audit_mechanism``: the kit's
PE on a corpus in one call), ``release_audit`` (``audit_release``: a release implementation on real text with a
design battery).
It sits above ``report`` (rows carry its versions and step cache) and below ``run`` (presets, papermill, CLI).
"""

from pe_kit.lazy import lazy_package

__getattr__, __dir__ = lazy_package(__name__, __file__)
