"""PNG plots: per group, one score panel per task (:mod:`kdbench.report.panels`: every seed's score,
its cell's mean and 95% t interval) and the matrices of signed paired differences of a study on one
symmetric colour scale (:mod:`kdbench.report.heatmaps`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from kdbench.report.collapse import COLLAPSED
from kdbench.report.figures import (
    colour_of,
    family_of,
    family_order,
    safe_name,
    save_png,
)
from kdbench.report.frames import ALL, GROUP_COLS, natural_key
from kdbench.report.heatmaps import plot_differences
from kdbench.report.panels import LEGEND_LEFT, References, Slot, draw_panel, legend
from kdbench.report.paper import PAPER_DESIGNS, runs_for_table
from kdbench.report.stats import families
from kdbench.report.tables import Table
from kdbench.report.task_names import task_title


class _Names:
    """Unique file names: ``-2``, ``-3`` ... appended when two fragments sanitise alike."""

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


def references(frame: pd.DataFrame, key: tuple[str, str, str]) -> References:
    runs = frame[(frame[GROUP_COLS] == pd.Series(key, index=GROUP_COLS)).all(axis=1)]
    metric = {
        task: part["score_metric"].mode().iloc[0]
        for task, part in runs.groupby("task")
        if part["score_metric"].notna().any()
    }
    teacher = runs.groupby("task")["teacher_score"].mean().dropna().to_dict()
    return References(metric, teacher)


def paper_marks(frame: pd.DataFrame, paper: pd.DataFrame | None) -> dict[tuple, float]:
    """The published mean of each measured cell that stands for one, by (setting, teacher, student,
    objective, init, task), where the paper's column is the runs' score metric."""
    if paper is None:
        return {}
    marks = {}
    for table in PAPER_DESIGNS:
        published = paper[(paper["table"] == table) & ~paper["quoted"]]
        runs = runs_for_table(frame, table)
        merged = runs.merge(
            published, on=["objective", "paper_init", "task"], suffixes=("", "_paper")
        )
        for row in merged[merged["measured_metric"] == merged["score_metric"]].itertuples(
            index=False
        ):
            marks[(row.setting, row.teacher, row.student, row.objective, row.init, row.task)] = (
                float(row.mean)
            )
    return marks


def slots(table: Table, runs: pd.DataFrame, task: str) -> list[Slot]:
    """The rows on ``task`` by family, a gap between objectives (when inits vary) and families."""
    objectives = family_order(o for o, _ in table.rows)
    out, x, family = [], 0.0, None
    for objective in objectives:
        if family is not None:
            x += 1.0 if family_of(objective) != family else (0.5 if table.show_init else 0.0)
        family = family_of(objective)
        for init in sorted({i for o, i in table.rows if o == objective}, key=natural_key):
            cell = runs[
                (runs["objective"] == objective) & (runs["init"] == init) & (runs["task"] == task)
            ]
            if cell.empty:
                continue
            colour = (
                colour_of("init", init) if table.show_init else colour_of("objective", objective)
            )
            out.append(
                Slot(
                    objective,
                    init,
                    x,
                    colour,
                    list(cell["score"]),
                    list(cell["collapse"] == COLLAPSED),
                )
            )
            x += 1.0
    return out


def below_best(
    head: dict,
    factor: str,
    fixed: str,
    task: str,
    means: dict[str, float],
    pvalues: pd.DataFrame,
    alpha: float,
) -> set[str]:
    """The levels (of ``means``, at one held level on one task) significantly below the best one:
    the per-task paired test's Holm p below ``alpha`` with its matched pairs' mean difference best -
    level above 0 (the best by its runs' mean may lie below a level on the seeds both have)."""
    if len(means) < 2 or pvalues.empty:
        return set()
    best = max(means, key=means.get)
    rows = pvalues[
        (pvalues["setting"] == head["setting"])
        & (pvalues["teacher"] == head["teacher"])
        & (pvalues["student"] == head["student"])
        & (pvalues["factor"] == factor)
        & (pvalues["fixed"] == fixed)
        & (pvalues["task"] == task)
        & ((pvalues["a"] == best) | (pvalues["b"] == best))
        & (pvalues["p_holm"] < alpha)
    ]
    return {
        b if a == best else a
        for a, b, diff in zip(rows["a"], rows["b"], rows["diff"], strict=True)
        if (diff if a == best else -diff) > 0
    } & set(means)


def _marked(table: Table, panel: list[Slot], pvalues: pd.DataFrame, alpha: float, task: str) -> set:
    """The rows of a panel significantly below the best of their comparison group (inits of one
    objective when the init varies, else the objectives at the table's init)."""
    head = dict(zip(GROUP_COLS, table.key, strict=True))
    factor, held = ("init", "objective") if table.show_init else ("objective", "init")
    marked = set()
    for fixed in {getattr(s, held) for s in panel}:
        means = {getattr(s, factor): s.interval()[0] for s in panel if getattr(s, held) == fixed}
        below = below_best(head, factor, fixed, task, means, pvalues, alpha)
        marked |= {
            (s.objective, s.init)
            for s in panel
            if getattr(s, held) == fixed and getattr(s, factor) in below
        }
    return marked


def plot_scores(
    table: Table,
    runs: pd.DataFrame,
    pvalues: pd.DataFrame,
    refs: References,
    papers: dict,
    path: Path,
    alpha: float,
) -> Path:
    """One panel per task: every seed's score (x: collapsed to one class), the cell's mean (bar) and
    its 95% t interval (line at its right), the paper's value (diamond; a pointer with the value at
    the edge when off the axis), teacher and majority-class lines (written at the edge when off the
    axis), a star over a cell significantly below the best of its comparison group."""
    factor = "init" if table.show_init else "objective"
    width = max(6.5, 2.5 + 0.5 * len(table.rows))
    fig = Figure(figsize=(width, 3.3 * len(table.tasks) + 0.9))
    for i, task in enumerate(table.tasks):
        ax = fig.add_subplot(len(table.tasks), 1, i + 1)
        panel = slots(table, runs, task)
        mine = {
            (o, n): v
            for (*group, o, n, t), v in papers.items()
            if tuple(group) == table.key and t == task
        }
        draw_panel(ax, panel, _marked(table, panel, pvalues, alpha, task), mine, refs, task)
        metric = refs.metric.get(task, "score")
        ax.set_ylabel(f"{task_title(task)} {metric}", fontsize=8)
    legend(fig, table, factor, bool(papers))
    fig.suptitle(table.title, fontsize=9, x=LEGEND_LEFT / 2)
    fig.text(
        0.01,
        0.005,
        "dots: seeds; bar: mean; line: 95% t interval; * significantly below the best of its "
        f"group (paired t-test over seeds, Holm, p < {alpha})",
        fontsize=7,
    )
    fig.tight_layout(rect=(0, 0.03, LEGEND_LEFT - 0.01, 0.96))
    save_png(fig, path)
    return path


def write_plots(
    tables: list[Table],
    pvalues: pd.DataFrame,
    frame: pd.DataFrame,
    out: Path,
    alpha: float,
    paper: pd.DataFrame | None = None,
) -> dict[tuple[str, str, str], list[Path]]:
    """Every plot, by the (setting, teacher, student) group it shows: its scores and differences."""
    names = _Names()
    papers = paper_marks(frame, paper)
    written: dict[tuple[str, str, str], list[Path]] = {}
    for t in tables:
        runs = frame[(frame[GROUP_COLS] == pd.Series(t.key, index=GROUP_COLS)).all(axis=1)]
        if not runs.empty:  # a group of the design without a completed run has no scores to plot
            path = out / names(f"scores_{group_stem(*t.key)}")
            written.setdefault(t.key, []).append(
                plot_scores(t, runs, pvalues, references(frame, t.key), papers, path, alpha)
            )
    by_group: dict[tuple, list[tuple[str, pd.DataFrame]]] = {}
    for head, part in families(pvalues) if not pvalues.empty else ():
        pooled = part[part["task"] == ALL]
        if not pooled.empty:
            held = "init" if head["factor"] == "objective" else "objective"
            key = (head["setting"], head["teacher"], head["student"])
            by_group.setdefault(key, []).append(
                (f"{head['factor']} pairs at {held} {head['fixed']}", pooled)
            )
    for key, pooled in by_group.items():
        title = f"{' / '.join(key)}: mean paired differences, task ALL (one colour scale)"
        written.setdefault(key, []).append(
            plot_differences(pooled, title, out / names(f"differences_{group_stem(*key)}"), alpha)
        )
    return written
