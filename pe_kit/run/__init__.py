"""Stage 7 — runs: studies, the notebooks' steps, presets, the papermill runner and the ``pe-kit`` CLI.

Modules: ``study`` (a World and designs, end-to-end rows), ``experiments`` and ``checks`` (the notebooks'
steps), ``multiround_study`` (Fig. 2), ``implementation_audit`` (the seeded-bug suite, notebook 07), ``presets``,
``reproduce`` (papermill), ``cli``.
"""
