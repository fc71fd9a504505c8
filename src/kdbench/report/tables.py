"""Score tables per (setting, teacher, student), rendered as markdown and LaTeX."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from kdbench.report.frames import (
    AVG,
    GROUP_COLS,
    ROW_COLS,
    chosen_on_dev,
    natural_key,
)
from kdbench.report.task_names import ordered_tasks, task_title
from kdbench.report.text import column_head, fmt, md_escape, md_head, md_row

NO_SCORE = "—"  # a cell of the design without a completed run


@dataclass
class Table:
    """One (setting, teacher, student) table: rows (objective, init), columns tasks + Avg."""

    setting: str
    teacher: str
    student: str
    rows: list[tuple[str, str]]
    tasks: list[str]
    show_init: bool
    mean: pd.DataFrame  # index: rows, columns: tasks + [AVG]
    std: pd.DataFrame
    n: pd.DataFrame  # tasks only
    inits: list[str] = field(default_factory=list)
    collapsed: pd.DataFrame | None = None  # tasks only: runs collapsed to one class (NaN: unknown)
    chosen: str = ""  # what its scores were chosen on, when it is the dev set they report
    # per (row, task): how many of the design's jobs of the cell did not finish, by kind
    short: dict[tuple, Counter] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.setting, self.teacher, self.student)

    @property
    def columns(self) -> list[str]:
        """The tasks, and Avg when there are several (for one task it would repeat its column)."""
        return self.tasks + ([AVG] if len(self.tasks) > 1 else [])

    def collapsed_runs(self, row, column: str) -> int | None:
        """How many runs of a cell collapsed to one class (None: unknown, or the Avg column)."""
        if self.collapsed is None or column not in self.collapsed.columns:
            return None
        value = self.collapsed.at[row, column]
        return None if pd.isna(value) else int(value)

    def all_collapsed(self, row, column: str) -> bool:
        """Every run of the cell collapsed (for Avg: of every task's cell)."""
        if column == AVG:
            return all(self.all_collapsed(row, task) for task in self.tasks)
        k = self.collapsed_runs(row, column)
        return bool(k) and k == int(self.n.at[row, column])

    @property
    def title(self) -> str:
        text = f"setting {self.setting}, teacher {self.teacher}, student {self.student}"
        if not self.show_init and self.inits:
            text += f", init {self.inits[0]}"
        return text

    def modal_n(self) -> int | None:
        counts = Counter(int(v) for v in self.n.to_numpy().ravel() if pd.notna(v) and v > 0)
        if not counts:
            return None
        top = max(counts.values())
        return max(n for n, c in counts.items() if c == top)

    def n_uniform(self) -> bool:
        values = {int(v) for v in self.n.to_numpy().ravel() if pd.notna(v) and v > 0}
        return len(values) <= 1


def build_tables(
    summary: pd.DataFrame, frame: pd.DataFrame | None = None, excluded: list[dict] | None = None
) -> list[Table]:
    """Pivot the long summary into one :class:`Table` per (setting, teacher, student); with the
    runs (`frame`), each says what its scores were chosen on (`chosen_on_dev`); with the
    exclusions, the cells of the design whose jobs did not all finish (`unfinished_cells`), and a
    table for each group of the design without a completed run."""
    if summary.empty:
        return []
    runs = {} if frame is None else dict(list(frame.groupby(GROUP_COLS, sort=True)))
    unfinished = unfinished_cells(excluded or [])
    groups = dict(list(summary.groupby(GROUP_COLS, sort=True)))
    keys = sorted(groups.keys() | {cell[:3] for cell in unfinished})
    return [
        _table(
            key,
            groups.get(key, summary.iloc[:0]),
            "" if key not in runs else chosen_on_dev(runs[key]),
            {(cell[3:5], cell[5]): kinds for cell, kinds in unfinished.items() if cell[:3] == key},
        )
        for key in keys
    ]


def _table(key: tuple[str, str, str], group: pd.DataFrame, chosen: str, short: dict) -> Table:
    """One group's summary rows pivoted to (objective, init) x task, with the cells of the design
    that have none (`short`: per (row, task) its unfinished jobs by kind)."""
    per_task = group[group["task"] != AVG]
    tasks = ordered_tasks([*per_task["task"], *(task for _, task in short)])
    rows = sorted(
        {tuple(r) for r in per_task[ROW_COLS].itertuples(index=False, name=None)}
        | {row for row, _ in short},
        key=lambda r: (natural_key(r[0]), natural_key(r[1])),
    )
    index = pd.MultiIndex.from_tuples(rows, names=ROW_COLS)

    def pivot(value, columns):
        wide = group.pivot_table(
            index=ROW_COLS, columns="task", values=value, aggfunc="first", dropna=False
        )
        return wide.reindex(index=index, columns=columns)

    inits = sorted({*per_task["init"], *(row[1] for row in rows)}, key=natural_key)
    setting, teacher, student = key
    return Table(
        setting=setting,
        teacher=teacher,
        student=student,
        rows=rows,
        tasks=tasks,
        show_init=len(inits) > 1,
        mean=pivot("mean", tasks + [AVG]).astype(float),
        std=pivot("std", tasks + [AVG]).astype(float),
        n=pivot("n", tasks),
        inits=inits,
        collapsed=pivot("collapsed", tasks).astype(float),
        chosen=chosen,
        short=short,
    )


def best_rows(table: Table, column: str, digits: int) -> set[tuple[str, str]]:
    """Rows whose displayed mean equals the column maximum, among the cells whose runs did not all
    collapse to one class; empty when the column has < 2 such values."""
    col = table.mean[column].dropna()
    col = col[[not table.all_collapsed(row, column) for row in col.index]]
    if len(col) < 2:
        return set()
    best = round(col.max(), digits)
    return {row for row, value in col.items() if round(value, digits) == best}


def _cell_parts(
    table: Table, row, column: str, digits: int
) -> tuple[str, str | None, int | None] | None:
    """(mean text, std text or None, n to mark or None) for one cell, None when empty."""
    mean = table.mean.at[row, column]
    if pd.isna(mean):
        return None
    if column == AVG:
        return fmt(mean, digits), None, None
    n = int(table.n.at[row, column])
    std = table.std.at[row, column]
    std_text = fmt(std, digits) if n > 1 and pd.notna(std) else None
    mark = n if not table.n_uniform() and n != table.modal_n() else None
    return fmt(mean, digits), std_text, mark


def _footnote(table: Table) -> str:
    modal = table.modal_n()
    if modal is None:  # a group of the design without a completed run
        return " ".join(filter(None, [short_note(table), table.chosen]))
    seeds = "seed" if modal == 1 else "seeds"
    marked = "" if table.n_uniform() else " unless marked (n=k)"
    counted = f"n = {modal} {seeds} per cell{marked}."
    return " ".join(filter(None, [counted, short_note(table), table.chosen]))


def short_note(table: Table) -> str:
    """What the cells short of the design's seeds lack, and why (their exclusions)."""
    cells = []
    for (row, task), kinds in sorted(
        table.short.items(),
        key=lambda c: (table.rows.index(c[0][0]), table.tasks.index(c[0][1])),
    ):
        n = table.n.at[row, task]
        lacking = sum(kinds.values())
        label = f"{row[0]} ({row[1]})" if table.show_init else row[0]
        why = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
        design = lacking + (0 if pd.isna(n) else int(n))
        cells.append(f"{label} on {task_title(task)} lacks {lacking} of {design} ({why})")
    if not cells:
        return ""
    dash = (
        f"; {NO_SCORE}: no completed run"
        if any(pd.isna(table.mean.at[row, task]) for row, task in table.short)
        else ""
    )
    return f"Seeds of the design without a score (Excluded runs): {'; '.join(cells)}{dash}."


DESCRIPTION = (
    "Cells: mean ± sample std (ddof=1) over seeds; a single-seed cell shows the mean only. Avg "
    "(tables of several tasks): mean over tasks of the per-task means, only for rows that have "
    "every task of the table. Bold: best mean per column among the cells whose runs did not all "
    "collapse. [collapsed] / [k collapsed]: every run / k runs of the cell predict one class for "
    "at least 95% of the dev set, or score at chance on a regression (|r| < 0.1) "
    "(kdbench.report.collapse; judged from the score and the dev label counts for records without "
    "their predicted-label counts)."
)


def _collapse_mark(table: Table, row, column: str) -> str:
    k = table.collapsed_runs(row, column)
    if not k:
        return ""
    return " [collapsed]" if table.all_collapsed(row, column) else f" [{k} collapsed]"


def body_cells(table: Table, digits: int, escape, *, pm: str, bold: str):
    """The table's rows as cell strings: labels, then `mean pm std` per column, best in `bold`."""
    best = {c: best_rows(table, c, digits) for c in table.columns}
    for row in table.rows:
        cells = [escape(row[0])] + ([escape(row[1])] if table.show_init else [])
        for column in table.columns:
            parts = _cell_parts(table, row, column, digits)
            if parts is None:
                cells.append(escape(NO_SCORE) if (row, column) in table.short else "")
                continue
            mean, std, mark = parts
            text = mean if std is None else f"{mean} {pm} {std}"
            if row in best[column]:
                text = bold.format(text)
            if mark is not None:
                text += f" (n={mark})"
            cells.append(text + _collapse_mark(table, row, column))
        yield cells


def render_markdown(
    tables: list[Table],
    digits: int = 1,
    excluded: list[dict] | None = None,
    paper: list[str] | None = None,
    versions: str | None = None,
    walltimes: dict[tuple, list[str]] | None = None,
    cost: list[str] | None = None,
) -> str:
    """All tables as GitHub markdown, each followed by its wall times (``walltimes``, by its key,
    :mod:`kdbench.report.walltime`); then ``cost`` (the measured inference cost,
    :mod:`kdbench.report.cost`), ``paper`` (the published-vs-measured lines of ``--paper``, see
    :mod:`kdbench.report.versus`) and the list of excluded runs; ``versions`` names the code the
    runs came from."""
    out = ["# kdbench results", "", DESCRIPTION, ""] + (
        [f"Code: {md_escape(versions)}.", ""] if versions else []
    )
    for table in tables:
        out += [f"## {md_escape(table.title)}", ""]
        out += md_head(table.columns, table.show_init)
        out += [
            md_row(cells) for cells in body_cells(table, digits, md_escape, pm="±", bold="**{}**")
        ]
        note = _footnote(table)
        out += ["", f"_{note}_" if note else "", ""] + (walltimes or {}).get(table.key, [])
    out += (cost or []) + (paper or [])
    if excluded:
        out += ["## Excluded runs", ""]
        for row in excluded:
            out.append(f"- `{row['path']}` ({row['kind']}): {md_escape(row['reason'])}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


_TEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    NO_SCORE: "---",
}


def tex_escape(text) -> str:
    """Escape LaTeX special characters (``_``, ``%``, ``&`` and the rest) in a name."""
    return "".join(_TEX_SPECIAL.get(ch, ch) for ch in str(text))


def render_latex(tables: list[Table], digits: int = 1) -> str:
    """All tables as booktabs ``table`` environments (a fragment; needs
    ``\\usepackage{booktabs}``)."""
    out = ["% Generated by kdbench.report. Requires \\usepackage{booktabs}.", ""]
    for table in tables:
        n_label = 2 if table.show_init else 1
        spec = "l" * n_label + "r" * len(table.columns)
        note = _footnote(table)
        caption = f"{tex_escape(table.title)}. Mean $\\pm$ sample std over seeds"
        caption += f"; {tex_escape(note)}" if note else "."
        out += [
            "\\begin{table}[ht]",
            "\\centering",
            f"\\caption{{{caption}}}",
            f"\\begin{{tabular}}{{{spec}}}",
            "\\toprule",
            " & ".join(tex_escape(h) for h in column_head(table.columns, table.show_init))
            + " \\\\",
            "\\midrule",
        ]
        for cells in body_cells(table, digits, tex_escape, pm="$\\pm$", bold="\\textbf{{{}}}"):
            out.append(" & ".join(cells) + " \\\\")
        out += ["\\bottomrule", "\\end{tabular}", "\\end{table}", ""]
    return "\n".join(out)


def unfinished_cells(excluded: list[dict]) -> dict[tuple, Counter]:
    """Per cell of the design (group, objective, init, task), how many of its seeds did not finish,
    by kind: the exclusions `kdbench.report.jobs.of_design` names a job and a key for, each job a
    seed, but a seed whose fine-tuning grid lacks points once, as an ``incomplete grid``."""
    seeds: dict[tuple, dict] = {}
    for row in excluded:
        key = tuple(row.get(column) for column in GROUP_COLS + ROW_COLS + ["task"])
        if row.get("job") is not None and None not in key:
            seed, kind = (
                (row["seed"], "incomplete grid")
                if row.get("grid_point")
                else (row["job"], row["kind"])
            )
            seeds.setdefault(key, {}).setdefault(seed, kind)
    return {key: Counter(kinds.values()) for key, kinds in seeds.items()}
