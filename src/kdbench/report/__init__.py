"""Collect distillation runs (``result.json`` records) into tables, paired t-tests and plots.

``python -m kdbench.report RESULTS_DIR --out DIR`` runs it (:mod:`kdbench.report.cli` documents the files it
writes). The modules: :mod:`~kdbench.report.load` (records and exclusions), :mod:`~kdbench.report.stats`
(frames, summary, paired t-tests), :mod:`~kdbench.report.tables` (markdown, LaTeX, significance),
:mod:`~kdbench.report.paper` (published numbers and the runs that stand for them), :mod:`~kdbench.report.versus`
(published vs measured tables), :mod:`~kdbench.report.plots`.
"""
