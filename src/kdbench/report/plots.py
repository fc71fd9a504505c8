"""PNG plots: mean scores with the compared factor as the colour, and matrices of signed paired differences."""

from __future__ import annotations

import io
import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from PIL import Image

from kdbench.report.stats import ALL, GROUP_COLS, families, natural_key, pair_matrix
from kdbench.report.tables import Table
from kdbench.tasks import MAJORITY, TASKS

# Paul Tol's "muted" scheme: distinct under the common colour-vision deficiencies; hatches beyond nine levels.
PALETTE = ("#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255", "#AA4499")
HATCHES = ("", "//", "..", "xx")
TEACHER_STYLE = {"color": "black", "linestyle": "--", "linewidth": 1.0}
MAJORITY_STYLE = {"color": "#BB5566", "linestyle": ":", "linewidth": 1.2}


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
    """A 256-colour palette PNG: a plot's flat colours and their anti-aliased edges fit in it, at about a third of
    the bytes of full colour (report.html carries every plot inline)."""
    FigureCanvasAgg(fig)
    rendered = io.BytesIO()
    fig.savefig(rendered, format="png", dpi=120)
    image = Image.open(rendered).convert("RGB")
    image.quantize(colors=256, dither=Image.Dither.NONE).save(path, format="png", optimize=True)


