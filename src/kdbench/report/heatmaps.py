"""Heat maps of a study's mean paired differences (row - column, task ALL), one per (factor, held
level), all on one symmetric colour scale, significant cells starred and framed."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from kdbench.report.figures import OBJECTIVE_COLOURS, family_order, save_png
from kdbench.report.stats import pair_matrix
from kdbench.report.text import signed


def plot_differences(
    pooled: list[tuple[str, pd.DataFrame]], title: str, path: Path, alpha: float, digits: int = 1
) -> Path:
    """Heat maps of the mean paired differences row - column (task ALL), one per (factor, held
    level) of a study, all on one symmetric colour scale; significant cells starred (Holm)."""
    values = [pair_matrix(part, "diff", antisymmetric=True) for _, part in pooled]
    finite = [
        float(np.nanmax(np.abs(v.to_numpy(dtype=float))))
        for v in values
        if np.isfinite(v.to_numpy()).any()
    ]
    bound = max(finite, default=1.0) or 1.0
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-bound, vmax=bound)
    columns = min(3, len(pooled))
    rows = math.ceil(len(pooled) / columns)
    size = max(len(v) for v in values)
    fig = Figure(
        figsize=(
            columns * max(3.2, 0.8 + 0.7 * size) + 1.2,
            rows * max(2.8, 0.9 + 0.6 * size) + 0.6,
        )
    )
    image = None
    for k, ((label, part), diff) in enumerate(zip(pooled, values, strict=True)):
        ax = fig.add_subplot(rows, columns, k + 1)
        image = _matrix(ax, diff, pair_matrix(part), norm, bound, alpha, digits)
        ax.set_title(label, fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.9, 0.95))
    colourbar = fig.add_axes((0.92, 0.15, 0.015, 0.7))
    fig.colorbar(image, cax=colourbar, label=f"row - column, points (* Holm p < {alpha})")
    save_png(fig, path)
    return path


def _matrix(
    ax, diff: pd.DataFrame, p_holm: pd.DataFrame, norm, bound: float, alpha: float, digits: int
):
    """One heat map, objectives in family order; significant cells starred and framed."""
    if set(diff.index) <= set(OBJECTIVE_COLOURS):
        order = family_order(diff.index)
        diff, p_holm = (
            diff.reindex(index=order, columns=order),
            p_holm.reindex(index=order, columns=order),
        )
    values = diff.to_numpy(dtype=float)
    image = ax.imshow(
        np.ma.masked_invalid(values),
        cmap=colormaps["PuOr"].with_extremes(bad="lightgrey"),
        norm=norm,
    )
    n = len(diff)
    for i, j in itertools.product(range(n), range(n)):
        if i != j:
            value, p = values[i, j], p_holm.iat[i, j]
            text = "n/a" if np.isnan(value) else signed(value, digits) + ("*" if p < alpha else "")
            if p < alpha:
                ax.add_patch(
                    Rectangle(
                        (j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=1.5
                    )
                )
            ax.text(
                j,
                i,
                text,
                ha="center",
                va="center",
                fontsize=6,
                color="white" if abs(value) > 0.6 * bound else "black",
            )
    labels = [str(c) for c in diff.columns]
    ax.set_xticks(range(n), labels, rotation=45, ha="right", fontsize=6)
    ax.set_yticks(range(n), labels, fontsize=6)
    return image
