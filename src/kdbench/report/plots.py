"""PNG plots: every seed's score with its cell's mean and 95% t interval, and (:mod:`kdbench.report.heatmaps`)
the matrices of signed paired differences of a study on one symmetric colour scale."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

from kdbench.report.collapse import COLLAPSED
from kdbench.report.figures import (
    FAMILIES,
    colour_of,
    family_of,
    family_order,
    safe_name,
    save_png,
)
from kdbench.report.frames import GROUP_COLS, natural_key
from kdbench.report.heatmaps import plot_differences
from kdbench.report.paper import PAPER_DESIGNS, runs_for_table
from kdbench.report.stats import ALL, families
from kdbench.report.tables import Table
from kdbench.tasks import MAJORITY, TASKS

COLLAPSED_COLOUR = "#444444"
LEGEND_LEFT = 0.8  # the score plots' legend sits right of this fraction of the figure
TEACHER_STYLE = {"color": "black", "linestyle": "--", "linewidth": 1.0}
MAJORITY_STYLE = {"color": "#BB5566", "linestyle": ":", "linewidth": 1.2}


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



@dataclass
class References:
    """Per task of a group: the score's metric and the teacher's mean score (from the records)."""

    metric: dict[str, str]
    teacher: dict[str, float]

    def majority(self, task: str) -> float | None:
        return MAJORITY.get(task, {}).get(self.metric.get(task))


def references(frame: pd.DataFrame, key: tuple[str, str, str]) -> References:
    runs = frame[(frame[GROUP_COLS] == pd.Series(key, index=GROUP_COLS)).all(axis=1)]
    metric = {task: part["score_metric"].mode().iloc[0] for task, part in runs.groupby("task") if
              part["score_metric"].notna().any()}
    teacher = runs.groupby("task")["teacher_score"].mean().dropna().to_dict()
    return References(metric, teacher)


def paper_marks(frame: pd.DataFrame, paper: pd.DataFrame | None) -> dict[tuple, float]:
    """The published mean of each measured cell that stands for one, by (setting, teacher, student, objective,
    init, task), where the paper's column is the runs' score metric."""
    if paper is None:
        return {}
    marks = {}
    for table in PAPER_DESIGNS:
        published = paper[(paper["table"] == table) & ~paper["quoted"]]
        runs = runs_for_table(frame, table)
        merged = runs.merge(published, on=["objective", "paper_init", "task"], suffixes=("", "_paper"))
        for row in merged[merged["measured_metric"] == merged["score_metric"]].itertuples(index=False):
            marks[(row.setting, row.teacher, row.student, row.objective, row.init, row.task)] = float(row.mean)
    return marks


@dataclass
class Slot:
    """One x position of a score panel: a row (objective, init) of the table, its colour and its runs' scores."""

    objective: str
    init: str
    x: float
    colour: str
    scores: list[float]
    collapsed: list[bool]

    def interval(self) -> tuple[float, float, float]:
        """(mean, low, high) of the 95% t interval of the mean (low = high = mean below 2 seeds)."""
        values = np.asarray(self.scores, dtype=float)
        mean = float(values.mean())
        if len(values) < 2:
            return mean, mean, mean
        half = float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values)))
        return mean, mean - half, mean + half


def slots(table: Table, runs: pd.DataFrame, task: str) -> list[Slot]:
    """The table's rows on ``task`` in family order, a gap between objectives (when inits vary) and families."""
    objectives = family_order(o for o, _ in table.rows)
    out, x, family = [], 0.0, None
    for objective in objectives:
        if family is not None:
            x += 1.0 if family_of(objective) != family else (0.5 if table.show_init else 0.0)
        family = family_of(objective)
        for init in sorted({i for o, i in table.rows if o == objective}, key=natural_key):
            cell = runs[(runs["objective"] == objective) & (runs["init"] == init) & (runs["task"] == task)]
            if cell.empty:
                continue
            colour = colour_of("init", init) if table.show_init else colour_of("objective", objective)
            out.append(Slot(objective, init, x, colour, list(cell["score"]), list(cell["collapse"] == COLLAPSED)))
            x += 1.0
    return out


