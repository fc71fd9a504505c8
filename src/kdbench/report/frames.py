"""Runs as frames: one row per run, sorted in the paper's order, best grid point kept, duplicates
and runs of another design dropped as exclusions."""

from __future__ import annotations

import json
import re

import pandas as pd

from kdbench.errors import ReportError
from kdbench.records.record import KEY_FIELDS
from kdbench.report.task_names import learn_tasks, task_sort_key

# dicts, the teacher's collapse (the findings name it), where the per-example predictions are,
# which checkpoint was scored (one per table: `one_checkpoint_kind`), the student a fine-tuning
# grid point fine-tunes (a grid's best point is its own) and its own seed (one per grid:
# `kdbench.report.grids.one_finetune_seed`), not written to results.csv
IN_MEMORY_COLS = [
    "design",
    "timing",
    "throughput",
    "teacher_collapse",
    "predictions",
    "checkpoint",
    "student_path",
    "finetune_seed",
]
EXCLUDED_COLS = ["path", "kind", "reason", *KEY_FIELDS]
# The record's measured cost (`kdbench.measure.cost`) as report columns: (column, the model, its
# field).
COST_FIELDS = tuple(
    (f"{model}_{column}", model, field)
    for column, field in (
        ("params", "params"),
        ("flops", "flops_per_example"),
        ("latency_ms", "latency_ms"),
        ("throughput", "throughput_per_s"),
    )
    for model in ("student", "teacher")
)
COST_COLS = [column for column, _, _ in COST_FIELDS] + ["speedup_latency", "speedup_throughput"]
GROUP_COLS = ["setting", "teacher", "student"]
AVG = "Avg"  # the tables' mean over tasks
ALL = "ALL"  # the task of tests pooled over tasks
ROW_COLS = ["objective", "init"]
# Per run beyond the key: the score's metric and the teacher's score on it, its file, its code
# version, the paper design it stands for (table, init, the analogue's note), its wall time (per
# duration of `timing` and per rate of `throughput` in memory only), the student's parameter count,
# its measured inference cost, its design (config less what does not change a measurement; in memory
# only, not in results.csv).
ORIGIN_COLS = [
    "score_metric",
    "teacher_score",
    "collapse",
    "wall_s",
    "student_parameters",
    "path",
    "link",
    "commit",
    "paper_table",
    "paper_init",
    "paper_note",
    *COST_COLS,
    *IN_MEMORY_COLS,
]


def natural_key(value) -> list:
    """Sort key that orders digit runs numerically: ``"4,8,12"`` before ``"10,11,12"``."""
    parts = re.split(r"(\d+)", str(value))
    return [(0, int(p), "") if p.isdigit() else (1, 0, p.lower()) for p in parts if p]


def to_frame(records: list[dict]) -> pd.DataFrame:
    """One row per run (sorted by key): key columns, score, a column per metric, path, origin."""
    learn_tasks(records)
    base = list(KEY_FIELDS) + ["score", "grid"]
    metric_names: list[str] = []
    for record in records:
        for name in record["metrics"]:
            if name not in metric_names:
                metric_names.append(name)
    rename = {
        name: (f"metric_{name}" if name in base + ORIGIN_COLS else name) for name in metric_names
    }
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


def group_key(row: pd.Series) -> tuple:
    return tuple(row[c] for c in GROUP_COLS)


def row_key(row: pd.Series) -> tuple:
    """(objective, init) in natural order."""
    return (natural_key(row["objective"]), natural_key(row["init"]))


def sorted_by(frame: pd.DataFrame, key) -> pd.DataFrame:
    """``frame``'s rows ordered by ``key(row)`` (a Python sort key: tuples of mixed types)."""
    order = sorted(range(len(frame)), key=lambda i: key(frame.iloc[i]))
    return frame.iloc[order].reset_index(drop=True)


def sort_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Sort runs by group, task (paper order), objective, init (natural order), seed."""
    if frame.empty:
        return frame.reset_index(drop=True)
    return sorted_by(
        frame, lambda r: (*group_key(r), task_sort_key(r["task"]), *row_key(r), r["seed"])
    )


def chosen_on_dev(runs: pd.DataFrame) -> str:
    """What a table's scores were chosen on, when it is the dev set they report: its students'
    best fine-tuning grid points, its runs' best dev evaluations; "" for neither."""
    notes = []
    if runs["grid"].notna().any():
        notes.append(
            "Each fine-tuned cell is its student's best grid point on the task, chosen by the dev "
            "score it shows (the paper's protocol): an optimistic estimate."
        )
    if (runs["checkpoint"] == "best").any():
        notes.append(
            "Each run is scored at its best dev evaluation, chosen on the dev set it reports: an "
            "optimistic estimate."
        )
    return " ".join(notes)


