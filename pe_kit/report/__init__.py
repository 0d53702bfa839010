"""Stage 6 — reports: ``results`` (tidy rows, step cache, results.md), ``tables``, ``widgets`` (explorer),
``mauve`` (Fig. 2), ``paper_compare`` (Tables 2 / 4).
"""