def level_styles(levels) -> dict[str, dict]:
    """A bar style per level (objective or init), fixed for the whole report: the same level, the same colour."""
    ordered = sorted(set(levels), key=natural_key)
    return {level: {"color": PALETTE[i % len(PALETTE)], "hatch": HATCHES[i // len(PALETTE) % len(HATCHES)],
                    "edgecolor": "white" if i < len(PALETTE) else "black"} for i, level in enumerate(ordered)}


# ---------------------------------------------------------------------------------------------- score plots


@dataclass
class BarGroup:
    """The bars at one x position: one level of the compared factor each, on one task, at one held level."""

    label: str
    task: str
    fixed: str
    levels: list[str]
    means: list[float]
    stds: list[float]


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


def _cell(table: Table, objective: str, init: str, task: str) -> tuple[float, float]:
    row = (objective, init)
    if row not in table.mean.index:
        return math.nan, math.nan
    return float(table.mean.at[row, task]), float(table.std.at[row, task])


def bar_groups(table: Table, task: str | None) -> tuple[str, list[BarGroup]]:
    """(compared factor, bar groups): inits as colours over objectives on one task when the init varies, else
    objectives as colours over the tasks."""
    objectives = sorted({o for o, _ in table.rows}, key=natural_key)
    groups = []
    if table.show_init:
        for objective in objectives:
            cells = {init: _cell(table, objective, init, task) for init in table.inits}
            groups.append(_group(objective, task, objective, cells))
        return "init", groups
    init = table.inits[0]
    for each in table.tasks:
        cells = {objective: _cell(table, objective, init, each) for objective in objectives}
        groups.append(_group(TASKS.get(each, each), each, init, cells))
    return "objective", groups


def _group(label: str, task: str, fixed: str, cells: dict[str, tuple[float, float]]) -> BarGroup:
    present = {level: cell for level, cell in cells.items() if not math.isnan(cell[0])}
    return BarGroup(label, task, fixed, list(present), [m for m, _ in present.values()],
                    [0.0 if math.isnan(s) else s for _, s in present.values()])


def below_best(group: BarGroup, head: dict, factor: str, pvalues: pd.DataFrame, alpha: float) -> set[str]:
    """The levels of a bar group significantly below its best bar (per-task paired test, Holm)."""
    if len(group.levels) < 2 or pvalues.empty:
        return set()
    best = group.levels[int(np.argmax(group.means))]
    rows = pvalues[(pvalues["setting"] == head["setting"]) & (pvalues["teacher"] == head["teacher"])
                   & (pvalues["student"] == head["student"]) & (pvalues["factor"] == factor)
                   & (pvalues["fixed"] == group.fixed) & (pvalues["task"] == group.task)
                   & ((pvalues["a"] == best) | (pvalues["b"] == best)) & (pvalues["p_holm"] < alpha)]
    return {b if a == best else a for a, b in zip(rows["a"], rows["b"], strict=True)}


def _draw_panel(ax, groups: list[BarGroup], marked: list[set[str]], styles: dict, refs: References) -> None:
    """Bars in one slot per level (the same place in every group, in the levels' order), reference lines, stars;
    the y axis zoomed to the bars and lines."""
    slots = sorted({level for g in groups for level in g.levels}, key=natural_key)
    width = 0.8 / max(len(slots), 1)
    tops, bottoms, drawn = [], [], set()
    for x, (group, below) in enumerate(zip(groups, marked, strict=True)):
        for level, mean, std in zip(group.levels, group.means, group.stds, strict=True):
            centre = x - 0.4 + width * (slots.index(level) + 0.5)
            ax.bar(centre, mean, width, yerr=std, capsize=2, **styles[level])
            if level in below:
                ax.text(centre, mean + std, "*", ha="center", va="bottom", fontsize=10)
            tops.append(mean + std)
            bottoms.append(mean - std)
        for value, label, style in ((refs.teacher.get(group.task), "teacher", TEACHER_STYLE),
                                    (refs.majority(group.task), "majority class", MAJORITY_STYLE)):
            if value is not None and not math.isnan(value):
                ax.hlines(value, x - 0.45, x + 0.45, label=None if label in drawn else label, **style)
                drawn.add(label)
                tops.append(value)
                bottoms.append(value)
    for level in slots:  # legend entries in the levels' order
        ax.bar(0, 0, 0, label=level, **styles[level])
    ax.set_xticks(range(len(groups)), [g.label for g in groups], fontsize=8,
                  rotation=30 if len(groups) > 4 else 0, ha="right" if len(groups) > 4 else "center")
    if tops:
        low, high = min(bottoms), max(tops)
        margin = max(1.0, 0.08 * (high - low))
        ax.set_ylim(max(0.0, low - margin) if low >= 0 else low - margin, high + 2 * margin)


def _axis_label(tasks: list[str], refs: References) -> str:
    metrics = {refs.metric.get(task, "score") for task in tasks}
    what = metrics.pop() if len(metrics) == 1 else "score (each task's metric)"
    return f"{what}, mean ± std over seeds"


def plot_scores(table: Table, pvalues: pd.DataFrame, refs: References, styles: dict[str, dict], path: Path,
                alpha: float) -> Path:
    """Bars of mean score with std error bars, the compared factor as the colour; one panel per task when the
    init varies (objectives on x), else one panel with the tasks on x; teacher and majority-class lines; a star
    over a bar significantly below the best bar of its group."""
    panels = table.tasks if table.show_init else [None]
    head = dict(zip(GROUP_COLS, table.key, strict=True))
    fig = Figure(figsize=(max(6.5, 2.0 + 0.45 * len(table.rows) * (1 if table.show_init else len(table.tasks))),
                          3.4 * len(panels) + 0.8))
    for i, task in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, i + 1)
        factor, groups = bar_groups(table, task)
        marked = [below_best(g, head, factor, pvalues, alpha) for g in groups]
        _draw_panel(ax, groups, marked, styles[factor], refs)
        ax.set_ylabel(_axis_label([task] if task else table.tasks, refs), fontsize=8)
        if task:
            ax.set_title(TASKS.get(task, task), fontsize=9)
        ax.legend(title=factor, fontsize=7, title_fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(table.title, fontsize=9)
    fig.text(0.01, 0.005, f"* significantly below the best bar of its group (paired t-test over seeds, Holm, "
             f"p < {alpha})", fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    _save(fig, path)
    return path


# ---------------------------------------------------------------------------------------- difference matrices


def plot_differences(pooled: pd.DataFrame, title: str, path: Path, alpha: float, digits: int = 1) -> Path:
    """Heat map of the mean paired differences row - column (task ALL), significant cells starred (Holm)."""
    diff, p_holm = pair_matrix(pooled, "diff", antisymmetric=True), pair_matrix(pooled)
    n = len(diff)
    fig = Figure(figsize=(max(4.0, 1.5 + 0.9 * n), max(3.5, 1.2 + 0.8 * n)))
    ax = fig.add_subplot()
    values = diff.to_numpy(dtype=float)
    bound = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 1.0
    image = ax.imshow(np.ma.masked_invalid(values), cmap=colormaps["PuOr"].with_extremes(bad="lightgrey"),
                      norm=TwoSlopeNorm(vcenter=0.0, vmin=-bound or -1.0, vmax=bound or 1.0))
    for i, j in itertools.product(range(n), range(n)):
        if i != j:
            value, p = values[i, j], p_holm.iat[i, j]
            text = "n/a" if np.isnan(value) else f"{value:+.{digits}f}" + ("*" if p < alpha else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=7,
                    color="white" if abs(value) > 0.6 * bound else "black")
    labels = [str(c) for c in diff.columns]
    ax.set_xticks(range(n), labels, rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(n), labels, fontsize=7)
    ax.set_title(title, fontsize=8)
    fig.colorbar(image, ax=ax, label=f"mean difference row - column (* Holm p < {alpha})")
    fig.tight_layout()
    _save(fig, path)
    return path


def write_plots(tables: list[Table], pvalues: pd.DataFrame, frame: pd.DataFrame, out: Path,
                alpha: float) -> dict[tuple[str, str, str], list[Path]]:
    """Every plot, by the (setting, teacher, student) group it shows."""
    names = _Names()
    styles = {factor: level_styles(frame[factor]) for factor in ("objective", "init")}
    written: dict[tuple[str, str, str], list[Path]] = {}
    for t in tables:
        if t.tasks:
            path = out / names(f"scores_{group_stem(*t.key)}")
            written.setdefault(t.key, []).append(plot_scores(t, pvalues, references(frame, t.key), styles, path, alpha))
    for head, part in families(pvalues) if not pvalues.empty else ():
        pooled = part[part["task"] == ALL]
        if pooled.empty:
            continue
        key = (head["setting"], head["teacher"], head["student"])
        name = names(f"differences_{group_stem(*key)}_{safe_name(head['factor'])}_{safe_name(head['fixed'])}")
        title = f"{' / '.join(key)}\n{head['factor']} pairs at {head['fixed']}, task ALL"
        written.setdefault(key, []).append(plot_differences(pooled, title, out / name, alpha))
    return written
