"""The summary (mean and std per cell, the ``Avg`` rows) and the paired t-tests between the levels
of each factor, per task and pooled, with the runs that have no pair."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kdbench.report.collapse import COLLAPSED, HEALTHY
from kdbench.report.frames import (
    ALL,
    AVG,
    GROUP_COLS,
    ROW_COLS,
    group_key,
    natural_key,
    row_key,
    sorted_by,
)
from kdbench.report.paired import holm, paired_effect, paired_ttest, seeds_needed
from kdbench.report.task_names import ordered_tasks, task_sort_key

SUMMARY_COLS = GROUP_COLS + ROW_COLS + ["task", "mean", "std", "n", "collapsed"]
FAMILY_COLS = GROUP_COLS + ["factor", "fixed", "task"]
PVALUE_COLS = FAMILY_COLS + [
    "a",
    "b",
    "n_pairs",
    "mean_a",
    "mean_b",
    "diff",
    "se",
    "ci_low",
    "ci_high",
    "effect",
    "t",
    "p",
    "p_holm",
    "seeds_needed",
]
UNMATCHED_COLS = FAMILY_COLS + ["a", "b", "missing_side", "seed"]
FACTORS = (("objective", "init"), ("init", "objective"))  # (compared factor, held column)


# ------------------------------------------------------------------------------------------ summary


def summarise(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (group, objective, init, task): mean, sample std (ddof=1, NaN for n=1), n; plus ``Avg``
    rows.

    An ``Avg`` row is the mean over tasks of the per-task means, only for (objective, init) rows
    that have every task of their (setting, teacher, student) group.
    """
    if frame.empty:
        return pd.DataFrame(columns=SUMMARY_COLS)
    per_task = (
        frame.groupby(GROUP_COLS + ROW_COLS + ["task"], sort=False)["score"]
        .agg(mean="mean", std=lambda s: s.std(ddof=1) if len(s) > 1 else np.nan, n="count")
        .reset_index()
    )
    per_task["collapsed"] = (
        collapsed_counts(frame)
        .reindex(pd.MultiIndex.from_frame(per_task[GROUP_COLS + ROW_COLS + ["task"]]))
        .to_numpy()
    )
    averages = pd.DataFrame(_averages(per_task), columns=SUMMARY_COLS)
    summary = pd.concat([per_task, averages], ignore_index=True)
    summary["n"] = summary["n"].astype("Int64")
    summary["collapsed"] = summary["collapsed"].astype("Int64")
    avg_last = (2, 0, "")  # after every task_sort_key
    return sorted_by(
        summary[SUMMARY_COLS],
        lambda r: (
            *group_key(r),
            *row_key(r),
            avg_last if r["task"] == AVG else task_sort_key(r["task"]),
        ),
    )


def collapsed_counts(frame: pd.DataFrame) -> pd.Series:
    """Per (group, objective, init, task): runs collapsed to one class (NaN when none is known)."""
    known = frame.assign(
        known=frame["collapse"].isin([COLLAPSED, HEALTHY]), hit=frame["collapse"] == COLLAPSED
    )
    counts = known.groupby(GROUP_COLS + ROW_COLS + ["task"], sort=False)[["known", "hit"]].sum()
    return counts["hit"].where(counts["known"] > 0).astype(float)


def _averages(per_task: pd.DataFrame) -> list[dict]:
    """An ``Avg`` row for every (objective, init) row that has every task of its group."""
    averages = []
    for _, group in per_task.groupby(GROUP_COLS, sort=False):
        n_tasks = group["task"].nunique()
        for _, row in group.groupby(ROW_COLS, sort=False):
            if row["task"].nunique() == n_tasks:
                labels = {c: row.iloc[0][c] for c in GROUP_COLS + ROW_COLS}
                averages.append({**labels, "task": AVG, "mean": row["mean"].mean()})
    return averages


# --------------------------------------------------------------------------------------- statistics


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


