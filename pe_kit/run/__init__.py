"""Stage 8 — runs: presets, the papermill runner and the ``pe-kit`` CLI (the library they drive is ``pe_kit.study``).
Each module's docstring says its part.
"""
