"""Stage 8 — runs: presets, the papermill runner and the ``pe-kit`` CLI (the library they drive is ``pe_kit.study``).

Modules: ``presets`` (instances of the settings tree), ``fit`` (fitting sizes to own data, size warnings),
``preflight`` (checks before any notebook runs), ``reproduce`` (papermill; ``execute``: one notebook on this
interpreter's kernel; ``markers``: the done-markers that let a rerun reuse a notebook; ``kernel``: its kernel and
client that never drop output messages), ``run_progress`` (the run's notebook i of n and ETA), ``cli``.
"""