def design_signature(design: dict | None) -> str:
    """A run's design as comparable text ("" for a record without its config)."""
    return "" if design is None else json.dumps(design, sort_keys=True, default=str)


def drop_duplicates(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[dict]]:
    """Keep the first run (by path) per key and design; the rest become ``duplicate`` exclusions.
    Runs with one key but different designs are not duplicates: :func:`split_designs` decides
    between them."""
    same = [*KEY_FIELDS, "signature"]
    by_path = frame.sort_values("path", kind="stable").assign(
        signature=frame["design"].map(design_signature)
    )
    repeated = by_path.duplicated(same, keep="first")
    first = by_path[~repeated].set_index(same)["path"]
    excluded = [
        exclusion(
            row["path"],
            "duplicate",
            f"same run as {first[tuple(row[same])]} (that one is used)",
            {key: row[key] for key in KEY_FIELDS},
        )
        for _, row in by_path[repeated].iterrows()
    ]
    return sort_frame(by_path[~repeated].drop(columns="signature")), excluded


def split_designs(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[dict]]:
    """Keep, per table cell, the runs of its most common design (ties: the first path's); the others
    become ``config_mismatch`` exclusions naming the config keys they differ in. A cell averages
    seeds of one design, never runs of different recipes. Records without their config are not
    compared. A table whose runs kept scored their students at different checkpoints is refused
    (:func:`one_checkpoint_kind`)."""
    kept, excluded = [], []
    for _, cell in frame.sort_values("path").groupby(GROUP_COLS + ROW_COLS + ["task"], sort=False):
        signature = cell["design"].map(design_signature)
        known = [sig for sig in signature if sig]
        majority = max(
            dict.fromkeys(known), key=known.count, default=""
        )  # the first path's among equals
        odd = (signature != "") & (signature != majority)
        kept.append(cell[~odd])
        reference, n_used = json.loads(majority or "{}"), known.count(majority)
        excluded += [
            exclusion(
                row["path"],
                "config_mismatch",
                _design_difference(row["design"], reference, n_used),
                {key: row[key] for key in KEY_FIELDS},
            )
            for _, row in cell[odd].iterrows()
        ]
    frame = sort_frame(pd.concat(kept)) if kept else frame
    one_checkpoint_kind(frame)
    return frame, excluded


def one_checkpoint_kind(frame: pd.DataFrame) -> None:
    """Refuses a table whose students were scored at different checkpoints (the record's
    `scored`): the best of their dev evaluations in some runs, their last step in others. A best
    evaluation is chosen on the dev set it reports, so it does not compare with a last step."""
    for key, table in frame.groupby(GROUP_COLS, sort=True):
        kinds = table.sort_values("path").groupby("checkpoint")["path"].agg(["count", "first"])
        if len(kinds) > 1:
            best, last = kinds.loc["best"], kinds.loc["last"]
            raise ReportError(
                f"the table setting {key[0]}, teacher {key[1]}, student {key[2]} mixes students "
                f"scored at their best dev evaluation ({best['count']} runs, e.g. "
                f"{best['first']}) with students scored at their last step ({last['count']}, "
                f"e.g. {last['first']}): report each kind from its own results folder, or re-run "
                "one kind with the other's trainer.student_best_checkpoint (fine-tuning: "
                "stages.finetune.eval_every)"
            )


def code_versions(frame: pd.DataFrame) -> str:
    """The code the runs came from: each commit (or version) with its runs, most runs first."""
    counts = frame["commit"].fillna("unknown").value_counts()
    return ", ".join(f"{commit} ({n} run{'s' if n > 1 else ''})" for commit, n in counts.items())


def _design_difference(design: dict, reference: dict, n_reference: int, limit: int = 4) -> str:
    """Which keys a run's design differs in from the cell's majority design, with both values."""
    keys = sorted(
        key for key in design.keys() | reference.keys() if design.get(key) != reference.get(key)
    )
    shown = ", ".join(
        f"{key}={design.get(key)!r} (used: {reference.get(key)!r})" for key in keys[:limit]
    )
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return f"config differs from the {n_reference} run(s) used for this cell in {shown}{more}"


def key_text(value) -> str | None:
    """A key field as a non-empty string (lists such as ``[4, 8, 12]`` become ``"4,8,12"``)."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        value = ",".join(str(v) for v in value)
    text = str(value).strip()
    return text or None


def exclusion(path: str, kind: str, reason: str, data: dict | None = None) -> dict:
    """An ``excluded.csv`` row: where, why, and whatever key fields ``data`` has (as text)."""
    row = {"path": path, "kind": kind, "reason": reason}
    for key in KEY_FIELDS:
        row[key] = key_text(data.get(key)) if isinstance(data, dict) else None
    return row
