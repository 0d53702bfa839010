"""Stage 6 — reports: ``results`` (tidy rows, step cache, results.md), ``tables``, ``plots`` (notebooks 01–05),
``extension_plots`` (06–08), ``widgets`` (explorer), ``mauve`` (Fig. 2), ``paper_compare`` (Tables 2 / 4).
"""
