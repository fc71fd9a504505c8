"""``tables.md`` under ``--paper``: each paper table beside the runs that stand for it ("Table k:
published vs measured"), and one line naming the runs that stand for none (the report never guesses
an analogy)."""

from __future__ import annotations

import math

import pandas as pd
from scipy import stats

from kdbench.report.frames import AVG, GROUP_COLS
from kdbench.report.paper import (
    AVG_ROUNDING,
    FIRST_6_TABLES,
    METRIC_NOTES,
    PAPER_CITE,
    PAPER_DESIGNS,
    READ_AS_ACCURACY,
    measured_cells,
    runs_for_table,
)
from kdbench.report.task_names import task_title
from kdbench.report.text import fmt, md_escape, md_head, md_row, signed

FLAG = "†"
DIFF_HEAD = "measured - paper (mean over the tasks shown)"
MEASURED_NOTE = (
    "Measured: mean ± sample std (n runs) over the seeds of the runs that stand for the row, in "
    "the metric the "
    "paper reports (records' metrics are x100, like the paper's); Avg (measured) is the mean of "
    "the per-task means, "
    "only for a row measured on all of the paper's tasks, since the published Avg averages all of "
    "them"
)


def render_versus(frame: pd.DataFrame, paper: pd.DataFrame, digits: int = 1) -> list[str]:
    """Markdown lines: a "Table k: published vs measured" section per paper table and measured
    (setting, teacher, student) with runs matching a published cell, then the line on the runs that
    match no table."""
    return [
        line for _, lines in versus_sections(frame, paper, digits) for line in lines
    ] + _no_analogue(frame)


def versus_sections(
    frame: pd.DataFrame, paper: pd.DataFrame, digits: int = 1
) -> list[tuple[tuple, list[str]]]:
    """(measured group, its markdown lines) per paper table and group with runs matching a published
    cell."""
    sections = []
    for table in sorted(paper["table"].unique()):
        published = paper[paper["table"] == table]
        groups = _matching_groups(measured_cells(frame, paper, table), published)
        for group, cells in groups:
            title = f"Table {table}: published vs measured" + (
                f" ({', '.join(group)})" if len(groups) > 1 else ""
            )
            lines = [f"## {md_escape(title)}", "", _intro(table, group, frame, published), ""]
            lines += (
                _table(published, cells, digits) + [""] + _rank_agreement(published, cells) + [""]
            )
            lines += _footnotes(table, published, cells) + [""]
            sections.append((tuple(group), lines))
    return sections


def _matching_groups(
    measured: pd.DataFrame, published: pd.DataFrame
) -> list[tuple[tuple, pd.DataFrame]]:
    """The measured (setting, teacher, student) groups with a cell of a published row, with their
    cells."""
    return [
        (group, cells)
        for group, cells in measured.groupby(GROUP_COLS, sort=True)
        if not cells.merge(published, on=["objective", "paper_init", "task"]).empty
    ]


def _intro(table: int, group: tuple, frame: pd.DataFrame, published: pd.DataFrame) -> str:
    """Which paper design and which runs are side by side: the paper's own design, or a declared
    replica."""
    runs = runs_for_table(frame, table)
    runs = runs[
        (runs[GROUP_COLS] == list(group)).all(axis=1)
        & runs["paper_init"].isin(published["paper_init"])
    ]
    head = published.iloc[0]
    text = (
        f"Published: {PAPER_CITE}, Table {table} ({head['setting']}, teacher {head['teacher']}, "
        "student "
        f"{head['student']}). Measured: setting {group[0]}, teacher {group[1]}, student "
        f"{group[2]}, "
    )
    declared = runs[runs["paper_table"].notna()]
    if declared.empty:
        text += "the paper's own design"
    else:
        notes = "; ".join(sorted(declared["paper_note"].dropna().unique())) or "no note"
        text += f"a replica whose preset declares Table {table} as its `paper_analogue` ({notes})"
    inits = sorted(
        {f"{a} for {b}" for a, b in zip(runs["init"], runs["paper_init"], strict=True) if a != b}
    )
    return (
        f"_{md_escape(text)}"
        + (f"; its inits stand for the paper's: {', '.join(inits)}" if inits else "")
        + "._"
    )


