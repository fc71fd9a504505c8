"""Collect distillation runs (``result.json`` records) into tables, paired t-tests and plots.

``python -m kdbench.report RESULTS_DIR --out DIR`` runs it (:mod:`kdbench.report.cli` documents the
files it writes). The modules: :mod:`~kdbench.report.load` (records and exclusions),
:mod:`~kdbench.report.frames` (runs as frames), :mod:`~kdbench.report.stats` (summary, paired
t-tests), :mod:`~kdbench.report.paired` (the tests' arithmetic), :mod:`~kdbench.report.tables`
(markdown, LaTeX), :mod:`~kdbench.report.significance` (significance.md),
:mod:`~kdbench.report.paper` (published numbers and the runs that stand for them),
:mod:`~kdbench.report.versus` (published vs measured tables), :mod:`~kdbench.report.claims` (the
paper's claims), :mod:`~kdbench.report.verdicts` (their verdicts), :mod:`~kdbench.report.claims_md`
(claims.md), :mod:`~kdbench.report.plots` with :mod:`~kdbench.report.panels`,
:mod:`~kdbench.report.heatmaps` and :mod:`~kdbench.report.figures`.
"""
