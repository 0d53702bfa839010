"""Stage 3 — the PE mechanism: top-k routing, vote normalisation, clipping, Poisson release; the multi-round loop.

Modules: ``mechanism`` (Eq. 1, Alg. A.1 lines 8–20), ``multiround`` (Alg. A.1 lines 5–27, checkpoints),
``release_protocol`` (what a black-box audit calls: the reference release, a third-party adapter),
``mutants`` (seeded bugs, each with its derived verdict).
"""

from pe_kit.lazy import lazy_package

__getattr__, __dir__ = lazy_package(__name__, __file__)
