"""Stage 2 — text models: encoders, offline models, generators, candidate banks, PE variation.

Modules: ``encoder`` (sentence-transformers, content-keyed cache), ``models`` (offline model paths),
``generators`` (one module per backend, plus cache, prompts and pool builders), ``banks`` (bank A,
public, LLM banks, file banks), ``variation`` (PE variation generators, Alg. A.1 lines 23–24).
"""

from pe_kit.lazy import lazy_package

__getattr__, __dir__ = lazy_package(__name__, __file__)
