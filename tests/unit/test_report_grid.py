"""The task-agnostic records in the report: distillations are listed, fine-tuning grids keep their
best point."""

from __future__ import annotations

import json

import pandas as pd
import pytest

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


def write_grid(runs, name: str, student: str, scores, config: dict, **fields):
    """A grid of `student`: points at lr 1e-5 and 3e-5 (batch 16) scoring `scores`, each with
    `config` and its grid point as its run's config."""
    for lr, score in zip((1e-5, 3e-5), scores, strict=True):
        stage = {"finetune": {"optimizer": {"lr": lr}, "batch_size": 16}}
        write(
            runs / f"{name}-{lr}",
            score=score,
            grid={"lr": lr, "batch_size": 16},
            student_path=student,
            config=config | {"stages": stage},
            **fields,
        )


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


def test_each_students_grid_keeps_its_own_best_point(tmp_path):
    """Two students of one key (distillations of 2 and 4 steps, one objective and seed): each grid's
    best point is chosen among its own student's points alone, and the cell keeps one
    distillation design, naming the other's difference."""
    runs = tmp_path / "runs"
    for steps, scores in ((2, (60.0, 61.0)), (4, (70.0, 50.0))):
        student = f"{runs}/distill-{steps}/student"
        design = {"stages": {"distillation": {"steps": steps}}}
        write_grid(runs, f"ft-{steps}", student, scores, {}, distillation_config=design)
    assert main([str(runs), "--out", str(tmp_path / "report"), "--no-plots"]) == 0
    results = pd.read_csv(tmp_path / "report" / "results.csv")
    assert list(results["score"]) == [61.0]  # the first path's design: 2 steps, its best point
    excluded = pd.read_csv(tmp_path / "report" / "excluded.csv").set_index("path")["reason"]
    assert excluded["ft-2-1e-05/result.json"].endswith(
        "the best, lr=3e-05,batch_size=16, scored 61.00"
    )
    assert excluded["ft-4-3e-05/result.json"].endswith(
        "the best, lr=1e-05,batch_size=16, scored 70.00"
    )
    assert (
        "distillation.stages.distillation.steps=4 (used: 2)" in excluded["ft-4-1e-05/result.json"]
    )


def test_a_grid_fine_tuned_at_several_seeds_is_refused_in_one_line(tmp_path, capsys):
    """A grid point's key carries its distillation's seed: fine-tuning seeds 1 and 2 of one grid
    would otherwise let the best seed of the best point stand for the cell."""
    runs = tmp_path / "runs"
    student = f"{runs}/distill/student"
    for finetune_seed, scores in ((1, (60.0, 61.0)), (2, (70.0, 50.0))):
        write_grid(runs, f"ft-{finetune_seed}", student, scores, {"seed": finetune_seed})
    with pytest.raises(SystemExit) as exc:
        main([str(runs), "--out", str(tmp_path / "report"), "--no-plots"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1
    assert err[0] == (
        f"kdbench.report: error: the fine-tuning grid of {student} on rte ran at fine-tuning "
        "seeds 1, 2: its best point would be chosen over seeds as well; report each fine-tuning "
        "seed from its own results folder"
    )


def test_a_grid_table_says_its_cells_are_chosen_on_the_dev_set_they_show(tmp_path):
    runs = tmp_path / "runs"
    for lr, score in ((1e-5, 60.0), (3e-5, 65.0)):
        write(runs / f"ft-{lr}", score=score, grid={"lr": lr, "batch_size": 16})
    assert main([str(runs), "--out", str(tmp_path / "report"), "--no-plots"]) == 0
    note = (
        "Each fine-tuned cell is its student's best grid point on the task, chosen by the dev "
        "score it shows (the paper's protocol): an optimistic estimate."
    )
    assert f"_n = 1 seed per cell. {note}_" in (tmp_path / "report" / "tables.md").read_text()
    assert note in (tmp_path / "report" / "tables.tex").read_text()
    assert note in (tmp_path / "report" / "report.html").read_text().replace("&#x27;", "'")


def write_study_grids(runs, scores: dict[int, dict[float, float | str | None]]) -> None:
    """A study's sweep dir: per distillation seed, its student's grid on RTE in its own sweep dir
    (`finetune/distill-sSEED`), one job per lr at fine-tuning seed 1; a point's score, "failed"
    (a failed record) or None (a job of the study without a record)."""
    jobs = []
    for seed, points in scores.items():
        grid_dir = f"finetune/distill-s{seed}"
        for lr, score in points.items():
            job = f"{grid_dir}/stages.finetune.optimizer.lr={lr},task=rte,seed=1"
            jobs.append(job)
            fields = dict(seed=seed, grid={"lr": lr, "batch_size": 16}, student_path=grid_dir)
            if score == "failed":
                write(runs / job, status="failed", error="RuntimeError: boom", **fields)
            elif score is not None:
                write(runs / job, score=score, **fields)
    (runs / "study_jobs.txt").write_text("\n".join(jobs) + "\n")


def test_a_grid_with_a_failed_point_has_no_best_point_and_its_seed_is_short(tmp_path):
    runs = tmp_path / "runs"
    write_study_grids(runs, {1: {1e-5: 60.0, 3e-5: "failed"}, 2: {1e-5: 62.0, 3e-5: 64.0}})
    assert main([str(runs), "--out", str(tmp_path / "report"), "--no-plots"]) == 0
    results = pd.read_csv(tmp_path / "report" / "results.csv")
    assert list(results["score"]) == [64.0]  # seed 1's grid waits for its lr 3e-5 point
    excluded = pd.read_csv(tmp_path / "report" / "excluded.csv").set_index("path")
    waiting = excluded.loc[
        "finetune/distill-s1/stages.finetune.optimizer.lr=1e-05,task=rte,seed=1/result.json"
    ]
    assert waiting["kind"] == "incomplete_grid"
    assert waiting["reason"] == (
        "its student's grid on rte lacks 1 failed grid point(s): its best point waits for them "
        "(re-run the sweep to resume them)"
    )
    tables = (tmp_path / "report" / "tables.md").read_text()
    assert "att_kl on RTE lacks 1 of 2 (1 incomplete grid)" in tables


def test_a_grid_with_a_missing_point_waits_for_it_at_its_distillation_seed(tmp_path):
    runs = tmp_path / "runs"
    write_study_grids(runs, {1: {1e-5: 60.0, 3e-5: 61.0}, 2: {1e-5: 70.0, 3e-5: None}})
    assert main([str(runs), "--out", str(tmp_path / "report"), "--no-plots"]) == 0
    assert list(pd.read_csv(tmp_path / "report" / "results.csv")["score"]) == [61.0]
    excluded = pd.read_csv(tmp_path / "report" / "excluded.csv")
    missing = excluded[excluded["kind"] == "missing"].iloc[0]
    assert (missing["task"], missing["objective"], missing["seed"]) == ("rte", "att_kl", 2)
    assert list(excluded["kind"]).count("incomplete_grid") == 1
    tables = (tmp_path / "report" / "tables.md").read_text()
    assert "att_kl on RTE lacks 1 of 2 (1 incomplete grid)" in tables
