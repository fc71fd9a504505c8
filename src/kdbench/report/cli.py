"""Collect distillation runs into tables, paired t-tests and plots.

Usage::

    python -m kdbench.report RESULTS_DIR [--out DIR] [--digits N] [--alpha A] [--no-plots] [--paper]

Every ``result.json`` under RESULTS_DIR (any depth) is read (in the sweep dir of a
``kdbench.study``, those of its jobs: :mod:`kdbench.report.jobs`); RESULTS_DIR may also be a
``.jsonl`` file of records, one result.json per line (``runs.jsonl``, as committed reports keep
them; the page links to its lines). Only ``status: completed`` records enter the tables and tests;
failed/running records and malformed files are listed (with their path and the reason) on stdout,
in ``excluded.csv`` and at the end of ``tables.md``. Written to DIR (default
``RESULTS_DIR/report``, or ``report`` beside a ``.jsonl`` file):

``results.csv``
    one row per completed run: key columns, ``score``, one column per metric (nested metric dicts
    are flattened with ``.``; a metric whose name clashes with a key column gets a ``metric_``
    prefix), ``grid`` (the fine-tuning grid point, if any), ``score_metric`` (the metric ``score``
    is), ``teacher_score`` (the fine-tuned teacher's score on it, empty when the record has none),
    ``path``, ``commit`` (the code: git commit, ``+dirty`` when the checkout had changes, else the
    kdbench version), ``paper_table`` / ``paper_init`` / ``paper_note`` (the paper design a scaled
    replica stands for, from its config's ``paper_analogue``), and the measured cost's columns
    (``student_params``, ``teacher_latency_ms``, ...).
``cost.csv``
    (when a run measured its cost) per (task, teacher, student, objective, init) with a measured
    cost (``kdbench.measure.cost``): the score's mean, std and n over seeds, both models'
    parameters, FLOPs per example, latency (batch 1) and throughput (batch 32), the student's
    speed-ups over its teacher; shown as the Cost section of ``tables.md`` and, per task, in
    ``cost_<task>.png`` (score against latency, seeds as error bars, the teacher as a star).
``summary.csv``
    long form: setting, teacher, student, objective, init, task, mean, std, n. ``std`` is the sample
    std (ddof=1), empty for n=1. Rows with ``task == "Avg"`` hold the mean of the per-task means of
    a row that has every task of its table (std and n empty).
``tables.md`` / ``tables.tex``
    one table per (setting, teacher, student). Rows are objectives, or (objective, init) when the
    init varies within the table. Cells are ``mean ± std`` (just the mean when n=1), Avg is the mean
    of the per-task means. The best displayed mean per column is bold (all tied rows; no bold when a
    column has fewer than two values). The footnote reads ``n = 4 seeds per cell``, or when n
    varies ``unless marked (n=k)``; then what each cell of a study's or sweep's design lacks of its
    seeds and why (missing / killed / failed); a cell without a completed run shows ``—``, a group
    without one is a table of them. ``tables.tex``: ``table`` environments (booktabs).
``pvalues.csv``
    paired t-tests (``scipy.stats.ttest_rel``, runs paired by seed; for the pooled task ``ALL`` by
    (task, seed)). Factor ``objective`` compares every pair of objectives at a fixed init, factor
    ``init`` every pair of inits at a fixed objective. Per task only the levels with runs on that
    task are compared; for ``ALL`` every level of the (group, factor, fixed) slice is. ``p_holm`` is
    Holm-Bonferroni within the family (setting, teacher, student, factor, fixed, task).
``unmatched.csv``
    every (task, seed) run one side of a compared pair has and the other lacks (``missing_side``
    names the side without it), once per pair, with the real task (for both per-task and pooled).
``significance.md``
    per family, the pairs that are not significant at ``alpha`` after Holm, the untestable pairs,
    and the Holm-adjusted p-value matrix for task ALL.
``evidence.md`` / ``evidence.csv``
    example-level tests beside the per-task t-tests, collapse rates (``kdbench.report.evidence``).
``claims.md``
    the paper's conclusions (``kdbench.report.claims.CLAIMS``), each judged from the runs that stand
    for its table: ``supported`` / ``contradicted`` / ``inconclusive`` / ``not covered``, with the
    means, n and Holm-adjusted p of the pooled paired tests it rests on, the missing runs by name,
    how to read a verdict and when not to trust one.
``scores_<group>.png``
    one panel per task: every seed's score (a cross: a collapsed run), the cell's mean and its 95% t
    interval, the paper's value where a published cell stands for it, objectives grouped by family
    (vanilla, hidden, attention), one colour per objective (or per init, when the init varies) fixed
    across every report (``figures.OBJECTIVE_COLOURS`` / ``INIT_COLOURS``). Lines: the fine-tuned
    teacher's mean score (from the records) and the dev set's majority-class score
    (``kdbench.tasks.MAJORITY``), written at the axis' edge when off it. A star marks a cell
    significantly below the best of its group (per-task paired test, Holm).
``differences_<group>.png``
    the task-ALL mean paired differences row - column of every family of the group, one matrix each,
    on one symmetric colour scale; significant cells (Holm) starred and framed.
``report.html``
    the report as one self-contained page (styles and plots inline, no script, nothing fetched): the
    findings first (its first heading), then the claims' verdicts, then per (setting, teacher,
    student) its design and code, the measured table with links from every cell to its records
    (result.json or a line of runs.jsonl, relative paths), its cost, the published numbers beside it
    (``--paper``), its captioned plots and significance tables, then the evidence per claim,
    evidence.md and the excluded runs. Opens from the file system.
``excluded.csv``
    path, kind (failed / running / killed / other status / skipped / distillation / grid /
    incomplete_grid / duplicate / config_mismatch / not_in_study / missing), reason and key fields
    the file had. ``config_mismatch``: a run whose config differs from its cell's other runs in
    more than ``record.NOT_DESIGN``; the cell keeps its most common design, the reason names the
    keys. ``distillation``: a task-agnostic distillation (its fine-tuning runs carry the scores).
    ``grid``: a fine-tuning grid point that lost to its grid's best point on its task, the one
    used; ``incomplete_grid``: a point of a grid lacking a point (no best point until a re-run
    completes it: the cell lacks that seed). ``not_in_study``: a record of none of a study's jobs;
    ``missing``: a job of a study or sweep without one (its key: a record of its cell's, a grid
    point's seed its distillation's); ``killed``: a dead run (``jobs``).
``paper.csv`` (only with ``--paper``)
    every published cell of Wang et al. (2023), Tables 1-4 (the package data
    ``kdbench/paper/wang2023_tables.csv``), long form in kdbench's names: table, setting, teacher,
    student, objective, init, task, metric (the paper's column label), measured_metric (the record
    metric it is compared with), mean, std, n_runs, avg_flag (on Avg cells: the printed Avg is not
    the mean of the row's cells up to rounding), and, where runs stand for the cell,
    measured_setting/teacher/student, measured_mean, measured_std, measured_n (one row per measured
    group). Runs stand for a paper table when their config's ``paper_analogue`` declares it (and
    maps their init to the paper's) or when they are the paper's own design (setting, teacher,
    student); no analogy is guessed. With ``--paper``, ``tables.md`` also gets, after the measured
    tables, a "Table k: published vs measured" section per paper table with matching runs: per
    published row (objective, paper init) and task the published ``mean ± std`` and the measured
    ``mean ± std (n)``, then the published Avg as printed (flagged ones marked) and the measured Avg
    (only for rows measured on all seven tasks). Measured values are the metric the paper reports:
    in Tables 1 and 3 its CoLA "Mcc" and MRPC "F1" columns are accuracy (footnoted with the
    reasons), in Tables 2 and 4 they are as labelled; MNLI is matched accuracy. A line names the
    runs that stand for no paper table.

Conventions:

* A pair with fewer than 2 matched seeds is reported with ``n_pairs`` (and the means over the
  matches, if any) and empty ``t``/``p``/``p_holm``.
* Zero variance of the differences: all-zero differences make scipy return NaN t and p; they are
  reported empty and are *not* counted in the Holm family size m (they are untestable, not tests
  that failed). A constant non-zero difference makes scipy return t = ±inf and p = 0; that is kept
  as scipy gives it and counts in the family.
* Two completed records with the same (setting, teacher, student, task, objective, init, seed) are
  duplicates: the first by path is used, the others are listed in ``excluded.csv`` as ``duplicate``.
* ``schema`` may be absent (taken as 1); any other schema value makes the file skipped.
* Scores are "higher is better" for every GLUE metric, so best = largest mean.
* No completed run at all (only failed/running/malformed files): the exclusions are listed and
  written, then the CLI exits 2 like for an empty directory.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import pandas as pd

from kdbench.errors import ReportError
from kdbench.records.record import RESULT_FILE
from kdbench.report.claims_md import claims_text
from kdbench.report.cost import cost_markdown, cost_table, plot_cost
from kdbench.report.evidence import write_evidence
from kdbench.report.frames import (
    EXCLUDED_COLS,
    IN_MEMORY_COLS,
    code_versions,
    drop_duplicates,
    split_designs,
    to_frame,
)
from kdbench.report.grids import best_of_grid
from kdbench.report.load import Loaded, load_records
from kdbench.report.page import PAGE_FILE, PageParts, render_page
from kdbench.report.paper import PAPER_CITE, comparison, load_paper
from kdbench.report.plots import write_plots
from kdbench.report.significance import render_significance
from kdbench.report.stats import paired_tests, summarise, unmatched_runs
from kdbench.report.tables import build_tables, render_latex, render_markdown
from kdbench.report.versus import render_versus, versus_sections
from kdbench.report.walltime import walltime_lines
from kdbench.runtime.storage import atomic_write_text, folder_problem

PROG = "kdbench.report"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description="Collect result.json files into tables (md/tex/csv), paired t-tests and plots.",
    )
    parser.add_argument(
        "results_dir", type=Path, help="directory searched (any depth) for result.json files"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="output directory (default: RESULTS_DIR/report)"
    )
    parser.add_argument(
        "--digits", type=int, default=1, help="decimals shown in the tables (default 1)"
    )
    parser.add_argument(
        "--alpha", type=float, default=0.05, help="significance level after Holm (default 0.05)"
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument(
        "--paper",
        action="store_true",
        help=(
            f"show the published numbers ({PAPER_CITE}) beside the measured tables; write paper.csv"
        ),
    )
    return parser


def study_name(source: Path) -> str:
    """The study's name: its folder's, or for a ``runs.jsonl`` file the folder holding it."""
    return source.resolve().parent.name if source.is_file() else source.resolve().name


def source_root(source: Path) -> Path:
    """What records' paths are relative to: the results folder, or the folder of a ``.jsonl``
    file."""
    return source.parent if source.is_file() else source


def _fail(message: str):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _or_fail(read):
    """``read()``, or the CLI's error exit with its :class:`ReportError` message."""
    try:
        return read()
    except ReportError as exc:
        _fail(str(exc))