def _draw_slot(ax, slot: Slot, below: bool, paper: float | None, limits: tuple[float, float]) -> None:
    n = len(slot.scores)
    offsets = np.linspace(-0.15, 0.15, n) if n > 1 else np.zeros(1)
    for dx, score, collapsed in zip(offsets, slot.scores, slot.collapsed, strict=True):
        if collapsed:
            ax.plot(slot.x + dx, score, marker="x", color=COLLAPSED_COLOUR, markersize=6, linestyle="none")
        else:
            ax.plot(slot.x + dx, score, marker="o", color=slot.colour, markeredgecolor="black", markeredgewidth=0.4,
                    markersize=5, linestyle="none")
    mean, low, high = slot.interval()
    ax.hlines(mean, slot.x - 0.3, slot.x + 0.3, color="black", linewidth=1.5)
    ax.vlines(slot.x + 0.3, low, high, color="black", linewidth=1.0)
    if below:
        ax.text(slot.x, high, "*", ha="center", va="bottom", fontsize=11)
    if paper is None:
        return
    low, high = limits
    if low <= paper <= high:
        ax.plot(slot.x + 0.38, paper, marker="D", markerfacecolor="none", markeredgecolor="black", markersize=5,
                linestyle="none")
        return
    edge, marker = (high, "^") if paper > high else (low, "v")  # off the axis: a pointer at its edge, and the value
    ax.plot(slot.x + 0.38, edge, marker=marker, color="black", markersize=5, linestyle="none", clip_on=False)
    ax.annotate(f"{paper:.1f}", xy=(slot.x + 0.38, edge), xytext=(0, -10 if paper > high else 4),
                textcoords="offset points", ha="center", fontsize=6)


def _limits(points: list[float]) -> tuple[float, float]:
    low, high = min(points), max(points)
    margin = max(1.0, 0.08 * (high - low))
    return low - margin, high + 2 * margin


def _reference(ax, value: float | None, label: str, style: dict, limits: tuple[float, float], right: float) -> None:
    """A reference line across the panel, or, when off the axis, its value written at the edge it lies beyond."""
    if value is None or math.isnan(value):
        return
    low, high = limits
    if low <= value <= high:
        ax.axhline(value, label=label, **style)
        return
    edge, arrow = (high, "above") if value > high else (low, "below")
    ax.annotate(f"{label} {value:.1f} ({arrow})", xy=(right, edge), xytext=(0, -9 if value > high else 3),
                textcoords="offset points", ha="right", fontsize=7, color=style["color"])


def _family_labels(ax, panel: list[Slot]) -> None:
    """Each family's name above its objectives."""
    for family in FAMILIES:
        xs = [s.x for s in panel if family_of(s.objective) == family]
        if xs:
            ax.text((min(xs) + max(xs)) / 2, 1.01, family, transform=ax.get_xaxis_transform(), ha="center",
                    va="bottom", fontsize=7, color="#555555")


def _draw_panel(ax, panel: list[Slot], marked: set, papers: dict, refs: References, task: str) -> None:
    points = [v for s in panel for v in s.scores] + [v for s in panel for v in s.interval()[1:]]
    limits = _limits(points)
    for slot in panel:
        _draw_slot(ax, slot, (slot.objective, slot.init) in marked, papers.get((slot.objective, slot.init)), limits)
    ax.set_ylim(*limits)
    right = max(s.x for s in panel) + 0.7  # room for the paper's diamond
    ax.set_xlim(min(s.x for s in panel) - 0.5, right)
    _reference(ax, refs.teacher.get(task), "teacher", TEACHER_STYLE, limits, right)
    _reference(ax, refs.majority(task), "majority class", MAJORITY_STYLE, limits, right)
    _family_labels(ax, panel)
    several_inits = len({s.init for s in panel}) > 1
    ax.set_xticks([s.x for s in panel], [s.init if several_inits else s.objective for s in panel], fontsize=7,
                  rotation=0 if several_inits else 30, ha="center" if several_inits else "right")
    if several_inits:  # the objective's name under its inits
        for objective in dict.fromkeys(s.objective for s in panel):
            xs = [s.x for s in panel if s.objective == objective]
            ax.text((min(xs) + max(xs)) / 2, -0.16, objective, transform=ax.get_xaxis_transform(), ha="center",
                    va="top", fontsize=8)


def _legend(fig: Figure, table: Table, factor: str, paper: bool) -> None:
    levels = table.inits if factor == "init" else family_order(o for o, _ in table.rows)
    handles = [fig.axes[0].plot([], [], marker="o", color=colour_of(factor, level), markeredgecolor="black",
                                linestyle="none", label=level)[0] for level in levels]
    extra = [("x", COLLAPSED_COLOUR, "collapsed seed")] + ([("D", "black", "paper")] if paper else [])
    handles += [fig.axes[0].plot([], [], marker=m, color=c, markerfacecolor="none" if m == "D" else c,
                                 linestyle="none", label=label)[0] for m, c, label in extra]
    handles += [fig.axes[0].plot([], [], label=label, **style)[0]
                for label, style in (("teacher", TEACHER_STYLE), ("majority class", MAJORITY_STYLE))]
    fig.legend(handles=handles, title=factor, fontsize=7, title_fontsize=7, loc="upper left",
               bbox_to_anchor=(LEGEND_LEFT, 0.95))


