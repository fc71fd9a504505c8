"""The published numbers of Wang et al. (2023), Tables 1-4, in kdbench's names, and the runs that
stand for them.

The numbers are package data: ``kdbench/paper/wang2023_tables.csv``, one row per published cell (a
byte-for-byte copy of the transcription; its provenance and the observations below are in the shared
paper README). Each cell is compared with the metric the paper actually reports
(:func:`measured_metric`), and each printed Avg carries a flag when it is not the mean of its row's
cells (:func:`avg_flags`). :mod:`kdbench.report.versus` renders them.
"""

from __future__ import annotations

import io
import math
from importlib import resources

import pandas as pd

from kdbench.errors import ReportError
from kdbench.report.frames import AVG, GROUP_COLS
from kdbench.tasks import TASKS

PAPER_PACKAGE = "kdbench.paper"
PAPER_FILE = "wang2023_tables.csv"
PAPER_SHA256 = "bc80e7119c895c5f5555b66e20212ed60d7e748534a04924fd33a0a54cb7f0ca"
PAPER_CITE = "Wang et al. 2023"
SOURCE_COLS = [
    "table",
    "setting",
    "teacher",
    "student",
    "objective",
    "init",
    "task",
    "metric",
    "mean",
    "std",
    "n_runs",
]
MEASURED_GROUP = ["measured_setting", "measured_teacher", "measured_student"]
MEASURED_COLS = MEASURED_GROUP + ["measured_mean", "measured_std", "measured_n"]
# paper.csv: every published cell in kdbench's names; the measured columns where runs stand for it
# (one row per measured (setting, teacher, student) when several do).
PAPER_COLS = (
    SOURCE_COLS[:8]
    + ["measured_metric", "mean", "std", "n_runs", "avg_flag"]
    + MEASURED_COLS
    + ["measured_minus_paper"]
)
ROW_KEY = ["table", "objective", "paper_init"]  # one printed row of a paper table

# The paper's own designs, in kdbench's names: (setting, teacher, student) per table.
PAPER_DESIGNS = {
    1: ("task_specific", "roberta_base", "3x768"),
    2: ("task_agnostic", "bert_base_uncased", "6x768"),
    3: ("task_specific", "roberta_base", "3x768"),
    4: ("task_agnostic", "bert_base_uncased", "6x768"),
}
# The paper's names -> kdbench's (conf/objective, conf/teacher, conf/student, kdbench.tasks, record
# inits).
OBJECTIVES = {
    "Vanilla KD": "vanilla_kd",
    "Hid-CLS-Contrast": "hid_cls_contrast",
    "Hid-CLS": "hid_cls",
    "Hid-Seq": "hid_seq",
    "Att-MSE": "att_mse",
    "Att-KL": "att_kl",
    "Att-MSE+Hid-Seq": "att_mse+hid_seq",
    "Att-KL+Hid-Seq": "att_kl+hid_seq",
    "Att-KL+Val-KL": "att_kl+val_kl",
}
# Table 2's rows of earlier systems that the paper quotes: shown under their own name, never matched
# to runs.
QUOTED = ("DistilBERT (published)", "TinyBERT (published)", "MiniLM (published)")
TEACHERS = {"RoBERTa-base": "roberta_base", "BERT-base-uncased": "bert_base_uncased"}
STUDENTS = {"3 layers, 768": "3x768", "6 layers, 768": "6x768"}
TASK_NAMES = {label: name for name, label in TASKS.items()} | {AVG: AVG}
INITS = {"first 6": "1,2,3,4,5,6"}  # the other inits are written alike ("4,8,12", "random")
FIRST_6_TABLES = (2, 4)  # where a 6-layer student's "1,2,3,4,5,6" is the paper's "first 6"

