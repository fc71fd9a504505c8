"""The findings that open claims.md and report.html, generated from the runs: per (setting, teacher,
student) study its design, which runs collapsed to one class, which pooled comparisons differ
significantly and by how much, which do not and how many seeds would settle them; then the claims'
verdicts in one line each, the claims no run covers in one line."""

from __future__ import annotations

import pandas as pd

from kdbench.report.collapse import COLLAPSED, HEALTHY
from kdbench.report.frames import ALL, GROUP_COLS, natural_key
from kdbench.report.task_names import ordered_tasks, task_title
from kdbench.report.text import fmt, format_p, level_text, md_escape, seeds_text, signed

SHOWN = 8  # significant comparisons listed per study; the rest are in significance.md


def _levels(values) -> str:
    return ", ".join(sorted({str(v) for v in values}, key=natural_key))


def design_line(runs: pd.DataFrame) -> str:
    """A study's design in words: objectives x inits on its tasks, its seeds and runs."""
    seeds = sorted(runs["seed"].unique())
    tasks = ", ".join(task_title(t) for t in ordered_tasks(runs["task"]))
    return (
        f"{runs['objective'].nunique()} objective(s) ({_levels(runs['objective'])}) x "
        f"{runs['init'].nunique()} init(s) ({_levels(runs['init'])}) on {tasks}; seeds "
        f"{', '.join(str(s) for s in seeds)}; {len(runs)} runs"
    )


def _collapse_line(runs: pd.DataFrame) -> str:
    collapsed = runs[runs["collapse"] == COLLAPSED]
    known = int(runs["collapse"].isin([COLLAPSED, HEALTHY]).sum())
    if known == 0:
        return (
            "- Collapse: unknown (the records keep neither "
            "predicted-label counts nor dev label counts)."
        )
    if collapsed.empty:
        return f"- Collapse: none of the {known} runs with known predictions predicts one class."
    if len(collapsed) == len(runs):
        return (
            f"- **Every run collapsed**: all {len(runs)} runs predict one class for at least 95% "
            "of the dev "
            "set, so the scores compare nothing and no comparison is made."
        )
    cells = collapsed.groupby(["objective", "init", "task"]).size()
    named = "; ".join(f"{o} at {i} on {task_title(t)} ({k})" for (o, i, t), k in cells.items())
    unknown = len(runs) - known
    rest = (
        f" {unknown} more score(s) lie within 5 points of a constant predictor's without "
        "predicted-label "
        "counts to tell"
        if unknown
        else ""
    )
    return (
        f"- **{len(collapsed)} of {len(runs)} runs "
        f"collapsed** to one class: {md_escape(named)}.{rest}"
    )


def _teacher_line(runs: pd.DataFrame) -> list[str]:
    """The runs whose teacher has not learned (kdbench.report.collapse's rule), where any has."""
    failed = runs[runs["teacher_collapse"] == COLLAPSED]
    if failed.empty:
        return []
    tasks = ", ".join(task_title(t) for t in ordered_tasks(failed["task"]))
    return [
        f"- **The teacher of {len(failed)} of {len(runs)} runs has not learned** "
        f"({md_escape(tasks)}: one class for at least 95% of the dev set, or a regression at "
        "chance): their students learn nothing from it."
    ]


def _pooled(pvalues: pd.DataFrame, key: tuple) -> pd.DataFrame:
    if pvalues.empty:
        return pvalues
    mine = pvalues[(pvalues[GROUP_COLS] == pd.Series(key, index=GROUP_COLS)).all(axis=1)]
    return mine[mine["task"] == ALL]


def _comparison(row, alpha: float, digits: int) -> str:
    """A significant pair as high > low: the difference high - low and its (1 - alpha) interval,
    signs kept."""
    sign = 1.0 if row.diff >= 0 else -1.0
    high, low = (row.a, row.b) if sign > 0 else (row.b, row.a)
    ci = sorted((sign * row.ci_low, sign * row.ci_high))
    held = "init" if row.factor == "objective" else "objective"
    return (
        f"{high} > {low} by {fmt(sign * row.diff, digits)} points ({level_text(alpha)} CI "
        f"{signed(ci[0], digits)} to {signed(ci[1], digits)}; {held} {row.fixed}; "
        f"Holm p {format_p(row.p_holm)})"
    )


def _test_lines(pooled: pd.DataFrame, alpha: float, digits: int) -> list[str]:
    if pooled.empty:
        return ["- Comparisons: none (no two objectives or inits to compare)."]
    significant = pooled[pooled["p_holm"] < alpha].assign(size=lambda f: f["diff"].abs())
    significant = significant.sort_values("size", ascending=False)
    shown = "; ".join(
        _comparison(row, alpha, digits) for row in significant.head(SHOWN).itertuples()
    )
    more = (
        f"; and {len(significant) - SHOWN} more (significance.md)"
        if len(significant) > SHOWN
        else ""
    )
    lines = [
        f"- Differ significantly (paired t-test pooled over tasks, Holm, p < {alpha}): "
        f"{len(significant)} of "
        f"{len(pooled)} pairs" + (f": {md_escape(shown + more)}." if shown else ".")
    ]
    open_pairs = pooled[~(pooled["p_holm"] < alpha)]
    if not open_pairs.empty:
        gaps = open_pairs["diff"].abs()
        seeds = open_pairs["seeds_needed"].dropna()
        one = len(open_pairs) == 1
        settle = (
            f"; at {'its observed effect' if one else 'their observed effects'} a paired t-test "
            f"would need {value_range(seeds, seeds_text)} for 80% power at alpha / m (m the "
            "testable pairs of its family: Holm's level)"
            if not seeds.empty
            else ""
        )
        gap_text = value_range(gaps, lambda v: fmt(v, digits), median=False)
        lines.append(
            f"- Not significantly different: {len(open_pairs)} pair{'' if one else 's'}, "
            f"{'a gap of' if one else 'gaps'} {gap_text} "
            f"points{settle} (not significant is not equal: see claims for equivalence tests)."
        )
    return lines


def value_range(values: pd.Series, text, median: bool = True) -> str:
    """`text` of the one value, or of the least to the greatest (and of the median)."""
    low, high = text(values.min()), text(values.max())
    middle = f" (median {text(values.median())})" if median else ""
    return low if low == high else f"{low} to {high}{middle}"


def study_findings(
    frame: pd.DataFrame, pvalues: pd.DataFrame, alpha: float, digits: int
) -> list[str]:
    """Per study: its design as the heading, then collapse, significant and open comparisons."""
    lines = []
    for key, runs in frame.groupby(GROUP_COLS, sort=True):
        lines += [
            f"### {md_escape(' / '.join(key))}: {md_escape(design_line(runs))}",
            "",
            _collapse_line(runs),
            *_teacher_line(runs),
        ]
        if (runs["collapse"] == COLLAPSED).all():
            lines.append("")
            continue
        lines += _test_lines(_pooled(pvalues, key), alpha, digits) + [""]
    return lines
