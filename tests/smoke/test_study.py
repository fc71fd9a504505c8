"""`python -m kdbench.study` end to end on the tiny models: a task-agnostic preset's distillation
sweep, the fine-tuning grid on its student, the report; then a re-run that resumes (skips every
finished job). One student keeps it under a minute on 2 cores: the loop over many students is
tests/unit/test_study.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import write_tiny_corpus

pytestmark = pytest.mark.slow


def study(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "kdbench.study", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dict(os.environ, HYDRA_FULL_ERROR="0"),
        timeout=600,
    )


def test_a_task_agnostic_study_runs_from_nothing_to_tables_and_resumes(tiny_glue, tmp_path):
    corpus = write_tiny_corpus(tmp_path / "corpus")
    sweep_dir = tmp_path / "sweep"
    args = [
        # mini_table2 with the tiny models, one objective, one seed and a few steps
        "mini_table2",
        "teacher=tiny",
        "student=tiny",
        "objective=att_kl",
        "seed=1",
        f"corpus.path={corpus}",
        "corpus.seq_len=32",
        "corpus.heldout_fraction=0.2",
        "stages.distillation.steps=4",
        "stages.distillation.batch_size=8",
        "stages.distillation.device_batch_size=4",
        "stages.distillation.eval_every=2",
        "trainer.heldout_batches=2",
        f"hydra.sweep.dir={sweep_dir}",
        f"data.glue_dir={tiny_glue}",  # the GLUE folder reaches the grids too
        "--finetune",
        "task=rte",
        "--finetune",
        "stages.finetune.optimizer.lr=5e-5",  # one grid point per student
    ]
    result = study(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]

    (student,) = sweep_dir.glob("*/student")  # in the job's folder: its overrides, the seed last
    assert "objective=att_kl" in student.parent.name and student.parent.name.endswith(",seed=1")
    (grid_point,) = sweep_dir.glob("finetune/*/*/result.json")
    assert (
        grid_point.parent.parent.name == student.parent.name
    )  # the student's grid in its own sweep dir
    record = json.loads(grid_point.read_text())
    assert (
        record["status"],
        record["task"],
        record["objective"],
        record["seed"],
        record["stage"],
    ) == ("completed", "rte", "att_kl", 1, "finetune")
    assert record["grid"] == {
        "lr": 5e-5,
        "batch_size": 16,
    }  # --finetune's lr, the preset's batch size
    assert (
        record["config"]["paper_analogue"]["table"] == 2
    )  # the grid preset carries it to the report
    assert record["config"]["data"]["glue_dir"] == str(
        tiny_glue
    )  # a shared override reached the grid
    tables = tmp_path / "results" / "mini_table2"
    assert (
        len((tables / "results.csv").read_text().splitlines()) == 2
    )  # header + the student on RTE
    assert "att_kl" in (tables / "tables.md").read_text()

    again = study(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(grid_point.read_text())["wall_s"] == record["wall_s"]
    assert (
        again.stdout.count("already completed with the same config") == 2
    )  # the distillation, the grid point