def _print_exclusions(excluded: list[dict], limit: int = 20) -> None:
    for row in excluded[:limit]:
        print(f"  {row['kind']:<9} {row['path']}: {row['reason']}")
    if len(excluded) > limit:
        print(f"  ... and {len(excluded) - limit} more (see excluded.csv)")


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    atomic_write_text(path, frame.to_csv(index=False))


def _write_text(path: Path, text: str) -> None:
    atomic_write_text(path, text)


def _usable_runs(loaded: Loaded, results_dir: Path, out: Path) -> tuple[pd.DataFrame, list[dict]]:
    """The runs the tables use (best grid point, first of duplicates) and every exclusion, which are
    printed and written to ``excluded.csv``; exits 2 when no run is left."""
    frame, below_best = _or_fail(lambda: best_of_grid(to_frame(loaded.records), loaded.excluded))
    frame, duplicates = drop_duplicates(frame)
    frame, mismatched = _or_fail(lambda: split_designs(frame))
    excluded = loaded.excluded + below_best + duplicates + mismatched
    kinds = Counter(row["kind"] for row in excluded)
    kind_text = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
    print(
        f"{PROG}: read {loaded.n_files} {RESULT_FILE} file(s) under {results_dir}: "
        f"{len(loaded.records)} completed" + (f", {kind_text}" if kind_text else "")
    )
    _print_exclusions(excluded)
    _write_csv(pd.DataFrame(excluded, columns=EXCLUDED_COLS), out / "excluded.csv")
    if frame.empty:
        _fail(
            f"no completed run among {loaded.n_files} {RESULT_FILE} file(s) under {results_dir} "
            f"(listed above and in {out / 'excluded.csv'}); wait for runs to finish or fix the "
            "failures"
        )
    return frame, excluded


