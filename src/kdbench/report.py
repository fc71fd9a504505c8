"""Collect distillation runs into tables, paired t-tests and plots.

Usage::

    python -m kdbench.report RESULTS_DIR [--out DIR] [--digits N] [--alpha A] [--no-plots] [--paper]

Every ``result.json`` under RESULTS_DIR (any depth) is read. Only ``status: completed`` records enter the
tables and tests; failed/running records and malformed files are listed (with their path and the reason) on
stdout, in ``excluded.csv`` and at the end of ``tables.md``. Written to DIR (default ``RESULTS_DIR/report``):

``results.csv``
    one row per completed run: key columns, ``score``, one column per metric (nested metric dicts are
    flattened with ``.``; a metric whose name clashes with a key column gets a ``metric_`` prefix), ``grid``
    (the fine-tuning grid point, if any), ``path``.
``summary.csv``
    long form: setting, teacher, student, objective, init, task, mean, std, n. ``std`` is the sample std
    (ddof=1), empty for n=1. Rows with ``task == "Avg"`` hold the mean of the per-task means of a row that has
    every task of its table (std and n empty).
``tables.md`` / ``tables.tex``
    one table per (setting, teacher, student). Rows are objectives, or (objective, init) when the init varies
    within the table. Cells are ``mean ± std`` (just the mean when n=1), Avg is the mean of the per-task
    means. The best displayed mean per column is bold (all tied rows; no bold when a column has fewer than
    two values). When n is the same in every cell the footnote reads ``n = 4 seeds per cell``; otherwise
    cells whose n differs from the most common n carry ``(n=k)`` and the footnote says so.
    ``tables.tex`` is a fragment of ``table`` environments that needs ``\\usepackage{booktabs}``.
``pvalues.csv``
    paired t-tests (``scipy.stats.ttest_rel``, runs paired by seed; for the pooled task ``ALL`` by
    (task, seed)). Factor ``objective`` compares every pair of objectives at a fixed init, factor ``init``
    every pair of inits at a fixed objective. Per task only the levels with runs on that task are compared;
    for ``ALL`` every level of the (group, factor, fixed) slice is. ``p_holm`` is Holm-Bonferroni within
    the family (setting, teacher, student, factor, fixed, task).
``unmatched.csv``
    every (task, seed) run that one side of a compared pair has and the other lacks (``missing_side`` names
    the side without it). Listed once per pair, with the real task (this covers both the per-task and the
    pooled tests).
``significance.md``
    per family, the pairs that are not significant at ``alpha`` after Holm, the untestable pairs, and the
    Holm-adjusted p-value matrix for task ALL.
``scores_<group>.png`` / ``pvalues_<group>_<factor>_<fixed>.png``
    grouped bar chart of mean score (std error bars) and heat map of the task-ALL Holm p-values.
``excluded.csv``
    path, kind (failed / running / other status / skipped / distillation / grid / duplicate), reason and
    whatever key fields the file had. ``distillation``: a task-agnostic distillation record (no task; its
    GLUE fine-tuning runs carry the scores). ``grid``: a fine-tuning grid point (record with a ``grid``
    dict) that lost to the best point of the same run key, which is the one used.
``paper.csv`` (only with ``--paper``)
    the published numbers of Wang et al. (2023), long form: table, objective, init, task, score. With
    ``--paper``, ``tables.md`` also shows, after each measured table, the paper's tables of the same setting
    (task_specific: Tables 1 and 3, task_agnostic: Tables 2 and 4), restricted to the measured objectives and
    tasks (the whole paper table when none match), with the paper's teacher and student named. The numbers
    live in ``kdbench/paper/wang2023.json``.

Decisions where the brief was silent:

* A pair with fewer than 2 matched seeds is reported with ``n_pairs`` (and the means over the matches, if
  any) and empty ``t``/``p``/``p_holm``.
* Zero variance of the differences: all-zero differences make scipy return NaN t and p; they are reported
  empty and are *not* counted in the Holm family size m (they are untestable, not tests that failed). A
  constant non-zero difference makes scipy return t = ±inf and p = 0; that is kept as scipy gives it and
  counts in the family.
* Two completed records with the same (setting, teacher, student, task, objective, init, seed) are
  duplicates: the first by path is used, the others are listed in ``excluded.csv`` as ``duplicate``.
* ``schema`` may be absent (taken as 1); any other schema value makes the file skipped.
* Scores are "higher is better" for every GLUE metric, so best = largest mean.
* No completed run at all (only failed/running/malformed files): the exclusions are listed and written, then
  the CLI exits 2 like for an empty directory.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import sys
import warnings
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from scipy import stats

PROG = "kdbench.report"
RESULT_FILE = "result.json"
SCHEMA = 1

GROUP_COLS = ["setting", "teacher", "student"]
KEY_COLS = ["setting", "teacher", "student", "task", "objective", "init", "seed"]
ROW_COLS = ["objective", "init"]
REQUIRED_KEYS = (
    "status",
    "setting",
    "task",
    "teacher",
    "student",
    "init",
    "objective",
    "seed",
    "score",
    "metrics",
)
SUMMARY_COLS = GROUP_COLS + ROW_COLS + ["task", "mean", "std", "n"]
PVALUE_COLS = GROUP_COLS + [
    "factor",
    "fixed",
    "task",
    "a",
    "b",
    "n_pairs",
    "mean_a",
    "mean_b",
    "t",
    "p",
    "p_holm",
]
FAMILY_COLS = GROUP_COLS + ["factor", "fixed", "task"]
UNMATCHED_COLS = GROUP_COLS + ["factor", "fixed", "task", "a", "b", "missing_side", "seed"]
EXCLUDED_COLS = [
    "path",
    "kind",
    "reason",
    "setting",
    "teacher",
    "student",
    "task",
    "objective",
    "init",
    "seed",
]

TASK_ORDER = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]
TASK_LABELS = {
    "cola": "CoLA",
    "sst2": "SST-2",
    "mrpc": "MRPC",
    "stsb": "STS-B",
    "qqp": "QQP",
    "mnli": "MNLI",
    "qnli": "QNLI",
    "rte": "RTE",
}
AVG = "Avg"
ALL = "ALL"
FACTORS = (("objective", "init"), ("init", "objective"))  # (compared factor, held column)


class ReportError(Exception):
    """Unusable input: the CLI prints ``kdbench.report: error: <message>`` and exits 2."""


# --------------------------------------------------------------------------------------------------- loading


@dataclass
class Loaded:
    """What :func:`load_records` found: completed records, exclusions, and how many files were read."""

    records: list[dict]
    excluded: list[dict]
    n_files: int


def find_result_files(results_dir: Path, skip: Path | None = None) -> list[Path]:
    """All ``result.json`` files under ``results_dir`` (sorted), ignoring anything under ``skip``."""
    files = []
    for path in sorted(results_dir.rglob(RESULT_FILE)):
        if not path.is_file():
            continue
        if skip is not None and path.resolve().is_relative_to(skip.resolve()):
            continue
        files.append(path)
    return files


def _text(value) -> str | None:
    """A key field as a non-empty string (lists such as ``[4, 8, 12]`` become ``"4,8,12"``)."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        value = ",".join(str(v) for v in value)
    text = str(value).strip()
    return text or None


