"""Text models: encoders, offline models, generators, candidate banks (App. C), PE variation (Alg. A.1 l. 23–24)."""

from pe_kit.lazy import lazy_package

__getattr__, __dir__ = lazy_package(__name__, __file__)
