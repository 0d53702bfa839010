"""Stage 3 — the PE mechanism: top-k routing, vote normalisation, clipping, Poisson release; the multi-round loop.

Modules: ``mechanism`` (Eq. 1, Alg. A.1 lines 8–20), ``multiround`` (Alg. A.1 lines 5–27, checkpoints).
"""