def _as_int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return int(value)
    return None


def _as_float(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _flatten(metrics: dict, prefix: str = "") -> dict:
    """Nested metric dicts flattened to ``outer.inner`` names."""
    flat = {}
    for name, value in metrics.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            flat.update(_flatten(value, prefix=f"{key}."))
        else:
            flat[key] = value
    return flat


def _last_line(text: str, limit: int = 300) -> str:
    """The most informative single line of an error message (the last non-empty one of a traceback)."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _exclusion(path: str, kind: str, reason: str, data: dict | None = None) -> dict:
    row = {"path": path, "kind": kind, "reason": reason}
    for key in EXCLUDED_COLS[3:]:
        row[key] = _text(data.get(key)) if isinstance(data, dict) else None
    return row


def parse_record(path: Path, root: Path) -> tuple[dict | None, dict | None]:
    """One ``result.json`` -> (record, None) when completed and well formed, else (None, exclusion)."""
    rel = _relative(path, root)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        return None, _exclusion(rel, "skipped", f"invalid JSON: {exc}")
    except (OSError, UnicodeDecodeError) as exc:
        return None, _exclusion(rel, "skipped", f"unreadable: {exc}")
    if not isinstance(data, dict):
        return None, _exclusion(rel, "skipped", "top level is not a JSON object")
    if data.get("schema", SCHEMA) != SCHEMA:
        return None, _exclusion(
            rel, "skipped", f"unsupported schema {data.get('schema')!r} (expected {SCHEMA})", data
        )
    status = _text(data.get("status"))
    if status is None:
        return None, _exclusion(rel, "skipped", "missing key 'status'", data)
    if status != "completed":
        reason = _last_line(data["error"]) if data.get("error") else f"status {status!r}"
        return None, _exclusion(rel, status, reason, data)
    if data.get("setting") == "task_agnostic" and data.get("task") is None:
        metrics = data.get("metrics")
        loss = metrics.get("heldout_loss") if isinstance(metrics, dict) else None
        return None, _exclusion(rel, "distillation", f"task-agnostic distillation (held-out loss {loss}); "
                                "its GLUE fine-tuning runs carry the scores", data)
    missing = [key for key in REQUIRED_KEYS if data.get(key) is None or _text(data.get(key)) is None]
    if missing:
        return None, _exclusion(rel, "skipped", "missing key(s): " + ", ".join(missing), data)
    seed = _as_int(data["seed"])
    if seed is None:
        return None, _exclusion(rel, "skipped", f"seed {data['seed']!r} is not an integer", data)
    score = _as_float(data["score"])
    if score is None:
        return None, _exclusion(rel, "skipped", f"score {data['score']!r} is not a finite number", data)
    if not isinstance(data["metrics"], dict):
        return None, _exclusion(rel, "skipped", "metrics is not a JSON object", data)
    record = {key: _text(data[key]) for key in KEY_COLS if key != "seed"}
    grid = data.get("grid")
    grid = ",".join(f"{k}={v}" for k, v in grid.items()) if isinstance(grid, dict) else None
    record.update(seed=seed, score=score, metrics=_flatten(data["metrics"]), path=rel, grid=grid)
    return record, None


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def load_records(results_dir: Path, skip: Path | None = None) -> Loaded:
    """Parse every ``result.json`` under ``results_dir``; raises :class:`ReportError` on unusable input."""
    if not results_dir.exists():
        raise ReportError(
            f"results directory {results_dir} does not exist; pass the directory your runs wrote to"
        )
    if not results_dir.is_dir():
        raise ReportError(f"{results_dir} is not a directory; pass the directory your runs wrote to")
    files = find_result_files(results_dir, skip=skip)
    if not files:
        raise ReportError(
            f"no {RESULT_FILE} found under {results_dir}; "
            "run some experiments first or point at the directory they wrote to"
        )
    records, excluded = [], []
    for path in files:
        record, exclusion = parse_record(path, results_dir)
        if record is not None:
            records.append(record)
        else:
            excluded.append(exclusion)
    return Loaded(records=records, excluded=excluded, n_files=len(files))


# ---------------------------------------------------------------------------------------------------- frames


def task_sort_key(task: str) -> tuple:
    """The paper's GLUE order first, then any other task alphabetically."""
    lower = str(task).lower()
    if lower in TASK_ORDER:
        return (0, TASK_ORDER.index(lower), "")
    return (1, 0, lower)


def natural_key(value) -> list:
    """Sort key that orders digit runs numerically: ``"4,8,12"`` before ``"10,11,12"``."""
    parts = re.split(r"(\d+)", str(value))
    return [(0, int(p), "") if p.isdigit() else (1, 0, p.lower()) for p in parts if p]


def ordered_tasks(tasks) -> list[str]:
    return sorted(set(tasks), key=task_sort_key)


def to_frame(records: list[dict]) -> pd.DataFrame:
    """One row per run: key columns, score, one column per metric, path (sorted by key)."""
    base = KEY_COLS + ["score", "grid"]
    metric_names: list[str] = []
    for record in records:
        for name in record["metrics"]:
            if name not in metric_names:
                metric_names.append(name)
    rename = {name: (f"metric_{name}" if name in base + ["path"] else name) for name in metric_names}
    rows = []
    for record in records:
        row = {key: record.get(key) for key in base}
        row.update({rename[name]: value for name, value in record["metrics"].items()})
        row["path"] = record["path"]
        rows.append(row)
    frame = pd.DataFrame(rows, columns=base + [rename[n] for n in metric_names] + ["path"])
    frame["seed"] = frame["seed"].astype("int64")
    frame["score"] = frame["score"].astype(float)
    return sort_frame(frame)


def sort_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Sort runs by group, task (paper order), objective, init (natural order), seed."""
    if frame.empty:
        return frame.reset_index(drop=True)
    keys = frame.apply(
        lambda r: (
            r["setting"],
            r["teacher"],
            r["student"],
            task_sort_key(r["task"]),
            natural_key(r["objective"]),
            natural_key(r["init"]),
            r["seed"],
        ),
        axis=1,
    )
    order = sorted(range(len(frame)), key=lambda i: keys.iloc[i])
    return frame.iloc[order].reset_index(drop=True)


def best_of_grid(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[dict]]:
    """Fine-tuning grids (the task-agnostic protocol): keep each run's best grid point by dev score.

    Runs that differ only in their grid point (lr, batch size) share a key; the best score is the run's
    result, as in the paper. The other grid points are listed as ``grid`` exclusions (not errors).
    """
    gridded = frame["grid"].notna()
    if not gridded.any():
        return frame, []
    ranked = frame[gridded].sort_values(["score", "path"], ascending=[False, True], kind="stable")
    below = ranked.duplicated(KEY_COLS, keep="first")
    best = ranked[~below].set_index(KEY_COLS)
    excluded = []
    for _, row in ranked[below].iterrows():
        winner = best.loc[tuple(row[KEY_COLS])]
        reason = (
            f"grid point {row['grid']} scored {row['score']:.2f}; "
            f"the best, {winner['grid']}, scored {winner['score']:.2f}"
        )
        excluded.append(_exclusion(row["path"], "grid", reason, {key: row[key] for key in KEY_COLS}))
    return sort_frame(pd.concat([frame[~gridded], ranked[~below]])), excluded


def drop_duplicates(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[dict]]:
    """Keep the first run (by path) per key; the rest become ``duplicate`` exclusions."""
    by_path = frame.sort_values("path", kind="stable")
    dup_mask = by_path.duplicated(KEY_COLS, keep="first")
    firsts = by_path[~dup_mask].set_index(KEY_COLS)["path"]
    excluded = []
    for _, row in by_path[dup_mask].iterrows():
        kept = firsts.loc[tuple(row[KEY_COLS])]
        data = {key: row[key] for key in KEY_COLS}
        excluded.append(_exclusion(row["path"], "duplicate", f"same run as {kept} (that one is used)", data))
    return sort_frame(by_path[~dup_mask]), excluded


def summarise(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (group, objective, init, task): mean, sample std (ddof=1, NaN for n=1), n; plus ``Avg`` rows.

    An ``Avg`` row is the mean over tasks of the per-task means, only for (objective, init) rows that have
    every task of their (setting, teacher, student) group.
    """
    if frame.empty:
        return pd.DataFrame(columns=SUMMARY_COLS)
    stats_ = (
        frame.groupby(GROUP_COLS + ROW_COLS + ["task"], sort=False)["score"]
        .agg(mean="mean", std=lambda s: s.std(ddof=1) if len(s) > 1 else np.nan, n="count")
        .reset_index()
    )
    averages = []
    for _, group in stats_.groupby(GROUP_COLS, sort=False):
        n_tasks = group["task"].nunique()
        for _, row in group.groupby(ROW_COLS, sort=False):
            if row["task"].nunique() == n_tasks:
                first = row.iloc[0]
                averages.append(
                    {**{c: first[c] for c in GROUP_COLS + ROW_COLS}, "task": AVG, "mean": row["mean"].mean()}
                )
    summary = pd.concat([stats_, pd.DataFrame(averages, columns=SUMMARY_COLS)], ignore_index=True)
    summary["n"] = summary["n"].astype("Int64")
    return _sort_summary(summary[SUMMARY_COLS])


def _sort_summary(summary: pd.DataFrame) -> pd.DataFrame:
    def key(i):
        r = summary.iloc[i]
        task = (2, 0, "") if r["task"] == AVG else task_sort_key(r["task"])
        return (
            r["setting"],
            r["teacher"],
            r["student"],
            natural_key(r["objective"]),
            natural_key(r["init"]),
            task,
        )

    order = sorted(range(len(summary)), key=key)
    return summary.iloc[order].reset_index(drop=True)


# ---------------------------------------------------------------------------------------------------- tables


@dataclass
class Table:
    """One (setting, teacher, student) table: rows (objective, init), columns tasks + Avg."""

    setting: str
    teacher: str
    student: str
    rows: list[tuple[str, str]]
    tasks: list[str]
    show_init: bool
    mean: pd.DataFrame  # index: rows, columns: tasks + [AVG]
    std: pd.DataFrame
    n: pd.DataFrame  # tasks only
    inits: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.setting, self.teacher, self.student)

    @property
    def columns(self) -> list[str]:
        return self.tasks + [AVG]

    @property
    def title(self) -> str:
        text = f"setting {self.setting}, teacher {self.teacher}, student {self.student}"
        if not self.show_init and self.inits:
            text += f", init {self.inits[0]}"
        return text

    def modal_n(self) -> int | None:
        counts = Counter(int(v) for v in self.n.to_numpy().ravel() if pd.notna(v) and v > 0)
        if not counts:
            return None
        top = max(counts.values())
        return max(n for n, c in counts.items() if c == top)

    def n_uniform(self) -> bool:
        values = {int(v) for v in self.n.to_numpy().ravel() if pd.notna(v) and v > 0}
        return len(values) <= 1