def _write_cost(frame: pd.DataFrame, args: argparse.Namespace, out: Path) -> list[str]:
    """cost.csv and its plot when the runs measured their cost; the lines tables.md shows."""
    cost = cost_table(frame)
    if cost.empty:
        (out / "cost.csv").unlink(missing_ok=True)  # an earlier report's, in a reused folder
    else:
        _write_csv(cost, out / "cost.csv")
    return cost_markdown(cost, args.digits, [] if args.no_plots else plot_cost(cost, out))


def _write_report(
    frame: pd.DataFrame,
    excluded: list[dict],
    paper: pd.DataFrame | None,
    args: argparse.Namespace,
    out: Path,
) -> tuple[PageParts, int]:
    """Write the csv, markdown and LaTeX files; returns what the page shows and the number of
    unmatched runs."""
    summary = summarise(frame)
    tables = build_tables(summary, frame, excluded)
    pvalues = paired_tests(frame, args.alpha)
    unmatched = unmatched_runs(frame)
    _write_csv(frame.drop(columns=IN_MEMORY_COLS), out / "results.csv")
    _write_csv(summary, out / "summary.csv")
    _write_csv(pvalues, out / "pvalues.csv")
    _write_csv(unmatched, out / "unmatched.csv")
    versus = None if paper is None else render_versus(frame, paper, args.digits)
    walltimes = {table.key: walltime_lines(frame, table.key) for table in tables}
    cost_lines = _write_cost(frame, args, out)
    markdown = render_markdown(
        tables, args.digits, excluded, versus, code_versions(frame), walltimes, cost_lines
    )
    _write_text(out / "tables.md", markdown)
    if paper is not None:
        _write_csv(comparison(frame, paper), out / "paper.csv")
    _write_text(out / "tables.tex", render_latex(tables, args.digits))
    _write_text(out / "significance.md", render_significance(pvalues, args.alpha, args.digits))
    evidence = write_evidence(frame, source_root(args.results_dir), out, args.alpha, args.digits)
    claims = claims_text(frame, args.alpha, args.digits, pvalues, study_name(args.results_dir))
    _write_text(out / "claims.md", claims.markdown())
    sections = [] if paper is None else versus_sections(frame, paper, args.digits)
    page = PageParts(
        source_root(args.results_dir),
        out,
        frame,
        tables,
        pvalues,
        claims,
        sections,
        excluded,
        {},
        args.alpha,
        args.digits,
        study_name(args.results_dir),
        walltimes,
        evidence,
    )
    return page, len(unmatched)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.digits < 0:
        _fail(f"--digits must be >= 0, got {args.digits}")
    if not 0 < args.alpha < 1:
        _fail(f"--alpha must be between 0 and 1, got {args.alpha}")
    results_dir: Path = args.results_dir
    out: Path = args.out if args.out is not None else source_root(results_dir) / "report"
    loaded = _or_fail(lambda: load_records(results_dir, skip=out))
    paper = _or_fail(load_paper) if args.paper else None
    problem = folder_problem(out.absolute())
    if problem is not None:
        _fail(f"--out {out} {problem}; pass a folder this user can write")
    out.mkdir(parents=True, exist_ok=True)

    frame, excluded = _usable_runs(loaded, results_dir, out)
    page, n_unmatched = _write_report(frame, excluded, paper, args, out)
    if not args.no_plots:
        page.plots = write_plots(page.tables, page.pvalues, frame, out, args.alpha, paper)
    _write_text(out / PAGE_FILE, render_page(page))

    pvalues = page.pvalues
    n_sig = int((pvalues["p_holm"] < args.alpha).sum()) if not pvalues.empty else 0
    print(
        f"{PROG}: wrote {len(page.tables)} table(s) to {out}/tables.md and tables.tex; "
        f"{len(pvalues)} paired test(s) ({n_sig} significant at {args.alpha} after Holm) to "
        "pvalues.csv; "
        f"{n_unmatched} unmatched run(s); {sum(len(p) for p in page.plots.values())} plot(s); the "
        f"page {PAGE_FILE}"
    )
    print(
        f"{PROG}: files: results.csv summary.csv"
        + (" cost.csv" if (out / "cost.csv").exists() else "")
        + " tables.md tables.tex pvalues.csv unmatched.csv "
        f"significance.md evidence.md evidence.csv claims.md excluded.csv {PAGE_FILE}"
        + (" paper.csv" if paper is not None else "")
    )
    return 0
