"""Runs as frames (sorted, best grid point, duplicates dropped), the summary, and the paired t-tests."""

from __future__ import annotations

import itertools
import json
import math
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from kdbench.record import KEY_FIELDS
from kdbench.report.collapse import COLLAPSED, HEALTHY
from kdbench.report.load import COST_COLS, exclusion
from kdbench.tasks import TASKS

GROUP_COLS = ["setting", "teacher", "student"]
ROW_COLS = ["objective", "init"]
SUMMARY_COLS = GROUP_COLS + ROW_COLS + ["task", "mean", "std", "n", "collapsed"]
FAMILY_COLS = GROUP_COLS + ["factor", "fixed", "task"]
PVALUE_COLS = FAMILY_COLS + ["a", "b", "n_pairs", "mean_a", "mean_b", "diff", "se", "ci_low", "ci_high", "effect", "t",
                             "p", "p_holm", "seeds_needed"]
POWER = 0.8  # the power at which `seeds_needed` detects a pair's observed difference
MAX_SEEDS = 1000  # seeds_needed above this is reported as this bound
UNMATCHED_COLS = FAMILY_COLS + ["a", "b", "missing_side", "seed"]
# Per run beyond the key: the score's metric and the teacher's score on it, its file, its code version, the paper
# design it stands for (table, init, the analogue's note), its wall times (their sum; per entry of
# `timing` in memory only), the student's parameter count, its measured inference cost, its design
# (config less what does not change a measurement; in memory only, not in results.csv).
ORIGIN_COLS = ["score_metric", "teacher_score", "collapse", "wall_s", "student_parameters", "path",
               "link", "commit", "paper_table", "paper_init", "paper_note", *COST_COLS, "design",
               "timing"]
IN_MEMORY_COLS = ["design", "timing"]  # dicts, not written to results.csv
AVG = "Avg"
ALL = "ALL"
FACTORS = (("objective", "init"), ("init", "objective"))  # (compared factor, held column)
_TASK_POSITION = {name: i for i, name in enumerate(TASKS)}


# ---------------------------------------------------------------------------------------------------- frames


def task_sort_key(task: str) -> tuple:
    """The paper's GLUE order first, then any other task alphabetically."""
    lower = str(task).lower()
    if lower in _TASK_POSITION:
        return (0, _TASK_POSITION[lower], "")
    return (1, 0, lower)


def natural_key(value) -> list:
    """Sort key that orders digit runs numerically: ``"4,8,12"`` before ``"10,11,12"``."""
    parts = re.split(r"(\d+)", str(value))
    return [(0, int(p), "") if p.isdigit() else (1, 0, p.lower()) for p in parts if p]


def ordered_tasks(tasks) -> list[str]:
    return sorted(set(tasks), key=task_sort_key)


def to_frame(records: list[dict]) -> pd.DataFrame:
    """One row per run: key columns, score, one column per metric, path, where it came from (sorted by key)."""
    base = list(KEY_FIELDS) + ["score", "grid"]
    metric_names: list[str] = []
    for record in records:
        for name in record["metrics"]:
            if name not in metric_names:
                metric_names.append(name)
    rename = {name: (f"metric_{name}" if name in base + ORIGIN_COLS else name) for name in metric_names}
    rows = []
    for record in records:
        row = {key: record.get(key) for key in base}
        row.update({rename[name]: value for name, value in record["metrics"].items()})
        row |= {key: record.get(key) for key in ORIGIN_COLS}
        rows.append(row)
    frame = pd.DataFrame(rows, columns=base + [rename[n] for n in metric_names] + ORIGIN_COLS)
    frame["seed"] = frame["seed"].astype("int64")
    frame["score"] = frame["score"].astype(float)
    frame["paper_table"] = frame["paper_table"].astype("Int64")
    frame["teacher_score"] = frame["teacher_score"].astype(float)
    frame["wall_s"] = frame["wall_s"].astype(float)
    frame["student_parameters"] = frame["student_parameters"].astype("Int64")
    return sort_frame(frame)


def _group_key(row: pd.Series) -> tuple:
    return tuple(row[c] for c in GROUP_COLS)


def _row_key(row: pd.Series) -> tuple:
    """(objective, init) in natural order."""
    return (natural_key(row["objective"]), natural_key(row["init"]))


