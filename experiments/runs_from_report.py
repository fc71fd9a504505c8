"""Rebuild a committed report folder's records as ``runs.jsonl`` from what the folder keeps.

Usage: python experiments/runs_from_report.py results/NAME [--glue-dir DIR]

The folders made before records were kept in the repository hold ``results.csv`` (one row per used
run: key, score, metrics, teacher score, provenance, paper analogue) and ``excluded.csv`` (the runs
not used, with the reason). This writes one result.json-shaped record per line: the used runs from
results.csv, the task-agnostic distillations and the losing fine-tuning grid points from
excluded.csv, so that ``python -m kdbench.report results/NAME/runs.jsonl --out results/NAME``
regenerates the folder. Each record gets its dev set's gold label counts (``dev_class_<c>``, from
the GLUE files under --glue-dir, so that a constant predictor is recognised from its score); what
results.csv never kept (the resolved config beyond the paper analogue, the predicted-label counts,
the wall times) is absent and the folder's README says so.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections import Counter
from pathlib import Path

import pandas as pd
from tests.helpers import compose_config

from kdbench.data.glue import read_tsv_split
from kdbench.metrics import GOLD
from kdbench.planning.plan import task_spec
from kdbench.records.record import KEY_FIELDS

KEY = list(KEY_FIELDS)
NOT_METRICS = set(KEY) | {
    "score",
    "grid",
    "score_metric",
    "teacher_score",
    "collapse",
    "link",
    "path",
    "commit",
    "paper_table",
    "paper_init",
    "paper_note",
}


def gold_counts(task: str, glue_dir: Path) -> dict[str, int]:
    spec = task_spec(compose_config([f"task={task}"]).task)
    counts = Counter(read_tsv_split(spec, "validation", glue_dir)["label"])
    return {f"{GOLD}_{c}": int(counts.get(c, 0)) for c in range(len(spec.labels))}


def _grid(text) -> dict | None:
    if not isinstance(text, str):
        return None
    return {key: json.loads(value) for key, value in (part.split("=") for part in text.split(","))}


def _common(row) -> dict:
    record = {"schema": 1, "status": "completed", **{key: row[key] for key in KEY}}
    record["seed"] = int(row["seed"])
    commit = str(row["commit"]) if isinstance(row.get("commit"), str) else None
    if commit:
        record["provenance"] = {
            "git_commit": commit.removesuffix("+dirty"),
            "git_dirty": commit.endswith("+dirty"),
        }
    return record


def used_run(row, counts: dict) -> dict:
    record = _common(row)
    metrics = {
        name: float(row[name])
        for name in row.index
        if name not in NOT_METRICS and pd.notna(row[name])
    }
    record |= {
        "score": float(row["score"]),
        "score_metric": row["score_metric"],
        "run_dir": row["path"],
        "metrics": metrics | counts.get(row["task"], {}),
    }
    if pd.notna(row["teacher_score"]):
        record["teacher_metrics"] = {row["score_metric"]: float(row["teacher_score"])}
    if pd.notna(row.get("grid")):
        record["grid"] = _grid(row["grid"])
    if pd.notna(row["paper_table"]):
        analogue = {"table": int(row["paper_table"]), "inits": {row["init"]: row["paper_init"]}}
        record["config"] = {
            "paper_analogue": analogue
            | ({"note": row["paper_note"]} if pd.notna(row["paper_note"]) else {})
        }
    return record


def excluded_run(row, used: pd.DataFrame) -> dict | None:
    """A distillation or a losing grid point from its excluded.csv row; None for any other kind."""
    record = _common(row) | {"run_dir": row["path"]}
    if row["kind"] == "distillation":
        loss = float(re.search(r"held-out loss ([0-9.e-]+)", row["reason"]).group(1))
        return record | {"task": None, "score": None, "metrics": {"heldout_loss": loss}}
    if row["kind"] != "grid":
        return None
    grid, score, best = re.match(
        r"grid point (\S+) scored ([0-9.-]+); the best, \S+, scored ([0-9.-]+)", row["reason"]
    ).groups()
    winner = used[(used[KEY] == row[KEY]).all(axis=1)].iloc[0]
    exact = (
        float(winner["score"])
        if math.isclose(float(score), round(winner["score"], 2))
        else float(score)
    )
    metric = winner["score_metric"]
    return record | {
        "score": exact,
        "score_metric": metric,
        "metrics": {metric: exact},
        "grid": _grid(grid),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--glue-dir", type=Path, required=True, help="GLUE in its TSV layout")
    args = parser.parse_args()
    used = pd.read_csv(
        args.folder / "results.csv", dtype={"init": str, "paper_init": str, "commit": str}
    )
    excluded = pd.read_csv(args.folder / "excluded.csv", dtype={"init": str, "seed": "Int64"})
    counts = {task: gold_counts(task, args.glue_dir) for task in used["task"].unique()}
    records = [used_run(row, counts) for _, row in used.iterrows()]
    records += [r for _, row in excluded.iterrows() if (r := excluded_run(row, used)) is not None]
    records.sort(key=lambda r: r["run_dir"])
    lines = [json.dumps(r, default=lambda v: None if pd.isna(v) else v) for r in records]
    (args.folder / "runs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{args.folder / 'runs.jsonl'}: {len(records)} records")


if __name__ == "__main__":
    main()
