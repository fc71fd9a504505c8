"""PNG plots: mean scores per table and heat maps of the task-ALL Holm p values."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

from kdbench.report.stats import ALL, families, pair_matrix
from kdbench.report.tables import Table
from kdbench.report.text import format_p
from kdbench.tasks import TASKS


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
    ax.set_xticks(x, [TASKS.get(t, t) for t in table.tasks])
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
    for head, part in families(pvalues):
        pooled = part[part["task"] == ALL]
        if pooled.empty:
            continue
        stem = group_stem(head["setting"], head["teacher"], head["student"])
        name = names(f"pvalues_{stem}_{safe_name(head['factor'])}_{safe_name(head['fixed'])}")
        title = (
            f"{head['setting']} / {head['teacher']} / {head['student']}\n"
            f"{head['factor']} pairs at {head['fixed']}, task ALL"
        )
        written.append(plot_pvalues(pair_matrix(pooled), title, out / name, alpha))
    return written