def _tasks(published: pd.DataFrame, measured: pd.DataFrame) -> list[str]:
    """The paper's tasks with a measured cell in a published row, in the paper's column order."""
    done = set(measured.merge(published, on=["objective", "paper_init", "task"])["task"])
    return [task for task in dict.fromkeys(published["task"]) if task != AVG and task in done]


def _table(published: pd.DataFrame, measured: pd.DataFrame, digits: int) -> list[str]:
    """One row per published row (objective, paper init): per measured task and Avg, published then
    measured."""
    tasks = _tasks(published, measured)
    pub = published.set_index(["objective", "paper_init", "task"])
    got = measured.set_index(["objective", "paper_init", "task"])
    measured_avg = (
        measured["task"] == AVG
    ).any()  # else the column would stay empty: the paper's Avg alone
    columns = [f"{task_title(t)} ({side})" for t in tasks for side in ("paper", "measured")]
    columns += [f"{AVG} (paper)"] + ([f"{AVG} (measured)"] if measured_avg else [])
    out = md_head(columns + [DIFF_HEAD], show_init=True)
    for objective, init in dict.fromkeys(
        zip(published["objective"], published["paper_init"], strict=True)
    ):
        cells = [md_escape(objective), md_escape(init)]
        for task in tasks + [AVG]:
            cells.append(_published(pub.loc[(objective, init, task)]))
            if task != AVG or measured_avg:
                key = (objective, init, task)
                cells.append(_measured(got.loc[key] if key in got.index else None, digits))
        diffs = [
            got.at[key, "measured_mean"] - pub.at[key, "mean"]
            for key in ((objective, init, task) for task in tasks)
            if key in got.index
        ]
        cells.append(signed(sum(diffs) / len(diffs), digits) if diffs else "")
        out.append(md_row(cells))
    return out


def rank_agreement(
    published: pd.DataFrame, measured: pd.DataFrame, task: str
) -> tuple[float, float, int]:
    """Kendall's tau-b (``scipy.stats.kendalltau``) between the published and the measured means of
    the rows measured on ``task``, its two-sided p-value and the number of rows (NaN below 3 rows or
    without variation)."""
    pub = published[(published["task"] == task) & ~published["quoted"]].set_index(
        ["objective", "paper_init"]
    )
    got = measured[measured["task"] == task].set_index(["objective", "paper_init"])
    rows = [key for key in got.index if key in pub.index]
    if len(rows) < 3:
        return math.nan, math.nan, len(rows)
    result = stats.kendalltau(
        [pub.at[key, "mean"] for key in rows], [got.at[key, "measured_mean"] for key in rows]
    )
    return float(result.statistic), float(result.pvalue), len(rows)


def _rank_agreement(published: pd.DataFrame, measured: pd.DataFrame) -> list[str]:
    """One line: per task, Kendall's tau between the published and measured means of the table's
    rows."""
    parts = []
    for task in _tasks(published, measured):
        tau, p, n = rank_agreement(published, measured, task)
        value = "n/a" if math.isnan(tau) else f"{signed(tau, 2)} (p {p:.2g})"
        parts.append(f"{task_title(task)} {value} over {n} rows")
    return [
        "_Rank agreement of measured and published means (Kendall's tau-b over the rows, per "
        "task: "
        f"across tasks the ranks would mostly order the tasks): {md_escape('; '.join(parts))}._"
    ]


def _published(cell: pd.Series) -> str:
    """A published value as the paper prints it: mean (one decimal) ± std (two), the Avg flagged
    when off."""
    text = f"{cell['mean']:.1f}" + ("" if math.isnan(cell["std"]) else f" ± {cell['std']:.2f}")
    flagged = pd.notna(cell["avg_flag"]) and bool(cell["avg_flag"])
    return text + (f" {FLAG}" if flagged else "")


