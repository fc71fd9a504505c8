"""Synthetic result.json files with known values, and running the report on them, for the report
tests."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kdbench.report.cli import main
from kdbench.report.frames import to_frame
from kdbench.report.load import load_records


def write_run(
    root: Path,
    *,
    task: str = "rte",
    objective: str = "att_kl",
    init: str = "4,8,12",
    seed: int = 1,
    score: float = 70.0,
    status: str = "completed",
    setting: str = "task_specific",
    teacher: str = "roberta_base",
    student: str = "3x768",
    name: str | None = None,
    **extra,
) -> Path:
    """Write one result.json (nested a few levels deep, like real runs) and return its path."""
    folder = root / name if name is not None else root / setting / f"{teacher}-{student}" / task
    if name is None:
        folder = folder / objective / init.replace(",", "-") / f"seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "schema": 1,
        "status": status,
        "setting": setting,
        "task": task,
        "teacher": teacher,
        "student": student,
        "init": init,
        "objective": objective,
        "seed": seed,
        "metrics": {"accuracy": score, "f1": None if score is None else score - 1.0},
        "score": score,
        "teacher_metrics": {"accuracy": 80.0},
        "timing": {"train_s": 1.0},
        "config": {},
    }
    record.update(extra)
    path = folder / "result.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    return path


def write_scores(
    root: Path, scores: dict[tuple[str, str, str], list[float | None]], **common
) -> None:
    """scores[(task, objective, init)] = per-seed scores (seed = position + 1; None = no run)."""
    for (task, objective, init), values in scores.items():
        for i, value in enumerate(values):
            if value is not None:
                write_run(
                    root,
                    task=task,
                    objective=objective,
                    init=init,
                    seed=i + 1,
                    score=value,
                    **common,
                )


def run_main(results: Path, *extra: str, plots: bool = False) -> Path:
    out = results.parent / "out"
    args = [str(results), "--out", str(out), *extra] + ([] if plots else ["--no-plots"])
    assert main(args) == 0
    return out


def read_csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=True, dtype={"init": str, "fixed": str})


A = [70.0, 71.5, 73.0, 69.0]
B = [68.0, 70.0, 70.5, 69.5]
C = [65.0, 66.0, 64.0, 66.5]


def write_three_objectives(results: Path) -> Path:
    """Three objectives on RTE (scores A, B, C) and MRPC, four seeds each, one init."""
    write_scores(
        results,
        {
            ("rte", "att_kl", "4,8,12"): A,
            ("rte", "hid_mse", "4,8,12"): B,
            ("rte", "logit_kl", "4,8,12"): C,
            ("mrpc", "att_kl", "4,8,12"): [80.0, 81.0, 79.5, 82.0],
            ("mrpc", "hid_mse", "4,8,12"): [79.0, 80.5, 80.0, 80.0],
            ("mrpc", "logit_kl", "4,8,12"): [75.0, 76.0, 74.0, 75.5],
        },
    )
    return results


DEV = 400  # dev examples: one example is 0.25 points


def write_pilot(
    root, cells: dict[str, list[float]], staged=(), train_s=None, wall_s=10.0, one_class=()
):
    """Records of a pilot: cells {objective@init: per-seed scores}; `staged` cells have an
    intermediate stage; `train_s` {cell: seconds of training}; the runs of `one_class` cells
    predict class 1 for every dev example, the others half and half."""
    for cell, values in cells.items():
        objective, init = cell.split("@")
        trained = (train_s or {}).get(cell, 5.0)
        timing = {
            "intermediate_s": trained / 2 if cell in staged else 0.0,
            "prediction_s": trained / 2 if cell in staged else trained,
        }
        predicted = (0, DEV) if cell in one_class else (DEV // 2, DEV // 2)
        for seed, score in enumerate(values, 1):
            metrics = {"accuracy": score, "dev_class_0": DEV // 2, "dev_class_1": DEV // 2}
            metrics |= {f"predicted_class_{c}": n for c, n in enumerate(predicted)}
            write_run(
                root,
                task="custom",
                objective=objective,
                init=init,
                seed=seed,
                score=score,
                metrics=metrics,
                timing=timing,
                wall_s=wall_s,
            )
    return to_frame(load_records(root).records)
