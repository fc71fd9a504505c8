"""The published numbers of Wang et al. (2023) (``kdbench/paper/wang2023.json``), shown beside the measured
tables."""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import TYPE_CHECKING

import pandas as pd

from kdbench.report.load import ReportError
from kdbench.report.stats import AVG, ordered_tasks
from kdbench.report.text import md_escape, md_head, md_row

if TYPE_CHECKING:  # tables.py renders the published tables through this module
    from kdbench.report.tables import Table

PAPER_PACKAGE = "kdbench.paper"
PAPER_FILE = "wang2023.json"
PAPER_CITE = "Wang et al. 2023"
PAPER_COLS = ["table", "objective", "init", "task", "score"]
# The paper's own designs, in kdbench's names: (setting, teacher, student) per table.
PAPER_DESIGNS = {
    1: ("task_specific", "roberta_base", "3x768"),
    2: ("task_agnostic", "bert_base_uncased", "6x768"),
    3: ("task_specific", "roberta_base", "3x768"),
    4: ("task_agnostic", "bert_base_uncased", "6x768"),
}


def runs_for_table(frame: pd.DataFrame, table: int) -> pd.DataFrame:
    """The runs that stand for the paper's Table ``table``: those whose preset declares it as their
    ``paper_analogue`` (with an init the analogue maps), and runs of the paper's own design (setting, teacher,
    student). Their ``paper_init`` column holds the paper's init; the report never guesses an analogy."""
    declared = (frame["paper_table"] == table).fillna(False) & frame["paper_init"].notna()
    setting, teacher, student = PAPER_DESIGNS[table]
    own = frame["paper_table"].isna() & (frame["setting"] == setting) & (frame["teacher"] == teacher) & (
        frame["student"] == student)
    return frame[declared | own]


def load_paper() -> dict:
    """The published numbers shipped in ``kdbench/paper/wang2023.json`` (see its ``source`` and ``status``)."""
    where = f"{PAPER_PACKAGE.replace('.', '/')}/{PAPER_FILE}"
    try:
        paper = json.loads((resources.files(PAPER_PACKAGE) / PAPER_FILE).read_text(encoding="utf-8"))
    except (OSError, ModuleNotFoundError, json.JSONDecodeError) as exc:
        raise ReportError(f"cannot read the published numbers {where}: {exc}") from exc
    if not isinstance(paper, dict) or not isinstance(paper.get("tables"), dict):
        raise ReportError(f"{where} has no 'tables' object")
    return paper


def _paper_rows(spec: dict) -> list[dict]:
    """A paper table's rows, each with its init filled in from the table when the row has none."""
    return [{**row, "init": row.get("init") or spec.get("init")} for row in spec.get("rows") or []]


def paper_frame(paper: dict) -> pd.DataFrame:
    """Every published cell, long form: table, objective, init, task, score."""
    cells = [
        {"table": name, "objective": row["objective"], "init": row["init"], "task": task, "score": score}
        for name, spec in paper["tables"].items()
        for row in _paper_rows(spec)
        for task, score in row.get("scores", {}).items()
    ]
    return pd.DataFrame(cells, columns=PAPER_COLS)


def _paper_cell(row: dict, column: str) -> str:
    """A published value exactly as stored (``mean ± std`` when the paper prints a std)."""
    score = row.get("scores", {}).get(column)
    if score is None:
        return ""
    std = (row.get("std") or {}).get(column)
    return str(score) if std is None else f"{score} ± {std}"


def render_published(table: Table, paper: dict) -> list[str]:
    """Markdown lines: the paper tables of ``table``'s setting, restricted to its objectives and tasks."""
    out = []
    for name, spec in paper["tables"].items():
        if spec.get("setting") != table.setting:
            continue
        number = re.sub(r"\D", "", name) or name
        out += [f"### Published ({PAPER_CITE}, Table {number})", ""]
        if not spec.get("rows"):
            out += [f"_No published numbers recorded for this table in {PAPER_FILE} (see its `status`)._", ""]
            continue
        out += _published_table(table, name, spec)
    return out


def _published_table(table: Table, name: str, spec: dict) -> list[str]:
    """One paper table as markdown: the rows of ``table``'s objectives and its tasks (all when none match)."""
    rows = _paper_rows(spec)
    scored = {task for row in rows for task in row.get("scores", {})}
    columns = spec.get("columns") or ordered_tasks(scored - {AVG}) + ([AVG] if AVG in scored else [])
    objectives = {row[0] for row in table.rows}
    shown_rows = [row for row in rows if row["objective"] in objectives] or rows
    tasks = [t for t in table.tasks if t in columns] or [c for c in columns if c != AVG]  # measured order
    shown_cols = tasks + ([AVG] if AVG in columns else [])
    inits = {row["init"] for row in shown_rows}
    show_init = len(inits) > 1
    out = md_head(shown_cols, show_init)
    for row in shown_rows:
        labels = [row["objective"]] + ([row["init"] or ""] if show_init else [])
        out.append(md_row([md_escape(label) for label in labels] + [_paper_cell(row, c) for c in shown_cols]))
    paper_init = "" if show_init or not inits - {None} else f", init {next(iter(inits))}"
    note = (
        f"Published numbers ({spec.get('title') or name}), copied from the paper, not measured here. "
        f"Paper: teacher {spec.get('teacher')}, student {spec.get('student')}{paper_init}; "
        f"this table: teacher {table.teacher}, student {table.student}. "
        "Models and training set-up may differ, so compare with care"
    )
    if len(shown_rows) < len(rows) or len(shown_cols) < len(columns):
        note += (
            f"; {len(shown_rows)} of {len(rows)} rows and {len(shown_cols)} of {len(columns)} "
            "columns shown (those of this table)"
        )
    if AVG in shown_cols:
        note += "; Avg as published (over all the paper's tasks)"
    return out + ["", f"_{md_escape(note)}._", ""]
