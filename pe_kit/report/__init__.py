"""Stage 6 — reports: tidy rows and tables, figures, widgets, MAUVE.

Modules: ``results`` (tidy rows, step cache, results.md), ``tables`` (ε_lower tables), ``plots`` (figures of
notebooks 01–05), ``extension_plots`` (notebooks 06–08's), ``widgets`` (explorer), ``mauve`` (MAUVE utility, Fig. 2),
``paper_compare`` (ε_lower beside the paper's Tables 2 / 4, the orderings).
"""

from pe_kit.lazy import lazy_package

__getattr__, __dir__ = lazy_package(__name__, __file__)
