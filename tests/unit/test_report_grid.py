"""The task-agnostic records in the report: distillations are listed, fine-tuning grids keep their
best point."""

from __future__ import annotations

import json

import pandas as pd

from kdbench.report.cli import main


def write(path, **fields):
    path.mkdir(parents=True)
    record = {
        "schema": 1,
        "status": "completed",
        "setting": "task_agnostic",
        "teacher": "bert_base_uncased",
        "student": "6x768",
        "init": "random",
        "objective": "att_kl",
        "seed": 1,
        "task": "rte",
        "metrics": {"accuracy": fields.get("score", 0)},
        **fields,
    }
    (path / "result.json").write_text(json.dumps(record))


def test_best_grid_point_per_task_and_seed_is_the_result(tmp_path):
    runs = tmp_path / "runs"
    write(runs / "distill", task=None, score=None, metrics={"heldout_loss": 0.3})
    for seed in (1, 2):
        for lr, bs, score in ((1e-5, 16, 60.0 + seed), (3e-5, 32, 65.0 + seed), (5e-5, 16, 62.0)):
            write(
                runs / f"ft-{seed}-{lr}-{bs}",
                seed=seed,
                score=score,
                grid={"lr": lr, "batch_size": bs},
                distilled_from=str(runs / "distill" / "result.json"),
            )
    assert main([str(runs), "--out", str(tmp_path / "report"), "--no-plots"]) == 0
    results = pd.read_csv(tmp_path / "report" / "results.csv")
    assert sorted(results["score"]) == [66.0, 67.0]
    assert set(results["grid"]) == {"lr=3e-05,batch_size=32"}
    excluded = pd.read_csv(tmp_path / "report" / "excluded.csv")
    assert sorted(excluded["kind"]) == ["distillation"] + ["grid"] * 4
    assert "setting task_agnostic" in (tmp_path / "report" / "tables.md").read_text()