def build_tables(summary: pd.DataFrame) -> list[Table]:
    """Pivot the long summary into one :class:`Table` per (setting, teacher, student)."""
    tables = []
    if summary.empty:
        return tables
    for (setting, teacher, student), group in summary.groupby(GROUP_COLS, sort=True):
        per_task = group[group["task"] != AVG]
        tasks = ordered_tasks(per_task["task"])
        rows = sorted(
            {tuple(r) for r in per_task[ROW_COLS].itertuples(index=False, name=None)},
            key=lambda r: (natural_key(r[0]), natural_key(r[1])),
        )
        index = pd.MultiIndex.from_tuples(rows, names=ROW_COLS)
        columns = tasks + [AVG]

        def pivot(value, cols, grp=group, idx=index):
            wide = grp.pivot_table(
                index=ROW_COLS, columns="task", values=value, aggfunc="first", dropna=False
            )
            return wide.reindex(index=idx, columns=cols)

        inits = sorted(per_task["init"].unique(), key=natural_key)
        tables.append(
            Table(
                setting=setting,
                teacher=teacher,
                student=student,
                rows=rows,
                tasks=tasks,
                show_init=len(inits) > 1,
                mean=pivot("mean", columns).astype(float),
                std=pivot("std", columns).astype(float),
                n=pivot("n", tasks),
                inits=inits,
            )
        )
    return tables


