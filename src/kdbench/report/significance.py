"""``significance.md``: per family of paired tests, the task-ALL matrix of signed differences and
one table of every pair and task."""

from __future__ import annotations

import pandas as pd

from kdbench.report.frames import ALL
from kdbench.report.stats import families, pair_matrix
from kdbench.report.task_names import ordered_tasks
from kdbench.report.text import (
    fmt,
    format_p,
    level_text,
    md_escape,
    md_row,
    seeds_text,
    signed,
)


def render_significance(pvalues: pd.DataFrame, alpha: float = 0.05, digits: int = 1) -> str:
    """Per family: the task-ALL matrix of signed differences, then one table of every pair and
    task."""
    out = ["# Significance", "", significance_intro(alpha), ""]
    if pvalues.empty:
        out.append("No comparisons: no group has two objectives (or two inits) to compare.")
    for head, part in families(pvalues):
        out += family_section(head, part, alpha, digits)
    return "\n".join(out).rstrip() + "\n"


def significance_intro(alpha: float) -> str:
    return (
        "Paired t-tests (`scipy.stats.ttest_rel`), runs paired by seed (task ALL: by (task, "
        "seed)); where a pair's differences are all equal the t statistic is degenerate and the "
        "exact sign test stands in (p 2^(1 - n); the interval [d, d] where 2^(1 - n) is at most "
        "its alpha, else unbounded). p values are Holm-Bonferroni adjusted within each family "
        "(setting, teacher, student, factor, held value, task); a pair is significant when p "
        f"(Holm) < {alpha}. Means are over the matched pairs; *a - b* is the mean paired "
        f"difference with its {level_text(alpha)} confidence interval, *d_z* the standardised "
        "effect (mean difference / std of the differences). *Pairs for 80% power*: for a testable "
        "pair that is not significant, the pairs (per task: seeds; task ALL: tasks x seeds) a "
        "paired t-test (the sign test, for equal differences) would need to detect the observed "
        f"d_z with 80% power at {alpha} / m, m the family's testable pairs: the level Holm holds a "
        "pair to whatever the family's other tests show."
    )


def family_section(head: dict, part: pd.DataFrame, alpha: float, digits: int) -> list[str]:
    """One family's heading, task-ALL difference matrix and table of pairs."""
    held = "init" if head["factor"] == "objective" else "objective"
    out = [
        f"## {head['setting']} / {head['teacher']} / {head['student']}: "
        f"{head['factor']} pairs at {held} = {md_escape(head['fixed'])}",
        "",
    ]
    return (
        out
        + _pooled_matrix(part[part["task"] == ALL], alpha, digits)
        + _pair_table(part, alpha, digits)
    )


def significance_mark(p_holm: float, alpha: float) -> str:
    return "*" if p_holm < alpha else ""


def _pooled_matrix(pooled: pd.DataFrame, alpha: float, digits: int) -> list[str]:
    """The task-ALL mean differences (row - column) of one family as a markdown matrix, significant
    ones marked (nothing when the family has no pooled test)."""
    if pooled.empty:
        return []
    diff, p_holm = pair_matrix(pooled, "diff", antisymmetric=True), pair_matrix(pooled)
    out = ["Mean difference row - column, task ALL (* significant after Holm):", ""]
    out.append("| | " + " | ".join(md_escape(c) for c in diff.columns) + " |")
    out.append("|---|" + "---:|" * len(diff.columns))
    for level in diff.index:
        cells = [
            "—"
            if level == other
            else signed(diff.at[level, other], digits)
            + significance_mark(p_holm.at[level, other], alpha)
            for other in diff.columns
        ]
        out.append(f"| {md_escape(level)} | " + " | ".join(cells) + " |")
    return out + [""]


def _verdict(row, alpha: float) -> str:
    if pd.isna(row.p_holm):
        return (
            "untestable (" + ("zero variance" if row.n_pairs >= 2 else f"n = {row.n_pairs}") + ")"
        )
    return "yes" if row.p_holm < alpha else "no"


def _pair_table(part: pd.DataFrame, alpha: float, digits: int) -> list[str]:
    """One line per pair and task (ALL first): means, difference with CI, d_z, p, p (Holm),
    significance. A family of one task lists its tests once (task ALL pools that task alone, the
    same test)."""
    tasks = [t for t in ordered_tasks(part["task"]) if t != ALL]
    out = [
        md_row(
            [
                "Task",
                "a",
                "b",
                "n",
                "Mean a",
                "Mean b",
                f"a - b [{level_text(alpha)} CI]",
                "d_z",
                "p",
                "p (Holm)",
                "Significant",
                "Pairs for 80% power",
            ]
        ),
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for task in [ALL] + (tasks if len(tasks) > 1 else []):
        for row in part[part["task"] == task].itertuples(index=False):
            out.append(md_row(_pair_cells(task, row, alpha, digits)))
    return out + [""]


def _pair_cells(task: str, row, alpha: float, digits: int) -> list[str]:
    """One pair's line of the table of pairs, as cells."""
    means = ["" if pd.isna(m) else fmt(m, digits) for m in (row.mean_a, row.mean_b)]
    ci = ""
    if not pd.isna(row.ci_low):
        ci = f" [{signed(row.ci_low, digits)}, {signed(row.ci_high, digits)}]"
    effect = "" if pd.isna(row.effect) else fmt(row.effect, 2)
    seeds = "" if pd.isna(row.seeds_needed) else seeds_text(row.seeds_needed)
    return [
        md_escape(task),
        md_escape(row.a),
        md_escape(row.b),
        str(row.n_pairs),
        *means,
        signed(row.diff, digits) + ci,
        effect,
        format_p(row.p),
        format_p(row.p_holm),
        _verdict(row, alpha),
        seeds,
    ]