def _measured(cell: pd.Series | None, digits: int) -> str:
    """``mean ± std (n)`` of the measured runs (``mean (n)`` for one run, ``mean`` for Avg); empty
    when none."""
    if cell is None:
        return ""
    mean = fmt(cell["measured_mean"], digits)
    if pd.isna(cell["measured_n"]):
        return mean
    std = "" if pd.isna(cell["measured_std"]) else f" ± {fmt(cell['measured_std'], digits)}"
    return f"{mean}{std} ({int(cell['measured_n'])})"


def _footnotes(table: int, published: pd.DataFrame, measured: pd.DataFrame) -> list[str]:
    """What the numbers are: published and measured cells, the metric mapping, flagged Avgs, quoted
    rows, the tasks not shown."""
    n_runs = int(published["n_runs"].iloc[0])
    kind = (
        f"mean ± std over {n_runs} runs"
        if n_runs > 1
        else "one run's best fine-tuning grid point, no std"
    )
    notes = [
        f"Published: as printed ({kind}). {MEASURED_NOTE}",
        "Metrics: "
        + METRIC_NOTES["accuracy" if table in READ_AS_ACCURACY else "labelled"]
        + "; MNLI's column is compared with accuracy on the "
        "matched dev set (kdbench's MNLI score), the other "
        "tasks' with accuracy",
    ]
    notes += _flag_note(published)
    if published["quoted"].any():
        notes.append(
            "Rows marked (published) are earlier systems' numbers that the paper quotes, not runs "
            "of its "
            "design: no run is matched to them"
        )
    if table in FIRST_6_TABLES and (published["paper_init"] == "first 6").any():
        notes.append("Init first 6: the teacher's first six layers (kdbench init 1,2,3,4,5,6)")
    shown = _tasks(published, measured)
    unmeasured = [
        task_title(t) for t in dict.fromkeys(published["task"]) if t != AVG and t not in shown
    ]
    if unmeasured:
        notes.append(
            f"Not shown, no measured run: {', '.join(unmeasured)} (their published cells are in "
            "paper.csv)"
        )
    return [line for note in notes for line in (f"_{md_escape(note)}._", "")][:-1]


def _flag_note(published: pd.DataFrame) -> list[str]:
    """The footnote on the flagged Avgs of a table: the rule and each flagged row's printed value
    and mean."""
    flagged = published[published["avg_flag"].fillna(False).astype(bool)]
    if flagged.empty:
        return []
    k = published.loc[published["task"] != AVG, "task"].nunique()
    rows = "; ".join(
        f"{r.objective} {r.paper_init} (printed {r.mean:.1f}, mean {r.cells_mean:.2f})"
        for r in flagged.itertuples()
    )
    return [
        f"{FLAG} The printed Avg differs from the mean of the row's {k} published cells by more "
        "than rounding "
        f"(more than {AVG_ROUNDING:g}: half the printed digit for the Avg and at most half for the "
        f"mean of {k} rounded cells): {rows}. It is shown as printed"
    ]


def _no_analogue(frame: pd.DataFrame) -> list[str]:
    """One line naming the runs that stand for no paper table, or nothing when every run stands for
    one."""
    standing = set().union(*(runs_for_table(frame, table).index for table in PAPER_DESIGNS))
    rest = frame.drop(index=list(standing))
    if rest.empty:
        return []
    counts = rest.groupby(GROUP_COLS, sort=True).size()
    groups = ", ".join(
        f"{' / '.join(key)} ({n} run{'s' if n > 1 else ''})" for key, n in counts.items()
    )
    return [
        f"_No published numbers beside {md_escape(groups)}: these runs neither declare a "
        "`paper_analogue` "
        "that maps their init nor are the paper's own design, and the report does not guess an "
        "analogy._",
        "",
    ]