def _fmt(value: float, digits: int) -> str:
    return f"{value:.{digits}f}"


def best_rows(table: Table, column: str, digits: int) -> set[tuple[str, str]]:
    """Rows whose displayed mean equals the column maximum; empty when the column has < 2 values."""
    col = table.mean[column].dropna()
    if len(col) < 2:
        return set()
    best = round(col.max(), digits)
    return {row for row, value in col.items() if round(value, digits) == best}


def _cell_parts(table: Table, row, column: str, digits: int) -> tuple[str, str | None, int | None] | None:
    """(mean text, std text or None, n to mark or None) for one cell, None when empty."""
    mean = table.mean.at[row, column]
    if pd.isna(mean):
        return None
    if column == AVG:
        return _fmt(mean, digits), None, None
    n = int(table.n.at[row, column])
    std = table.std.at[row, column]
    std_text = _fmt(std, digits) if n > 1 and pd.notna(std) else None
    mark = n if not table.n_uniform() and n != table.modal_n() else None
    return _fmt(mean, digits), std_text, mark


def _footnote(table: Table) -> str:
    modal = table.modal_n()
    if modal is None:
        return ""
    seeds = "seed" if modal == 1 else "seeds"
    if table.n_uniform():
        return f"n = {modal} {seeds} per cell"
    return f"n = {modal} {seeds} per cell unless marked (n=k)"


DESCRIPTION = (
    "Cells: mean ± sample std (ddof=1) over seeds; a single-seed cell shows the mean only. "
    "Avg: mean over tasks of the per-task means, only for rows that have every task of the table. "
    "Bold: best mean per column."
)


def _body(table: Table, digits: int, escape, *, pm: str, bold: str):
    """The table's rows as lists of cell strings: labels, then `mean pm std` per column, best in `bold`."""
    best = {c: best_rows(table, c, digits) for c in table.columns}
    for row in table.rows:
        cells = [escape(row[0])] + ([escape(row[1])] if table.show_init else [])
        for column in table.columns:
            parts = _cell_parts(table, row, column, digits)
            if parts is None:
                cells.append("")
                continue
            mean, std, mark = parts
            text = mean if std is None else f"{mean} {pm} {std}"
            if row in best[column]:
                text = bold.format(text)
            if mark is not None:
                text += f" (n={mark})"
            cells.append(text)
        yield cells


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|")


