"""Attack design: the variants (Table 1, App. B), greedy probe selection (Alg. B.1, Eq. 6), bug canaries."""

from pe_kit.lazy import lazy_package

__getattr__, __dir__ = lazy_package(__name__, __file__)
