"""PNG plots: every seed's score with its cell's mean and 95% t interval, and the matrices of signed paired
differences of a study on one symmetric colour scale."""

from __future__ import annotations

import io
import itertools
import math
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from PIL import Image
from scipy import stats

from kdbench.report.collapse import COLLAPSED
from kdbench.report.frames import GROUP_COLS, natural_key
from kdbench.report.paper import PAPER_DESIGNS, runs_for_table
from kdbench.report.stats import ALL, families, pair_matrix
from kdbench.report.tables import Table
from kdbench.tasks import MAJORITY, TASKS

# One colour per objective and per init in every report (Paul Tol's colour-blind-safe "muted" and "vibrant"
# schemes). Inits are coloured by role: a 6-layer teacher's every-k-th (2,4,6) and spread (1,4,6) inits share the
# colours of the 12-layer ones they stand for.
OBJECTIVE_COLOURS = {
    "vanilla_kd": "#332288", "distilbert": "#0077BB",
    "hid_cls": "#117733", "hid_cls_contrast": "#44AA99", "hid_seq": "#999933",
    "att_mse": "#882255", "att_kl": "#CC6677", "att_mse+hid_seq": "#AA4499", "att_kl+hid_seq": "#DDCC77",
    "att_kl+val_kl": "#88CCEE", "val_kl": "#EE7733", "minilm_v2": "#EE3377", "tinybert": "#CC3311",
}
INIT_COLOURS = {
    "4,8,12": "#0077BB", "2,4,6": "#0077BB", "1,8,12": "#009988", "1,4,6": "#009988", "1,2,3": "#EE7733",
    "random": "#555555", "1,2,3,4,5,6": "#EE3377", "first 6": "#EE3377",
}
FALLBACK = ("#33BBEE", "#CC3311", "#BBBBBB", "#000000", "#DDAA33", "#BB5566")  # other levels, by a hash of the name
FAMILIES = ("vanilla", "hidden", "attention", "other")
COLLAPSED_COLOUR = "#444444"
LEGEND_LEFT = 0.8  # the score plots' legend sits right of this fraction of the figure
TEACHER_STYLE = {"color": "black", "linestyle": "--", "linewidth": 1.0}
MAJORITY_STYLE = {"color": "#BB5566", "linestyle": ":", "linewidth": 1.2}


def colour_of(factor: str, level: str) -> str:
    """The colour of an objective (``factor`` "objective") or an init, the same in every plot of every report."""
    fixed = OBJECTIVE_COLOURS if factor == "objective" else INIT_COLOURS
    return fixed.get(str(level)) or FALLBACK[zlib.crc32(str(level).encode()) % len(FALLBACK)]


def family_of(objective: str) -> str:
    """vanilla (prediction-layer KD), hidden (hidden-state transfer), attention (attention or value relations,
    alone or combined with hidden states), or other."""
    name = str(objective)
    if name == "vanilla_kd":
        return "vanilla"
    if any(part in name for part in ("att", "val_", "minilm", "tinybert")):
        return "attention"
    if name.startswith("hid") or name == "distilbert":
        return "hidden"
    return "other"


def family_order(objectives) -> list[str]:
    """Objectives grouped by family (vanilla, hidden, attention, other), naturally sorted within each."""
    return sorted(set(objectives), key=lambda o: (FAMILIES.index(family_of(o)), natural_key(o)))


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
    _save(fig, path)
    return path


# ---------------------------------------------------------------------------------------- difference matrices


def plot_differences(pooled: list[tuple[str, pd.DataFrame]], title: str, path: Path, alpha: float,
                     digits: int = 1) -> Path:
    """Heat maps of the mean paired differences row - column (task ALL), one per (factor, held level) of a study,
    all on one symmetric colour scale; significant cells starred (Holm)."""
    values = [pair_matrix(part, "diff", antisymmetric=True) for _, part in pooled]
    finite = [float(np.nanmax(np.abs(v.to_numpy(dtype=float)))) for v in values if np.isfinite(v.to_numpy()).any()]
    bound = max(finite, default=1.0) or 1.0
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-bound, vmax=bound)
    columns = min(3, len(pooled))
    rows = math.ceil(len(pooled) / columns)
    size = max(len(v) for v in values)
    fig = Figure(figsize=(columns * max(3.2, 0.8 + 0.7 * size) + 1.2, rows * max(2.8, 0.9 + 0.6 * size) + 0.6))
    image = None
    for k, ((label, part), diff) in enumerate(zip(pooled, values, strict=True)):
        ax = fig.add_subplot(rows, columns, k + 1)
        image = _matrix(ax, diff, pair_matrix(part), norm, bound, alpha, digits)
        ax.set_title(label, fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.9, 0.95))
    colourbar = fig.add_axes((0.92, 0.15, 0.015, 0.7))
    fig.colorbar(image, cax=colourbar, label=f"row - column, points (* Holm p < {alpha})")
    _save(fig, path)
    return path


def _matrix(ax, diff: pd.DataFrame, p_holm: pd.DataFrame, norm, bound: float, alpha: float, digits: int):
    """One heat map, objectives in family order; significant cells starred and framed."""
    if set(diff.index) <= set(OBJECTIVE_COLOURS):
        order = family_order(diff.index)
        diff, p_holm = diff.reindex(index=order, columns=order), p_holm.reindex(index=order, columns=order)
    values = diff.to_numpy(dtype=float)
    image = ax.imshow(np.ma.masked_invalid(values), cmap=colormaps["PuOr"].with_extremes(bad="lightgrey"), norm=norm)
    n = len(diff)
    for i, j in itertools.product(range(n), range(n)):
        if i != j:
            value, p = values[i, j], p_holm.iat[i, j]
            text = "n/a" if np.isnan(value) else f"{value:+.{digits}f}" + ("*" if p < alpha else "")
            if p < alpha:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=1.5))
            ax.text(j, i, text, ha="center", va="center", fontsize=6,
                    color="white" if abs(value) > 0.6 * bound else "black")
    labels = [str(c) for c in diff.columns]
    ax.set_xticks(range(n), labels, rotation=45, ha="right", fontsize=6)
    ax.set_yticks(range(n), labels, fontsize=6)
    return image


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