def below_best(head: dict, factor: str, fixed: str, task: str, means: dict[str, float], pvalues: pd.DataFrame,
               alpha: float) -> set[str]:
    """The levels (of ``means``, at one held level on one task) significantly below the best one (per-task paired
    test, Holm)."""
    if len(means) < 2 or pvalues.empty:
        return set()
    best = max(means, key=means.get)
    rows = pvalues[(pvalues["setting"] == head["setting"]) & (pvalues["teacher"] == head["teacher"])
                   & (pvalues["student"] == head["student"]) & (pvalues["factor"] == factor)
                   & (pvalues["fixed"] == fixed) & (pvalues["task"] == task)
                   & ((pvalues["a"] == best) | (pvalues["b"] == best)) & (pvalues["p_holm"] < alpha)]
    return {b if a == best else a for a, b in zip(rows["a"], rows["b"], strict=True)} & set(means)


def _marked(table: Table, panel: list[Slot], pvalues: pd.DataFrame, alpha: float, task: str) -> set:
    """The rows of a panel significantly below the best of their comparison group (inits of one objective when
    the init varies, else the objectives at the table's init)."""
    head = dict(zip(GROUP_COLS, table.key, strict=True))
    factor, held = ("init", "objective") if table.show_init else ("objective", "init")
    marked = set()
    for fixed in {getattr(s, held) for s in panel}:
        means = {getattr(s, factor): s.interval()[0] for s in panel if getattr(s, held) == fixed}
        below = below_best(head, factor, fixed, task, means, pvalues, alpha)
        marked |= {(s.objective, s.init) for s in panel if getattr(s, held) == fixed and getattr(s, factor) in below}
    return marked


def plot_scores(table: Table, runs: pd.DataFrame, pvalues: pd.DataFrame, refs: References, papers: dict,
                path: Path, alpha: float) -> Path:
    """One panel per task: every seed's score (x: collapsed to one class), the cell's mean (bar) and its 95% t
    interval (line at its right), the paper's value (diamond; a pointer with the value at the edge when off the
    axis), teacher and majority-class lines (written at the
    edge when off the axis), a star over a cell significantly below the best of its comparison group."""
    factor = "init" if table.show_init else "objective"
    width = max(6.5, 2.5 + 0.5 * len(table.rows))
    fig = Figure(figsize=(width, 3.3 * len(table.tasks) + 0.9))
    for i, task in enumerate(table.tasks):
        ax = fig.add_subplot(len(table.tasks), 1, i + 1)
        panel = slots(table, runs, task)
        mine = {(o, n): v for (*group, o, n, t), v in papers.items() if tuple(group) == table.key and t == task}
        _draw_panel(ax, panel, _marked(table, panel, pvalues, alpha, task), mine, refs, task)
        metric = refs.metric.get(task, "score")
        ax.set_ylabel(f"{TASKS.get(task, task)} {metric}", fontsize=8)
    _legend(fig, table, factor, bool(papers))
    fig.suptitle(table.title, fontsize=9, x=LEGEND_LEFT / 2)
    fig.text(0.01, 0.005, "dots: seeds; bar: mean; line: 95% t interval; * significantly below the best of its "
             f"group (paired t-test over seeds, Holm, p < {alpha})", fontsize=7)
    fig.tight_layout(rect=(0, 0.03, LEGEND_LEFT - 0.01, 0.96))
    save_png(fig, path)
    return path


def write_plots(tables: list[Table], pvalues: pd.DataFrame, frame: pd.DataFrame, out: Path, alpha: float,
                paper: pd.DataFrame | None = None) -> dict[tuple[str, str, str], list[Path]]:
    """Every plot, by the (setting, teacher, student) group it shows: its scores, and its difference matrices."""
    names = _Names()
    papers = paper_marks(frame, paper)
    written: dict[tuple[str, str, str], list[Path]] = {}
    for t in tables:
        if t.tasks:
            runs = frame[(frame[GROUP_COLS] == pd.Series(t.key, index=GROUP_COLS)).all(axis=1)]
            path = out / names(f"scores_{group_stem(*t.key)}")
            written.setdefault(t.key, []).append(
                plot_scores(t, runs, pvalues, references(frame, t.key), papers, path, alpha))
    by_group: dict[tuple, list[tuple[str, pd.DataFrame]]] = {}
    for head, part in families(pvalues) if not pvalues.empty else ():
        pooled = part[part["task"] == ALL]
        if not pooled.empty:
            held = "init" if head["factor"] == "objective" else "objective"
            key = (head["setting"], head["teacher"], head["student"])
            by_group.setdefault(key, []).append((f"{head['factor']} pairs at {held} {head['fixed']}", pooled))
    for key, pooled in by_group.items():
        title = f"{' / '.join(key)}: mean paired differences, task ALL (one colour scale)"
        written.setdefault(key, []).append(
            plot_differences(pooled, title, out / names(f"differences_{group_stem(*key)}"), alpha))
    return written