def _sorted_by(frame: pd.DataFrame, key) -> pd.DataFrame:
    """``frame``'s rows ordered by ``key(row)`` (a Python sort key: tuples of mixed types)."""
    order = sorted(range(len(frame)), key=lambda i: key(frame.iloc[i]))
    return frame.iloc[order].reset_index(drop=True)


def sort_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Sort runs by group, task (paper order), objective, init (natural order), seed."""
    if frame.empty:
        return frame.reset_index(drop=True)
    return _sorted_by(frame, lambda r: (*_group_key(r), task_sort_key(r["task"]), *_row_key(r), r["seed"]))


def _excluded_copies(frame: pd.DataFrame, kept: pd.DataFrame, kind: str, reason) -> list[dict]:
    """An exclusion of ``kind`` per row of ``frame``; ``reason(row, kept_row)`` names the run used instead."""
    keys = list(KEY_FIELDS)
    kept = kept.set_index(keys)
    rows = []
    for _, row in frame.iterrows():
        winner = kept.loc[tuple(row[keys])]
        rows.append(exclusion(row["path"], kind, reason(row, winner), {key: row[key] for key in keys}))
    return rows


def best_of_grid(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[dict]]:
    """Fine-tuning grids (the task-agnostic protocol): keep each run's best grid point by dev score.

    Runs that differ only in their grid point (lr, batch size) share a key; the best score is the run's
    result, as in the paper. The other grid points are listed as ``grid`` exclusions (not errors).
    """
    gridded = frame["grid"].notna()
    if not gridded.any():
        return frame, []
    ranked = frame[gridded].sort_values(["score", "path"], ascending=[False, True], kind="stable")
    below = ranked.duplicated(list(KEY_FIELDS), keep="first")
    excluded = _excluded_copies(
        ranked[below],
        ranked[~below],
        "grid",
        lambda row, best: (
            f"grid point {row['grid']} scored {row['score']:.2f}; "
            f"the best, {best['grid']}, scored {best['score']:.2f}"
        ),
    )
    return sort_frame(pd.concat([frame[~gridded], ranked[~below]])), excluded


def design_signature(design: dict | None) -> str:
    """A run's design as comparable text ("" for a record without its config)."""
    return "" if design is None else json.dumps(design, sort_keys=True, default=str)


def drop_duplicates(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[dict]]:
    """Keep the first run (by path) per key and design; the rest become ``duplicate`` exclusions. Runs with one
    key but different designs are not duplicates: :func:`split_designs` decides between them."""
    same = [*KEY_FIELDS, "signature"]
    by_path = frame.sort_values("path", kind="stable").assign(signature=frame["design"].map(design_signature))
    repeated = by_path.duplicated(same, keep="first")
    first = by_path[~repeated].set_index(same)["path"]
    excluded = [
        exclusion(row["path"], "duplicate", f"same run as {first[tuple(row[same])]} (that one is used)",
                  {key: row[key] for key in KEY_FIELDS})
        for _, row in by_path[repeated].iterrows()
    ]
    return sort_frame(by_path[~repeated].drop(columns="signature")), excluded


def split_designs(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[dict]]:
    """Keep, per table cell, the runs of its most common design (ties: the first path's); the others become
    ``config_mismatch`` exclusions naming the config keys they differ in. A cell averages seeds of one design,
    never runs of different recipes. Records without their config are not compared."""
    kept, excluded = [], []
    for _, cell in frame.sort_values("path").groupby(GROUP_COLS + ROW_COLS + ["task"], sort=False):
        signature = cell["design"].map(design_signature)
        known = [sig for sig in signature if sig]
        majority = max(dict.fromkeys(known), key=known.count, default="")  # the first path's among equals
        odd = (signature != "") & (signature != majority)
        kept.append(cell[~odd])
        reference, n_used = json.loads(majority or "{}"), known.count(majority)
        excluded += [
            exclusion(row["path"], "config_mismatch", _design_difference(row["design"], reference, n_used),
                      {key: row[key] for key in KEY_FIELDS})
            for _, row in cell[odd].iterrows()
        ]
    return (sort_frame(pd.concat(kept)) if kept else frame), excluded


def code_versions(frame: pd.DataFrame) -> str:
    """The code the runs came from: each commit (or version) with its number of runs, most runs first."""
    counts = frame["commit"].fillna("unknown").value_counts()
    return ", ".join(f"{commit} ({n} run{'s' if n > 1 else ''})" for commit, n in counts.items())


