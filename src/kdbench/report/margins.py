"""The margin of a claimed tie: a stated property of each task's metric, by default a number of its
dev set's examples (the resolution of its scores), and the margin of a comparison pooled over tasks.

A difference of one dev example moves an accuracy by 100 / n points on a dev set of n examples; for
another metric on the same x100 scale (F1, MCC, a correlation) the report takes the same share of
the dev set, an approximation. A comparison pooled over tasks is the mean of its pairs' differences,
each in its task's points, so its margin is the mean of the pairs' task margins: if every pair's
difference lies within its task's margin, their mean lies within this one.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

from kdbench.report.task_names import task_title
from kdbench.tasks import DEV_EXAMPLES

_GOLD = re.compile(r"dev_class_\d+")


@dataclass(frozen=True)
class Margin:
    """A claimed tie's margin in score points (NaN when unknown) and where it comes from, in
    words."""

    points: float
    source: str

    @property
    def known(self) -> bool:
        return not math.isnan(self.points)


def dev_sizes(runs: pd.DataFrame) -> dict[str, int]:
    """Per task of ``runs``: the size of the dev set its runs were scored on, the sum of a record's
    gold label counts (``dev_class_<c>``) where the records keep them (the most common sum), else
    :data:`kdbench.tasks.DEV_EXAMPLES`; a task with neither is left out."""
    gold = [column for column in runs.columns if _GOLD.fullmatch(str(column))]
    sizes = {}
    for task, part in runs.groupby("task", sort=False):
        counts = part[gold].dropna(axis=1, how="all") if gold else pd.DataFrame()
        totals = counts.sum(axis=1, min_count=1).dropna() if not counts.empty else pd.Series()
        if len(totals):
            sizes[task] = int(totals.mode().iloc[0])
        elif task in DEV_EXAMPLES:
            sizes[task] = DEV_EXAMPLES[task]
    return sizes


def stated_margin(points: float) -> Margin:
    return Margin(points, f"+-{points:g} points, stated by the claim")


def pooled_margin(pairs: dict[str, int], sizes: dict[str, int], examples: int) -> Margin:
    """The margin of a comparison whose pairs lie on ``pairs`` (task -> number of pairs): each
    task's ``examples`` dev examples in points, averaged over the pairs."""
    tasks = [task for task, n in pairs.items() if n > 0]
    unknown = [task for task in tasks if task not in sizes]
    if unknown or not tasks:
        names = ", ".join(task_title(t) for t in unknown) or "no task"
        return Margin(math.nan, f"unknown: no dev set size for {names}")
    points = {task: 100 * examples / sizes[task] for task in tasks}
    mean = sum(points[t] * pairs[t] for t in tasks) / sum(pairs[t] for t in tasks)
    if len(tasks) == 1:
        (task,) = tasks
        return Margin(mean, f"{examples} of {task_title(task)}'s {sizes[task]} dev examples")
    each = ", ".join(f"{task_title(t)} {points[t]:.2f}" for t in tasks)
    return Margin(mean, f"{examples} dev examples of each task ({each}), averaged over the pairs")
