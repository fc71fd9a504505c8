"""Fine-tuning grids (the task-agnostic protocol): each student's grid on a task stands in the
tables by its best point by dev score, once the grid is whole."""

from __future__ import annotations

from collections import Counter
from pathlib import PurePosixPath

import pandas as pd

from kdbench.errors import ReportError
from kdbench.records.record import KEY_FIELDS
from kdbench.report.frames import exclusion, key_text, sort_frame


def _excluded_copies(
    frame: pd.DataFrame, kept: pd.DataFrame, kind: str, reason, keys: list[str]
) -> list[dict]:
    """An exclusion of ``kind`` per row of ``frame``; ``reason(row, kept)`` names the one of its
    ``keys`` used."""
    kept = kept.set_index(keys)
    rows = []
    for _, row in frame.iterrows():
        winner = kept.loc[tuple(row[keys])]
        rows.append(
            exclusion(row["path"], kind, reason(row, winner), {key: row[key] for key in KEY_FIELDS})
        )
    return rows


def best_of_grid(
    frame: pd.DataFrame, unfinished: list[dict] | None = None
) -> tuple[pd.DataFrame, list[dict]]:
    """Fine-tuning grids (the task-agnostic protocol): keep the best grid point by dev score of each
    student's grid on each task.

    A student's grid points on a task share its key and its `student_path`; the best score is the
    run's result, as in the paper. The other grid points are listed as ``grid`` exclusions (not
    errors). Two students of one key (distillations that differ in more than the key) keep a best
    point each. A grid fine-tuned at several seeds is refused (`one_finetune_seed`); a grid with a
    point of its sweep that did not finish (in `unfinished`) has no best point yet
    (`incomplete_grids`).
    """
    gridded = frame["grid"].notna()
    if not gridded.any():
        return frame, []
    keys = [*KEY_FIELDS, "student_path"]
    ranked = (
        frame[gridded]
        .assign(student_path=frame["student_path"].fillna(""))
        .sort_values(["score", "path"], ascending=[False, True], kind="stable")
    )
    one_finetune_seed(ranked, keys)
    ranked, waiting = incomplete_grids(ranked, unfinished or [])
    below = ranked.duplicated(keys, keep="first")
    excluded = _excluded_copies(
        ranked[below],
        ranked[~below],
        "grid",
        lambda row, best: (
            f"grid point {row['grid']} scored {row['score']:.2f}; "
            f"the best, {best['grid']}, scored {best['score']:.2f}"
        ),
        keys,
    )
    return sort_frame(pd.concat([frame[~gridded], ranked[~below]])), waiting + excluded


def incomplete_grids(grids: pd.DataFrame, unfinished: list[dict]) -> tuple[pd.DataFrame, list]:
    """The points of the grids that lack a point (an exclusion of a grid point's job that did not
    finish, `kdbench.report.jobs.of_design`: its sweep dir and key) as ``incomplete_grid``
    exclusions, and the other grids' points: a best point is the best of its whole grid."""
    lacking: dict[tuple, Counter] = {}
    for row in unfinished:
        if row.get("grid_point"):
            grid = (PurePosixPath(row["job"]).parent.as_posix(), *map(row.get, KEY_FIELDS))
            lacking.setdefault(grid, Counter())[row["kind"]] += 1
    grid_of = grids.apply(
        lambda row: (
            PurePosixPath(row["path"]).parent.parent.as_posix(),
            *(key_text(row[key]) for key in KEY_FIELDS),
        ),
        axis=1,
    )
    waits = grid_of.isin(list(lacking))
    excluded = [
        exclusion(
            row["path"],
            "incomplete_grid",
            f"its student's grid on {row['task']} lacks "
            + ", ".join(f"{n} {kind}" for kind, n in sorted(lacking[grid].items()))
            + " grid point(s): its best point waits for them (re-run the sweep to resume them)",
            {key: row[key] for key in KEY_FIELDS},
        )
        for grid, (_, row) in zip(grid_of[waits], grids[waits].iterrows(), strict=True)
    ]
    return grids[~waits], excluded


def one_finetune_seed(grids: pd.DataFrame, keys: list[str]) -> None:
    """Refuses a student's grid on a task whose points ran at several fine-tuning seeds: the key's
    seed is the distillation's, so its best point would be the best seed of the best point."""
    seeded = grids.dropna(subset=["finetune_seed"])
    for key, found in seeded.groupby(keys, dropna=False)["finetune_seed"].unique().items():
        if len(found) > 1:
            row = dict(zip(keys, key, strict=True))
            seeds = ", ".join(str(int(seed)) for seed in sorted(found))
            raise ReportError(
                f"the fine-tuning grid of {row['student_path'] or 'one student'} on "
                f"{row['task']} ran at fine-tuning seeds {seeds}: its best "
                "point would be chosen over seeds as well; report each fine-tuning seed from "
                "its own results folder"
            )
