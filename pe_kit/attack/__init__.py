"""Stage 5 — attack design: the eight variants and greedy probe selection.

Modules: ``variants`` (Table 1, App. B), ``selection`` (Alg. B.1, Eq. 6), ``bug_canaries`` (canaries designed
for implementation bugs).
"""

from pe_kit.lazy import lazy_package

__getattr__, __dir__ = lazy_package(__name__, __file__)