# What a published column is compared with (the record's metric names, x100 like the paper's).
LABELLED = {"acc": "accuracy", "f1": "f1", "mcc": "mcc", "avg": "avg"}
SPLIT = {"mnli": "matched"}  # MNLI's one column: kdbench's score, accuracy on the matched dev set
# Tables 1 and 3 print accuracy under CoLA's "Mcc" and MRPC's "F1" (see :data:`METRIC_NOTES`).
READ_AS_ACCURACY = {1: ("cola", "mrpc"), 3: ("cola", "mrpc")}
METRIC_NOTES = {
    "accuracy": (
        "CoLA's column, labelled Mcc, and MRPC's, labelled F1, are taken to be accuracy and "
        "compared with measured "
        "accuracy: Vanilla KD's CoLA 69.1 ± 0.00 is exactly CoLA dev's majority-class accuracy "
        "(721/1043 = 69.1%; "
        "an MCC of 69 would beat the teacher), and MRPC's 71.1-78.6 lies below the all-positive F1 "
        "of MRPC dev "
        "(81.2) and above its majority accuracy (68.4)"
    ),
    "labelled": (
        "CoLA and MRPC are compared as labelled, with measured MCC and F1: their published values "
        "(CoLA 33.9-55.4, "
        "MRPC 73.0-91.0) fit those metrics, unlike Tables 1 and 3 where they read as accuracy"
    ),
}
PRINTED_DIGIT = 0.1  # the paper prints means with one decimal


