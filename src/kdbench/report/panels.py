"""One score panel drawn: every seed's score, the cell's mean and 95% t interval, the paper's value,
the teacher's and the majority class's lines, the families' names; and the panels' legend."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure
from scipy import stats

from kdbench.report.figures import FAMILIES, colour_of, family_of, family_order
from kdbench.report.tables import Table
from kdbench.tasks import MAJORITY

COLLAPSED_COLOUR = "#444444"
LEGEND_LEFT = 0.8  # the score plots' legend sits right of this fraction of the figure
TEACHER_STYLE = {"color": "black", "linestyle": "--", "linewidth": 1.0}
MAJORITY_STYLE = {"color": "#BB5566", "linestyle": ":", "linewidth": 1.2}


@dataclass
class References:
    """Per task of a group: the score's metric and the teacher's mean score (from the records)."""

    metric: dict[str, str]
    teacher: dict[str, float]

    def majority(self, task: str) -> float | None:
        return MAJORITY.get(task, {}).get(self.metric.get(task))


@dataclass
class Slot:
    """One x position of a score panel: a row (objective, init), its colour and its runs' scores."""

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
        half = float(
            stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
        )
        return mean, mean - half, mean + half


def _draw_seeds(ax, slot: Slot) -> None:
    """Every seed's score, spread a little across the slot; a cross for a collapsed run."""
    n = len(slot.scores)
    offsets = np.linspace(-0.15, 0.15, n) if n > 1 else np.zeros(1)
    for dx, score, collapsed in zip(offsets, slot.scores, slot.collapsed, strict=True):
        if collapsed:
            ax.plot(
                slot.x + dx,
                score,
                marker="x",
                color=COLLAPSED_COLOUR,
                markersize=6,
                linestyle="none",
            )
        else:
            ax.plot(
                slot.x + dx,
                score,
                marker="o",
                color=slot.colour,
                markeredgecolor="black",
                markeredgewidth=0.4,
                markersize=5,
                linestyle="none",
            )


def _draw_paper(ax, x: float, paper: float, limits: tuple[float, float]) -> None:
    """The paper's value as a diamond, or off the axis a pointer at its edge with the value."""
    low, high = limits
    if low <= paper <= high:
        ax.plot(
            x,
            paper,
            marker="D",
            markerfacecolor="none",
            markeredgecolor="black",
            markersize=5,
            linestyle="none",
        )
        return
    edge, marker = (high, "^") if paper > high else (low, "v")
    ax.plot(x, edge, marker=marker, color="black", markersize=5, linestyle="none", clip_on=False)
    ax.annotate(
        f"{paper:.1f}",
        xy=(x, edge),
        xytext=(0, -10 if paper > high else 4),
        textcoords="offset points",
        ha="center",
        fontsize=6,
    )


def _draw_slot(
    ax, slot: Slot, below: bool, paper: float | None, limits: tuple[float, float]
) -> None:
    _draw_seeds(ax, slot)
    mean, low, high = slot.interval()
    ax.hlines(mean, slot.x - 0.3, slot.x + 0.3, color="black", linewidth=1.5)
    ax.vlines(slot.x + 0.3, low, high, color="black", linewidth=1.0)
    if below:
        ax.text(slot.x, high, "*", ha="center", va="bottom", fontsize=11)
    if paper is not None:
        _draw_paper(ax, slot.x + 0.38, paper, limits)


def _limits(points: list[float]) -> tuple[float, float]:
    low, high = min(points), max(points)
    margin = max(1.0, 0.08 * (high - low))
    return low - margin, high + 2 * margin


def _reference(
    ax, value: float | None, label: str, style: dict, limits: tuple[float, float], right: float
) -> None:
    """A reference line across the panel, or, when off the axis, its value written at that edge."""
    if value is None or math.isnan(value):
        return
    low, high = limits
    if low <= value <= high:
        ax.axhline(value, label=label, **style)
        return
    edge, arrow = (high, "above") if value > high else (low, "below")
    ax.annotate(
        f"{label} {value:.1f} ({arrow})",
        xy=(right, edge),
        xytext=(0, -9 if value > high else 3),
        textcoords="offset points",
        ha="right",
        fontsize=7,
        color=style["color"],
    )


def _family_labels(ax, panel: list[Slot]) -> None:
    """Each family's name above its objectives."""
    for family in FAMILIES:
        xs = [s.x for s in panel if family_of(s.objective) == family]
        if xs:
            ax.text(
                (min(xs) + max(xs)) / 2,
                1.01,
                family,
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="bottom",
                fontsize=7,
                color="#555555",
            )


def draw_panel(
    ax, panel: list[Slot], marked: set, papers: dict, refs: References, task: str
) -> None:
    points = [v for s in panel for v in s.scores] + [v for s in panel for v in s.interval()[1:]]
    limits = _limits(points)
    for slot in panel:
        _draw_slot(
            ax,
            slot,
            (slot.objective, slot.init) in marked,
            papers.get((slot.objective, slot.init)),
            limits,
        )
    ax.set_ylim(*limits)
    right = max(s.x for s in panel) + 0.7  # room for the paper's diamond
    ax.set_xlim(min(s.x for s in panel) - 0.5, right)
    _reference(ax, refs.teacher.get(task), "teacher", TEACHER_STYLE, limits, right)
    _reference(ax, refs.majority(task), "majority class", MAJORITY_STYLE, limits, right)
    _family_labels(ax, panel)
    several_inits = len({s.init for s in panel}) > 1
    ax.set_xticks(
        [s.x for s in panel],
        [s.init if several_inits else s.objective for s in panel],
        fontsize=7,
        rotation=0 if several_inits else 30,
        ha="center" if several_inits else "right",
    )
    if several_inits:  # the objective's name under its inits
        for objective in dict.fromkeys(s.objective for s in panel):
            xs = [s.x for s in panel if s.objective == objective]
            ax.text(
                (min(xs) + max(xs)) / 2,
                -0.16,
                objective,
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="top",
                fontsize=8,
            )


def legend(fig: Figure, table: Table, factor: str, paper: bool) -> None:
    levels = table.inits if factor == "init" else family_order(o for o, _ in table.rows)
    handles = [
        fig.axes[0].plot(
            [],
            [],
            marker="o",
            color=colour_of(factor, level),
            markeredgecolor="black",
            linestyle="none",
            label=level,
        )[0]
        for level in levels
    ]
    extra = [("x", COLLAPSED_COLOUR, "collapsed seed")] + (
        [("D", "black", "paper")] if paper else []
    )
    handles += [
        fig.axes[0].plot(
            [],
            [],
            marker=m,
            color=c,
            markerfacecolor="none" if m == "D" else c,
            linestyle="none",
            label=label,
        )[0]
        for m, c, label in extra
    ]
    handles += [
        fig.axes[0].plot([], [], label=label, **style)[0]
        for label, style in (("teacher", TEACHER_STYLE), ("majority class", MAJORITY_STYLE))
    ]
    fig.legend(
        handles=handles,
        title=factor,
        fontsize=7,
        title_fontsize=7,
        loc="upper left",
        bbox_to_anchor=(LEGEND_LEFT, 0.95),
    )