def _design_difference(design: dict, reference: dict, n_reference: int, limit: int = 4) -> str:
    """Which keys a run's design differs in from the cell's majority design, with both values."""
    keys = sorted(key for key in design.keys() | reference.keys() if design.get(key) != reference.get(key))
    shown = ", ".join(f"{key}={design.get(key)!r} (used: {reference.get(key)!r})" for key in keys[:limit])
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return f"config differs from the {n_reference} run(s) used for this cell in {shown}{more}"


# --------------------------------------------------------------------------------------------------- summary


def summarise(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (group, objective, init, task): mean, sample std (ddof=1, NaN for n=1), n; plus ``Avg`` rows.

    An ``Avg`` row is the mean over tasks of the per-task means, only for (objective, init) rows that have
    every task of their (setting, teacher, student) group.
    """
    if frame.empty:
        return pd.DataFrame(columns=SUMMARY_COLS)
    per_task = (
        frame.groupby(GROUP_COLS + ROW_COLS + ["task"], sort=False)["score"]
        .agg(mean="mean", std=lambda s: s.std(ddof=1) if len(s) > 1 else np.nan, n="count")
        .reset_index()
    )
    per_task["collapsed"] = collapsed_counts(frame).reindex(
        pd.MultiIndex.from_frame(per_task[GROUP_COLS + ROW_COLS + ["task"]])).to_numpy()
    averages = pd.DataFrame(_averages(per_task), columns=SUMMARY_COLS)
    summary = pd.concat([per_task, averages], ignore_index=True)
    summary["n"] = summary["n"].astype("Int64")
    summary["collapsed"] = summary["collapsed"].astype("Int64")
    avg_last = (2, 0, "")  # after every task_sort_key
    return _sorted_by(
        summary[SUMMARY_COLS],
        lambda r: (*_group_key(r), *_row_key(r), avg_last if r["task"] == AVG else task_sort_key(r["task"])),
    )


def collapsed_counts(frame: pd.DataFrame) -> pd.Series:
    """Per (group, objective, init, task): how many runs collapsed to one class (NaN when none is known)."""
    known = frame.assign(known=frame["collapse"].isin([COLLAPSED, HEALTHY]), hit=frame["collapse"] == COLLAPSED)
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


def paired_effect(x, y, confidence: float = 0.95) -> dict:
    """The mean paired difference x - y, its standard error (sample std of the differences / sqrt(n)), its
    two-sided t confidence interval and the standardised effect d_z (mean difference / sample std of the
    differences); NaN for fewer than 2 pairs, d_z NaN when every difference is 0 and infinite when they are
    equal and non-zero."""
    d = np.asarray(x, dtype=float) - np.asarray(y, dtype=float)
    if len(d) < 2:
        return {"diff": float(np.mean(d)) if len(d) else math.nan, "se": math.nan, "ci_low": math.nan,
                "ci_high": math.nan, "effect": math.nan}
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(len(d))
    half = float(stats.t.ppf((1 + confidence) / 2, len(d) - 1)) * se
    effect = mean / sd if sd > 0 else (math.nan if mean == 0 else math.copysign(math.inf, mean))
    return {"diff": mean, "se": se, "ci_low": mean - half, "ci_high": mean + half, "effect": effect}


def equivalence_p(diff: float, se: float, n_pairs: int, margin: float) -> float:
    """The p-value of two one-sided paired t-tests (TOST) that the true mean difference lies within
    (-margin, +margin): the larger of the p-values of ``diff > -margin`` and ``diff < +margin``, each a t-test
    with n - 1 degrees of freedom. Equal differences (``se`` 0) give 0 inside the margin and 1 outside; NaN for
    fewer than 2 pairs."""
    if n_pairs < 2 or math.isnan(se):
        return math.nan
    if se == 0:
        return 0.0 if abs(diff) < margin else 1.0
    above = stats.t.sf((diff + margin) / se, n_pairs - 1)
    below = stats.t.cdf((diff - margin) / se, n_pairs - 1)
    return float(max(above, below))


def equivalence_pairs(diff: float, sd: float, margin: float, alpha: float, power: float = POWER,
                      limit: int = MAX_SEEDS) -> float:
    """About how many pairs TOST at ``alpha`` needs to show equivalence within ``margin`` with ``power`` when the
    true difference is ``diff`` and the differences' std is ``sd``: the normal approximation
    n = ((z_(1-alpha) + z_power) sd / (margin - |diff|))^2, at least 2, ``limit`` at most; NaN when |diff| is
    not inside the margin (no number of pairs shows it equivalent)."""
    if math.isnan(diff) or math.isnan(sd) or abs(diff) >= margin:
        return math.nan
    z = stats.norm.ppf(1 - alpha) + stats.norm.ppf(power)
    return float(min(limit, max(2, math.ceil((z * sd / (margin - abs(diff))) ** 2))))


def paired_power(effect: float, n: int, alpha: float) -> float:
    """The power of a two-sided paired t-test at ``alpha`` with ``n`` pairs against a true standardised effect
    ``effect`` (d_z): the noncentral t with n - 1 degrees of freedom and noncentrality d_z sqrt(n)."""
    critical = stats.t.ppf(1 - alpha / 2, n - 1)
    shift = abs(effect) * math.sqrt(n)
    return float(stats.nct.sf(critical, n - 1, shift) + stats.nct.cdf(-critical, n - 1, shift))


def seeds_needed(effect: float, alpha: float, power: float = POWER, limit: int = MAX_SEEDS) -> float:
    """The fewest pairs n >= 2 whose paired t-test at ``alpha`` detects ``effect`` with ``power``; ``limit`` when
    none up to it does, NaN for a zero or undefined effect, 2 for an infinite one (equal non-zero differences)."""
    if math.isnan(effect) or effect == 0:
        return math.nan
    if math.isinf(effect):
        return 2.0
    if paired_power(effect, limit, alpha) < power:
        return float(limit)
    low, high = 2, limit
    while low < high:  # the power grows with n
        mid = (low + high) // 2
        low, high = (mid + 1, high) if paired_power(effect, mid, alpha) < power else (low, mid)
    return float(low)


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
        **paired_effect(x, y),
        "t": t,
        "p": p,
    }


def _on_task(scores: dict, task: str) -> dict:
    return {key: value for key, value in scores.items() if key[0] == task}


def paired_tests(frame: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Paired t-tests for every pair of levels, per task (levels with runs on it) and pooled (``ALL``), with
    effect sizes; ``seeds_needed`` for the testable pairs that are not significant at ``alpha`` after Holm."""
    rows = []
    for comp in comparisons(frame):
        for task in comp.tasks():
            on_task = {level: _on_task(comp.scores[level], task) for level in comp.levels}
            present = [level for level in comp.levels if on_task[level]]
            for a, b in itertools.combinations(present, 2):
                rows.append(_pair_row(comp, task, a, b, on_task[a], on_task[b]))
        for a, b in itertools.combinations(comp.levels, 2):
            rows.append(_pair_row(comp, ALL, a, b, comp.scores[a], comp.scores[b]))
    pvalues = pd.DataFrame(rows, columns=PVALUE_COLS)
    if not pvalues.empty:
        by_family = pvalues.groupby(FAMILY_COLS, sort=False)["p"]
        pvalues["p_holm"] = by_family.transform(lambda s: holm(s.to_numpy()))
        pvalues["n_pairs"] = pvalues["n_pairs"].astype("int64")
        open_pairs = pvalues["p_holm"] >= alpha
        pvalues["seeds_needed"] = [seeds_needed(e, alpha) if o else math.nan
                                   for e, o in zip(pvalues["effect"], open_pairs, strict=True)]
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


def pair_matrix(pvalues: pd.DataFrame, column: str = "p_holm", antisymmetric: bool = False) -> pd.DataFrame:
    """Level x level matrix of ``column`` for one family (diagonal NaN): symmetric, or with the sign flipped
    below the pairs' own orientation when ``antisymmetric`` (a difference a - b read from b's row is b - a)."""
    levels = sorted(set(pvalues["a"]) | set(pvalues["b"]), key=natural_key)
    matrix = pd.DataFrame(np.nan, index=levels, columns=levels)
    for row in pvalues.itertuples(index=False):
        value = getattr(row, column)
        matrix.at[row.a, row.b] = value
        matrix.at[row.b, row.a] = -value if antisymmetric else value
    return matrix
