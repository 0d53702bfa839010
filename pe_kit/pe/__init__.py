"""Stage 3 — the PE mechanism: top-k routing, vote normalisation, clipping, Poisson release; the multi-round loop.

Modules: ``mechanism`` (Eq. 1, Alg. A.1 lines 8–20), ``multiround`` (Alg. A.1 lines 5–27, checkpoints),
``release_protocol`` (what a black-box audit calls: the reference release, a third-party adapter),
``mutants`` (seeded bugs, each with its derived verdict).
"""