def render_markdown(
    tables: list[Table], digits: int = 1, excluded: list[dict] | None = None, paper: dict | None = None
) -> str:
    """All tables as GitHub markdown (each followed by the published ones when ``paper`` is given), then the
    list of excluded runs."""
    out = ["# kdbench results", "", DESCRIPTION, ""]
    for table in tables:
        out += [f"## {_md_escape(table.title)}", ""]
        head = (
            ["Objective"]
            + (["Init"] if table.show_init else [])
            + [TASK_LABELS.get(t, t) for t in table.columns]
        )
        align = ["---"] * (2 if table.show_init else 1) + ["---:"] * len(table.columns)
        out += ["| " + " | ".join(_md_escape(h) for h in head) + " |", "|" + "|".join(align) + "|"]
        for cells in _body(table, digits, _md_escape, pm="±", bold="**{}**"):
            out.append("| " + " | ".join(cells) + " |")
        note = _footnote(table)
        out += ["", f"_{note}._" if note else "", ""]
        if paper is not None:
            out += render_published(table, paper)
    if excluded:
        out += ["## Excluded runs", ""]
        for row in excluded:
            out.append(f"- `{row['path']}` ({row['kind']}): {_md_escape(row['reason'])}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


# ------------------------------------------------------------------------------------------ published numbers

PAPER_PACKAGE = "kdbench.paper"
PAPER_FILE = "wang2023.json"
PAPER_CITE = "Wang et al. 2023"
PAPER_COLS = ["table", "objective", "init", "task", "score"]


def load_paper() -> dict:
    """The published numbers shipped in ``kdbench/paper/wang2023.json`` (see its ``source`` and ``status``)."""
    where = f"{PAPER_PACKAGE.replace('.', '/')}/{PAPER_FILE}"
    try:
        paper = json.loads((resources.files(PAPER_PACKAGE) / PAPER_FILE).read_text(encoding="utf-8"))
    except (OSError, ModuleNotFoundError, json.JSONDecodeError) as exc:
        raise ReportError(f"cannot read the published numbers {where}: {exc}") from exc
    if not isinstance(paper, dict) or not isinstance(paper.get("tables"), dict):
        raise ReportError(f"{where} has no 'tables' object")
    return paper


def _paper_rows(spec: dict) -> list[dict]:
    """A paper table's rows, each with its init filled in from the table when the row has none."""
    return [{**row, "init": row.get("init") or spec.get("init")} for row in spec.get("rows") or []]


def paper_frame(paper: dict) -> pd.DataFrame:
    """Every published cell, long form: table, objective, init, task, score."""
    cells = [
        {"table": name, "objective": row["objective"], "init": row["init"], "task": task, "score": score}
        for name, spec in paper["tables"].items()
        for row in _paper_rows(spec)
        for task, score in row.get("scores", {}).items()
    ]
    return pd.DataFrame(cells, columns=PAPER_COLS)


def _paper_cell(row: dict, column: str) -> str:
    """A published value exactly as stored (``mean ± std`` when the paper prints a std)."""
    score = row.get("scores", {}).get(column)
    if score is None:
        return ""
    std = (row.get("std") or {}).get(column)
    return str(score) if std is None else f"{score} ± {std}"


def render_published(table: Table, paper: dict) -> list[str]:
    """Markdown lines: the paper tables of ``table``'s setting, restricted to its objectives and tasks."""
    out = []
    objectives = {row[0] for row in table.rows}
    for name, spec in paper["tables"].items():
        if spec.get("setting") != table.setting:
            continue
        number = re.sub(r"\D", "", name) or name
        out += [f"### Published ({PAPER_CITE}, Table {number})", ""]
        rows = _paper_rows(spec)
        if not rows:
            out += [f"_No published numbers recorded for this table in {PAPER_FILE} (see its `status`)._", ""]
            continue
        scored = {task for row in rows for task in row.get("scores", {})}
        columns = spec.get("columns") or ordered_tasks(scored - {AVG}) + ([AVG] if AVG in scored else [])
        shown_rows = [row for row in rows if row["objective"] in objectives] or rows
        tasks = [t for t in table.tasks if t in columns] or [c for c in columns if c != AVG]  # measured order
        shown_cols = tasks + ([AVG] if AVG in columns else [])
        inits = {row["init"] for row in shown_rows}
        show_init = len(inits) > 1
        head = ["Objective"] + (["Init"] if show_init else []) + [TASK_LABELS.get(c, c) for c in shown_cols]
        align = ["---"] * (2 if show_init else 1) + ["---:"] * len(shown_cols)
        out += ["| " + " | ".join(_md_escape(h) for h in head) + " |", "|" + "|".join(align) + "|"]
        for row in shown_rows:
            labels = [row["objective"]] + ([row["init"] or ""] if show_init else [])
            cells = [_md_escape(label) for label in labels] + [_paper_cell(row, c) for c in shown_cols]
            out.append("| " + " | ".join(cells) + " |")
        paper_init = "" if show_init or not inits - {None} else f", init {next(iter(inits))}"
        note = (
            f"Published numbers ({spec.get('title') or name}), copied from the paper, not measured here. "
            f"Paper: teacher {spec.get('teacher')}, student {spec.get('student')}{paper_init}; "
            f"this table: teacher {table.teacher}, student {table.student}. "
            "Models and training set-up may differ, so compare with care"
        )
        if len(shown_rows) < len(rows) or len(shown_cols) < len(columns):
            note += (
                f"; {len(shown_rows)} of {len(rows)} rows and {len(shown_cols)} of {len(columns)} "
                "columns shown (those of this table)"
            )
        if AVG in shown_cols:
            note += "; Avg as published (over all the paper's tasks)"
        out += ["", f"_{_md_escape(note)}._", ""]
    return out


_TEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def tex_escape(text) -> str:
    """Escape LaTeX special characters (``_``, ``%``, ``&`` and the rest) in a name."""
    return "".join(_TEX_SPECIAL.get(ch, ch) for ch in str(text))


def render_latex(tables: list[Table], digits: int = 1) -> str:
    """All tables as booktabs ``table`` environments (a fragment; needs ``\\usepackage{booktabs}``)."""
    out = ["% Generated by kdbench.report. Requires \\usepackage{booktabs}.", ""]
    for table in tables:
        n_label = 2 if table.show_init else 1
        spec = "l" * n_label + "r" * len(table.columns)
        head = (
            ["Objective"]
            + (["Init"] if table.show_init else [])
            + [TASK_LABELS.get(t, t) for t in table.columns]
        )
        note = _footnote(table)
        caption = f"{tex_escape(table.title)}. Mean $\\pm$ sample std over seeds"
        caption += f"; {tex_escape(note)}." if note else "."
        out += [
            "\\begin{table}[ht]",
            "\\centering",
            f"\\caption{{{caption}}}",
            f"\\begin{{tabular}}{{{spec}}}",
            "\\toprule",
            " & ".join(tex_escape(h) for h in head) + " \\\\",
            "\\midrule",
        ]
        for cells in _body(table, digits, tex_escape, pm="$\\pm$", bold="\\textbf{{{}}}"):
            out.append(" & ".join(cells) + " \\\\")
        out += ["\\bottomrule", "\\end{tabular}", "\\end{table}", ""]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------ statistics


def holm(pvalues) -> np.ndarray:
    """Holm-Bonferroni step-down adjustment.

    Sort the finite p ascending; ``adjusted_i = max_{j <= i} min(1, (m - j) * p_(j))`` (0-based j), mapped
    back to the input order. NaN p values (untestable pairs) stay NaN and do not count in m.
    """
    p = np.asarray(pvalues, dtype=float)
    adjusted = np.full(p.shape, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    m = len(valid)
    if m == 0:
        return adjusted
    order = valid[np.argsort(p[valid], kind="stable")]
    steps = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted[order] = np.maximum.accumulate(steps)
    return adjusted


def paired_ttest(x, y) -> tuple[float, float]:
    """``scipy.stats.ttest_rel`` as floats; NaN for fewer than 2 pairs (scipy's NaN for zero variance)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if len(x) < 2:
        return math.nan, math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.ttest_rel(x, y)
    return float(result.statistic), float(result.pvalue)


@dataclass
class Comparison:
    """A (group, factor, fixed) slice: the scores of every level keyed by (task, seed)."""

    setting: str
    teacher: str
    student: str
    factor: str
    fixed: str
    levels: list[str]
    scores: dict[str, dict[tuple[str, int], float]]

    @property
    def head(self) -> dict:
        return {
            "setting": self.setting,
            "teacher": self.teacher,
            "student": self.student,
            "factor": self.factor,
            "fixed": self.fixed,
        }

    def tasks(self) -> list[str]:
        return ordered_tasks(task for level in self.levels for task, _ in self.scores[level])


def comparisons(frame: pd.DataFrame) -> list[Comparison]:
    """Every (group, factor, fixed) slice with at least two levels of the factor."""
    found = []
    if frame.empty:
        return found
    for (setting, teacher, student), group in frame.groupby(GROUP_COLS, sort=True):
        for factor, held in FACTORS:
            for fixed in sorted(group[held].unique(), key=natural_key):
                part = group[group[held] == fixed]
                levels = sorted(part[factor].unique(), key=natural_key)
                if len(levels) < 2:
                    continue
                scores = {
                    level: {
                        (r.task, int(r.seed)): float(r.score)
                        for r in part[part[factor] == level].itertuples(index=False)
                    }
                    for level in levels
                }
                found.append(Comparison(setting, teacher, student, factor, fixed, levels, scores))
    return found


def _key_order(key: tuple[str, int]) -> tuple:
    return (task_sort_key(key[0]), key[1])


def _pair_row(comp: Comparison, task: str, a: str, b: str, keys_a: dict, keys_b: dict) -> dict:
    common = sorted(set(keys_a) & set(keys_b), key=_key_order)
    x = [keys_a[k] for k in common]
    y = [keys_b[k] for k in common]
    t, p = paired_ttest(x, y)
    return {
        **comp.head,
        "task": task,
        "a": a,
        "b": b,
        "n_pairs": len(common),
        "mean_a": float(np.mean(x)) if common else math.nan,
        "mean_b": float(np.mean(y)) if common else math.nan,
        "t": t,
        "p": p,
    }


def _on_task(scores: dict, task: str) -> dict:
    return {key: value for key, value in scores.items() if key[0] == task}


def paired_tests(frame: pd.DataFrame) -> pd.DataFrame:
    """Paired t-tests for every pair of levels, per task (levels with runs on it) and pooled (``ALL``)."""
    rows = []
    for comp in comparisons(frame):
        for task in comp.tasks():
            present = [lv for lv in comp.levels if _on_task(comp.scores[lv], task)]
            for a, b in itertools.combinations(present, 2):
                rows.append(
                    _pair_row(
                        comp, task, a, b, _on_task(comp.scores[a], task), _on_task(comp.scores[b], task)
                    )
                )
        for a, b in itertools.combinations(comp.levels, 2):
            rows.append(_pair_row(comp, ALL, a, b, comp.scores[a], comp.scores[b]))
    pvalues = pd.DataFrame(rows, columns=PVALUE_COLS)
    if not pvalues.empty:
        pvalues["p_holm"] = pvalues.groupby(FAMILY_COLS, sort=False)["p"].transform(
            lambda s: holm(s.to_numpy())
        )
        pvalues["n_pairs"] = pvalues["n_pairs"].astype("int64")
    return pvalues


def unmatched_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """Per compared pair, every (task, seed) that one side has and the other lacks."""
    rows = []
    for comp in comparisons(frame):
        for a, b in itertools.combinations(comp.levels, 2):
            keys_a, keys_b = set(comp.scores[a]), set(comp.scores[b])
            for side, missing in (("b", keys_a - keys_b), ("a", keys_b - keys_a)):
                for task, seed in sorted(missing, key=_key_order):
                    rows.append(
                        {**comp.head, "task": task, "a": a, "b": b, "missing_side": side, "seed": seed}
                    )
    unmatched = pd.DataFrame(rows, columns=UNMATCHED_COLS)
    if unmatched.empty:
        return unmatched
    return unmatched.sort_values(
        ["setting", "teacher", "student", "factor", "fixed", "a", "b", "task", "seed"],
        key=lambda s: s.map(task_sort_key) if s.name == "task" else s,
        kind="stable",
    ).reset_index(drop=True)


def pvalue_matrix(pvalues: pd.DataFrame, column: str = "p_holm") -> pd.DataFrame:
    """Symmetric level x level matrix of ``column`` for one family (diagonal NaN)."""
    levels = sorted(set(pvalues["a"]) | set(pvalues["b"]), key=natural_key)
    matrix = pd.DataFrame(np.nan, index=levels, columns=levels)
    for row in pvalues.itertuples(index=False):
        value = getattr(row, column)
        matrix.at[row.a, row.b] = value
        matrix.at[row.b, row.a] = value
    return matrix


def format_p(p: float) -> str:
    if pd.isna(p):
        return ""
    if p < 0.001:
        return "<0.001"
    return f"{p:.3f}"


def _families(pvalues: pd.DataFrame):
    """(group, factor, fixed) slices of the p-value table, in a stable order."""
    keys = GROUP_COLS + ["factor", "fixed"]
    for key, part in pvalues.groupby(keys, sort=False):
        yield dict(zip(keys, key, strict=True)), part


def _pair_text(row, digits: int) -> str:
    means = ""
    if pd.notna(row.mean_a):
        means = f" ({_fmt(row.mean_a, digits)} vs {_fmt(row.mean_b, digits)})"
    return f"{_md_escape(row.a)} vs {_md_escape(row.b)}{means}"


def render_significance(pvalues: pd.DataFrame, alpha: float = 0.05, digits: int = 1) -> str:
    """Non-significant pairs per family, untestable pairs, and the task-ALL Holm p-value matrix."""
    out = [
        "# Significance",
        "",
        f"Paired t-tests (`scipy.stats.ttest_rel`), runs paired by seed (task ALL: by (task, seed)). "
        f"p values are Holm-Bonferroni adjusted within each family (setting, teacher, student, factor, "
        f"held value, task); a pair is significant when p_holm < {alpha}. Means are over the matched pairs.",
        "",
    ]
    if pvalues.empty:
        out.append("No comparisons: no group has two objectives (or two inits) to compare.")
        return "\n".join(out) + "\n"
    for head, part in _families(pvalues):
        held = "init" if head["factor"] == "objective" else "objective"
        out += [
            f"## {head['setting']} / {head['teacher']} / {head['student']}: "
            f"{head['factor']} pairs at {held} = {_md_escape(head['fixed'])}",
            "",
        ]
        pooled = part[part["task"] == ALL]
        if not pooled.empty:
            matrix = pvalue_matrix(pooled)
            out += ["Holm-adjusted p, task ALL:", ""]
            out.append("| | " + " | ".join(_md_escape(c) for c in matrix.columns) + " |")
            out.append("|---|" + "---:|" * len(matrix.columns))
            for level in matrix.index:
                cells = [
                    "—" if level == other else format_p(matrix.at[level, other]) for other in matrix.columns
                ]
                out.append(f"| {_md_escape(level)} | " + " | ".join(cells) + " |")
            out.append("")
        tasks = [ALL] + [t for t in ordered_tasks(part["task"]) if t != ALL]
        for task in tasks:
            rows = part[part["task"] == task]
            if rows.empty:
                continue
            testable = rows[rows["p_holm"].notna()]
            untestable = rows[rows["p_holm"].isna()]
            not_sig = testable[testable["p_holm"] >= alpha]
            if not_sig.empty and not testable.empty:
                line = f"- {task}: every testable pair is significant"
            elif testable.empty:
                line = f"- {task}: no testable pair"
            else:
                items = [
                    f"{_pair_text(r, digits)}: p_holm = {format_p(r.p_holm)}, n = {r.n_pairs}"
                    for r in not_sig.itertuples(index=False)
                ]
                line = f"- {task}: not significant: " + "; ".join(items)
            out.append(line)
            if not untestable.empty:
                items = [
                    f"{_md_escape(r.a)} vs {_md_escape(r.b)} (n_pairs = {r.n_pairs}"
                    + (", zero variance" if r.n_pairs >= 2 else "")
                    + ")"
                    for r in untestable.itertuples(index=False)
                ]
                out.append("  - untestable: " + "; ".join(items))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


# ----------------------------------------------------------------------------------------------------- plots


def safe_name(text: str) -> str:
    """A filesystem-safe file-name fragment."""
    name = re.sub(r"[^A-Za-z0-9._+-]+", "-", str(text)).strip("-.")
    return name or "x"


class _Names:
    """Hands out unique file names (appends ``-2``, ``-3`` ... when two fragments sanitise alike)."""

    def __init__(self):
        self.used: set[str] = set()

    def __call__(self, stem: str, suffix: str = ".png") -> str:
        name, i = f"{stem}{suffix}", 2
        while name in self.used:
            name, i = f"{stem}-{i}{suffix}", i + 1
        self.used.add(name)
        return name


def group_stem(setting: str, teacher: str, student: str) -> str:
    return "_".join(safe_name(part) for part in (setting, teacher, student))


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    fig.savefig(path, format="png", dpi=120)


def plot_scores(table: Table, path: Path) -> Path:
    """Grouped bar chart: mean score per task (x) per row (bars), sample-std error bars."""
    n_rows, n_tasks = len(table.rows), len(table.tasks)
    width = 0.8 / max(n_rows, 1)
    fig = Figure(figsize=(max(6.0, 1.0 + n_tasks * (0.35 * n_rows + 0.6)), 4.5))
    ax = fig.add_subplot()
    x = np.arange(n_tasks)
    for i, row in enumerate(table.rows):
        means = table.mean.loc[[row], table.tasks].to_numpy(dtype=float).ravel()
        errs = np.nan_to_num(table.std.loc[[row], table.tasks].to_numpy(dtype=float).ravel())
        label = f"{row[0]} [{row[1]}]" if table.show_init else row[0]
        ax.bar(x - 0.4 + width * (i + 0.5), means, width, yerr=errs, capsize=2, label=label)
    ax.set_xticks(x, [TASK_LABELS.get(t, t) for t in table.tasks])
    all_means = table.mean[table.tasks].to_numpy(dtype=float)
    all_errs = np.nan_to_num(table.std[table.tasks].to_numpy(dtype=float))
    low, high = np.nanmin(all_means - all_errs), np.nanmax(all_means + all_errs)
    if np.isfinite(low) and np.isfinite(high) and low > 0:
        margin = max(1.0, 0.15 * (high - low))
        ax.set_ylim(max(0.0, low - margin), high + margin)  # zoom in: the differences are a few points
    ax.set_ylabel("score (mean ± std over seeds)")
    ax.set_title(table.title, fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    _save(fig, path)
    return path


def plot_pvalues(matrix: pd.DataFrame, title: str, path: Path, alpha: float = 0.05) -> Path:
    """Heat map of a Holm p-value matrix (log colour scale; grey = diagonal/untestable)."""
    n = len(matrix)
    fig = Figure(figsize=(max(4.0, 1.5 + 0.9 * n), max(3.5, 1.2 + 0.8 * n)))
    ax = fig.add_subplot()
    values = matrix.to_numpy(dtype=float)
    shown = np.ma.masked_invalid(np.clip(values, 1e-4, 1.0))
    cmap = colormaps["viridis"].with_extremes(bad="lightgrey")
    image = ax.imshow(shown, cmap=cmap, norm=LogNorm(vmin=1e-4, vmax=1.0))
    for i, j in itertools.product(range(n), range(n)):
        if i == j:
            continue
        value = values[i, j]
        text = "n/a" if np.isnan(value) else format_p(value) + ("*" if value < alpha else "")
        color = "white" if value < 0.01 else "k"
        ax.text(j, i, text, ha="center", va="center", fontsize=7, color=color)
    labels = [str(c) for c in matrix.columns]
    ax.set_xticks(range(n), labels, rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(n), labels, fontsize=7)
    ax.set_title(title, fontsize=8)
    fig.colorbar(image, ax=ax, label=f"Holm-adjusted p (* < {alpha})")
    fig.tight_layout()
    _save(fig, path)
    return path


def write_plots(tables: list[Table], pvalues: pd.DataFrame, out: Path, alpha: float) -> list[Path]:
    names = _Names()
    written = [plot_scores(t, out / names(f"scores_{group_stem(*t.key)}")) for t in tables if t.tasks]
    if pvalues.empty:
        return written
    for head, part in _families(pvalues):
        pooled = part[part["task"] == ALL]
        if pooled.empty:
            continue
        stem = group_stem(head["setting"], head["teacher"], head["student"])
        name = names(f"pvalues_{stem}_{safe_name(head['factor'])}_{safe_name(head['fixed'])}")
        title = (
            f"{head['setting']} / {head['teacher']} / {head['student']}\n"
            f"{head['factor']} pairs at {head['fixed']}, task ALL"
        )
        written.append(plot_pvalues(pvalue_matrix(pooled), title, out / name, alpha))
    return written


# ------------------------------------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description="Collect result.json files into tables (md/tex/csv), paired t-tests and plots.",
    )
    parser.add_argument("results_dir", type=Path, help="directory searched (any depth) for result.json files")
    parser.add_argument(
        "--out", type=Path, default=None, help="output directory (default: RESULTS_DIR/report)"
    )
    parser.add_argument("--digits", type=int, default=1, help="decimals shown in the tables (default 1)")
    parser.add_argument(
        "--alpha", type=float, default=0.05, help="significance level after Holm (default 0.05)"
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument(
        "--paper",
        action="store_true",
        help=f"show the published numbers ({PAPER_CITE}) beside the measured tables; write paper.csv",
    )
    return parser


def _fail(message: str):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _print_exclusions(excluded: list[dict], limit: int = 20) -> None:
    for row in excluded[:limit]:
        print(f"  {row['kind']:<9} {row['path']}: {row['reason']}")
    if len(excluded) > limit:
        print(f"  ... and {len(excluded) - limit} more (see excluded.csv)")


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    frame.to_csv(path, index=False)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.digits < 0:
        _fail(f"--digits must be >= 0, got {args.digits}")
    if not 0 < args.alpha < 1:
        _fail(f"--alpha must be between 0 and 1, got {args.alpha}")
    results_dir: Path = args.results_dir
    out: Path = args.out if args.out is not None else results_dir / "report"
    try:
        loaded = load_records(results_dir, skip=out)
    except ReportError as exc:
        _fail(str(exc))
    paper = None
    if args.paper:
        try:
            paper = load_paper()
        except ReportError as exc:
            _fail(str(exc))
    if out.exists() and not out.is_dir():
        _fail(f"--out {out} exists and is not a directory; pass a directory path")
    out.mkdir(parents=True, exist_ok=True)

    frame, below_best = best_of_grid(to_frame(loaded.records))
    frame, duplicates = drop_duplicates(frame)
    excluded = loaded.excluded + below_best + duplicates
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
            f"(listed above and in {out / 'excluded.csv'}); wait for runs to finish or fix the failures"
        )

    summary = summarise(frame)
    tables = build_tables(summary)
    pvalues = paired_tests(frame)
    unmatched = unmatched_runs(frame)
    _write_csv(frame, out / "results.csv")
    _write_csv(summary, out / "summary.csv")
    _write_csv(pvalues, out / "pvalues.csv")
    _write_csv(unmatched, out / "unmatched.csv")
    (out / "tables.md").write_text(render_markdown(tables, args.digits, excluded, paper), encoding="utf-8")
    if paper is not None:
        _write_csv(paper_frame(paper), out / "paper.csv")
    (out / "tables.tex").write_text(render_latex(tables, args.digits), encoding="utf-8")
    (out / "significance.md").write_text(
        render_significance(pvalues, args.alpha, args.digits), encoding="utf-8"
    )
    plots = [] if args.no_plots else write_plots(tables, pvalues, out, args.alpha)

    n_sig = int((pvalues["p_holm"] < args.alpha).sum()) if not pvalues.empty else 0
    print(
        f"{PROG}: wrote {len(tables)} table(s) to {out}/tables.md and tables.tex; "
        f"{len(pvalues)} paired test(s) ({n_sig} significant at {args.alpha} after Holm) to pvalues.csv; "
        f"{len(unmatched)} unmatched run(s); {len(plots)} plot(s)"
    )
    print(
        f"{PROG}: files: results.csv summary.csv tables.md tables.tex pvalues.csv unmatched.csv "
        f"significance.md excluded.csv" + (" paper.csv" if paper is not None else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