def read_cells() -> pd.DataFrame:
    """The shipped CSV as text, one row per published cell, exactly as transcribed."""
    try:
        text = (resources.files(PAPER_PACKAGE) / PAPER_FILE).read_text(encoding="utf-8")
        cells = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (OSError, ModuleNotFoundError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise ReportError(
            f"cannot read the published numbers kdbench/paper/{PAPER_FILE}: {exc}"
        ) from exc
    if list(cells.columns) != SOURCE_COLS:
        raise ReportError(
            f"kdbench/paper/{PAPER_FILE} has columns {list(cells.columns)}, expected {SOURCE_COLS}"
        )
    return cells


def _renamed(values: pd.Series, names: dict, what: str) -> pd.Series:
    """The paper's names in ``values`` as kdbench's; a :class:`ReportError` for a name without
    one."""
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ReportError(
            f"kdbench/paper/{PAPER_FILE}: no kdbench name for the paper's {what} {unknown}"
        )
    return values.map(names)


def load_paper() -> pd.DataFrame:
    """Every published cell in kdbench's names (``PAPER_COLS`` less the measured ones), plus
    ``paper_objective``, ``paper_init`` (the paper's words), ``quoted`` and, on Avg cells,
    ``cells_mean`` (the mean of the row's cells); in the CSV's order."""
    raw = read_cells()
    cells = raw[["setting", "metric"]].assign(
        table=raw["table"].astype(int),
        teacher=_renamed(raw["teacher"], TEACHERS, "teacher"),
        student=_renamed(raw["student"], STUDENTS, "student"),
        objective=_renamed(
            raw["objective"], OBJECTIVES | {name: name for name in QUOTED}, "objective"
        ),
        init=raw["init"].map(lambda init: INITS.get(init, init)),
        task=_renamed(raw["task"], TASK_NAMES, "task"),
        mean=raw["mean"].astype(float),
        std=raw["std"].map(lambda std: float(std) if std else math.nan),
        n_runs=raw["n_runs"].astype(int),
        paper_objective=raw["objective"],
        paper_init=raw["init"],
        quoted=raw["objective"].isin(QUOTED),
    )
    cells["measured_metric"] = [
        measured_metric(c.table, c.task, c.metric, c.quoted) for c in cells.itertuples()
    ]
    cells["cells_mean"], cells["avg_flag"] = cell_means(cells), avg_flags(cells)
    return cells


def measured_metric(table: int, task: str, label: str, quoted: bool = False) -> str | None:
    """The record metric a published cell is compared with (None for a quoted system's row)."""
    if quoted:
        return None
    metric = "accuracy" if task in READ_AS_ACCURACY.get(table, ()) else LABELLED[label]
    return f"{metric}_{SPLIT[task]}" if task in SPLIT else metric


def cell_means(cells: pd.DataFrame) -> pd.Series:
    """On each Avg cell, the mean of its row's task cells (NaN elsewhere)."""
    means = cells[cells["task"] != AVG].groupby(ROW_KEY)["mean"].mean()
    on_avg = cells[ROW_KEY].apply(tuple, axis=1).map(means)
    return on_avg.where(cells["task"] == AVG)


# How far a printed Avg may lie from the mean of its row's printed cells by rounding alone: half the
# printed digit between the Avg and the cells' true mean, and at most half a digit between that
# mean and the mean of the cells as printed (each rounded by at most half a digit).
AVG_ROUNDING = PRINTED_DIGIT


def avg_flags(cells: pd.DataFrame) -> pd.Series:
    """True on a printed Avg farther from the mean of its row's cells than rounding alone puts it
    (:data:`AVG_ROUNDING`, less float error); NA on the task cells."""
    off = (cells["mean"] - cell_means(cells)).abs() > AVG_ROUNDING + 1e-9
    return off.astype("boolean").where(cells["task"] == AVG, pd.NA)


def runs_for_table(frame: pd.DataFrame, table: int) -> pd.DataFrame:
    """The runs that stand for the paper's Table ``table``: those whose preset declares it as their
    ``paper_analogue`` (with an init the analogue maps), and runs of the paper's own design
    (setting, teacher, student) that declare no analogue. Their ``paper_init`` column holds the
    paper's init (an own-design 6-layer student's ``1,2,3,4,5,6`` is Tables 2 and 4's ``first 6``);
    the report never guesses an analogy."""
    declared = (frame["paper_table"] == table).fillna(False) & frame["paper_init"].notna()
    setting, teacher, student = PAPER_DESIGNS[table]
    own = (
        frame["paper_table"].isna()
        & (frame["setting"] == setting)
        & (frame["teacher"] == teacher)
        & (frame["student"] == student)
    )
    runs = frame[declared | own].copy()
    if table in FIRST_6_TABLES:
        first_6 = own[runs.index] & (runs["paper_init"] == INITS["first 6"])
        runs.loc[first_6, "paper_init"] = "first 6"
    return runs


def _run_values(runs: pd.DataFrame, metrics: pd.Series) -> pd.Series:
    """Each run's value in the metric its task's published column is compared with (NaN when not
    recorded)."""
    wanted = runs["task"].map(metrics)
    values = pd.Series(math.nan, index=runs.index)
    for metric in wanted.dropna().unique():
        if metric in runs.columns:
            values[wanted == metric] = runs.loc[wanted == metric, metric].astype(float)
    return values


def measured_cells(frame: pd.DataFrame, paper: pd.DataFrame, table: int) -> pd.DataFrame:
    """Per (setting, teacher, student, objective, paper_init, task) of the runs that stand for
    ``table``: measured_mean, measured_std (ddof=1; NaN for one run) and measured_n in the metric
    the paper reports, plus an Avg row for every row measured on all of the paper's tasks (the mean
    of its per-task means)."""
    cells = paper[(paper["table"] == table) & ~paper["quoted"] & (paper["task"] != AVG)]
    runs = runs_for_table(frame, table)
    runs = runs.assign(
        value=_run_values(runs, cells.groupby("task")["measured_metric"].first())
    ).dropna(subset=["value"])
    keys = GROUP_COLS + ["objective", "paper_init", "task"]
    measured = runs.groupby(keys)["value"].agg(
        measured_mean="mean",
        measured_std=lambda s: s.std(ddof=1) if len(s) > 1 else math.nan,
        measured_n="count",
    )
    measured = measured.reset_index()
    return pd.concat(
        [measured, _measured_averages(measured, set(cells["task"]))], ignore_index=True
    )


def _measured_averages(measured: pd.DataFrame, tasks: set[str]) -> pd.DataFrame:
    """An Avg row (mean of the per-task means) per measured row that has every one of ``tasks``."""
    rows = [
        {
            **dict(zip(GROUP_COLS + ["objective", "paper_init"], key, strict=True)),
            "task": AVG,
            "measured_mean": part.loc[part["task"].isin(tasks), "measured_mean"].mean(),
        }
        for key, part in measured.groupby(GROUP_COLS + ["objective", "paper_init"])
        if tasks <= set(part["task"])
    ]
    return pd.DataFrame(rows, columns=list(measured.columns))


def comparison(frame: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    """``paper.csv``: every published cell (CSV order), with the measured columns where runs stand
    for it."""
    parts = []
    for table, cells in paper.groupby("table", sort=True):
        measured = measured_cells(frame, paper, table).rename(
            columns=dict(zip(GROUP_COLS, MEASURED_GROUP))
        )
        keyed = cells.reset_index(names="cell").assign(
            key=lambda c: c["objective"].where(~c["quoted"])
        )
        parts.append(
            keyed.merge(
                measured.rename(columns={"objective": "key"}),
                how="left",
                on=["key", "paper_init", "task"],
            )
        )
    merged = pd.concat(parts, ignore_index=True).sort_values("cell", kind="stable")
    merged["measured_n"] = merged["measured_n"].astype("Int64")
    merged["measured_minus_paper"] = merged["measured_mean"] - merged["mean"]
    return merged[PAPER_COLS].reset_index(drop=True)