def _pair_row(
    comp: Comparison, task: str, a: str, b: str, keys_a: dict, keys_b: dict, alpha: float
) -> dict:
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
        **paired_effect(x, y, 1 - alpha),
        "t": t,
        "p": p,
    }


def _on_task(scores: dict, task: str) -> dict:
    return {key: value for key, value in scores.items() if key[0] == task}


def paired_tests(frame: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Paired t-tests for every pair of levels, per task (levels with runs on it) and pooled
    (``ALL``), with effect sizes and the (1 - ``alpha``) interval of a - b; ``seeds_needed`` for
    the testable pairs that are not significant at ``alpha`` after Holm: the pairs a paired t-test
    at ``alpha / m`` needs (m the family's testable pairs), the level at which Holm declares a pair
    whatever the family's other tests show."""
    rows = []
    for comp in comparisons(frame):
        for task in comp.tasks():
            on_task = {level: _on_task(comp.scores[level], task) for level in comp.levels}
            present = [level for level in comp.levels if on_task[level]]
            for a, b in itertools.combinations(present, 2):
                rows.append(_pair_row(comp, task, a, b, on_task[a], on_task[b], alpha))
        for a, b in itertools.combinations(comp.levels, 2):
            rows.append(_pair_row(comp, ALL, a, b, comp.scores[a], comp.scores[b], alpha))
    pvalues = pd.DataFrame(rows, columns=PVALUE_COLS)
    if not pvalues.empty:
        by_family = pvalues.groupby(FAMILY_COLS, sort=False)["p"]
        pvalues["p_holm"] = by_family.transform(lambda s: holm(s.to_numpy()))
        pvalues["n_pairs"] = pvalues["n_pairs"].astype("int64")
        open_pairs = pvalues["p_holm"] >= alpha
        family_sizes = by_family.transform("count")
        pvalues["seeds_needed"] = [
            seeds_needed(e, alpha / m) if o else math.nan
            for e, o, m in zip(pvalues["effect"], open_pairs, family_sizes, strict=True)
        ]
    return pvalues


def unmatched_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """Per compared pair, every (task, seed) that one side has and the other lacks."""
    rows = []
    for comp in comparisons(frame):
        for a, b in itertools.combinations(comp.levels, 2):
            keys_a, keys_b = set(comp.scores[a]), set(comp.scores[b])
            for side, missing in (("b", keys_a - keys_b), ("a", keys_b - keys_a)):
                for task, seed in sorted(missing, key=_key_order):
                    pair = {"task": task, "a": a, "b": b}
                    rows.append({**comp.head, **pair, "missing_side": side, "seed": seed})
    unmatched = pd.DataFrame(rows, columns=UNMATCHED_COLS)
    if unmatched.empty:
        return unmatched
    return unmatched.sort_values(
        ["setting", "teacher", "student", "factor", "fixed", "a", "b", "task", "seed"],
        key=lambda s: s.map(task_sort_key) if s.name == "task" else s,
        kind="stable",
    ).reset_index(drop=True)


def families(pvalues: pd.DataFrame) -> Iterator[tuple[dict, pd.DataFrame]]:
    """(group, factor, fixed) slices of the p-value table, in a stable order."""
    keys = GROUP_COLS + ["factor", "fixed"]
    for key, part in pvalues.groupby(keys, sort=False):
        yield dict(zip(keys, key, strict=True)), part


def pair_matrix(
    pvalues: pd.DataFrame, column: str = "p_holm", antisymmetric: bool = False
) -> pd.DataFrame:
    """Level x level matrix of ``column`` for one family (diagonal NaN): symmetric, or with the sign
    flipped below the pairs' own orientation when ``antisymmetric`` (a difference a - b read from
    b's row is b - a)."""
    levels = sorted(set(pvalues["a"]) | set(pvalues["b"]), key=natural_key)
    matrix = pd.DataFrame(np.nan, index=levels, columns=levels)
    for row in pvalues.itertuples(index=False):
        value = getattr(row, column)
        matrix.at[row.a, row.b] = value
        matrix.at[row.b, row.a] = -value if antisymmetric else value
    return matrix
