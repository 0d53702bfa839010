"""Stage 6 — reports: tidy rows and tables, figures, widgets, MAUVE.

Modules: ``results`` (tidy rows, step cache, tables), ``plots`` (figures), ``widgets`` (explorer),
``mauve`` (MAUVE utility, Fig. 2).
"""
