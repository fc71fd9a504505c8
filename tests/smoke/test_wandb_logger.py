"""What a run tells wandb: a name of its own in a sweep, each stage's rows under the stage's name
and steps, the record's dev metrics in the summary, and how the run ended; a wandb run that cannot
start fails the job by name."""

from __future__ import annotations

import json
import sys

import pytest

import kdbench.run as entry
from kdbench import job
from kdbench.job import run
from kdbench.planning.plan import make_plan
from tests.helpers import (
    agnostic_overrides,
    compose_config,
    tiny_overrides,
    write_tiny_corpus,
)


class Run:
    """wandb's run as kdbench uses it, recording the calls."""

    def __init__(self):
        self.rows, self.step_metrics, self.summary, self.exit_code = [], {}, {}, None

    def define_metric(self, name, step_metric=None):
        self.step_metrics[name] = step_metric

    def log(self, values):
        self.rows.append(values)

    def finish(self, exit_code=None):
        self.exit_code = exit_code


@pytest.fixture
def wandb_run(monkeypatch):
    import wandb

    recorded = Run()
    monkeypatch.setattr(wandb, "init", lambda **settings: recorded)
    return recorded


def logged_run(tiny_glue, run_dir, *extra):
    overrides = tiny_overrides(
        tiny_glue, run_dir, "logger=wandb", "measure_cost=false", "objective=att_kl", *extra
    )
    return run(compose_config(overrides))


def test_each_stage_logs_under_its_own_name_against_its_own_steps(tiny_glue, tmp_path, wandb_run):
    # a cache of its own: the teacher is fine-tuned (and logs its rows) in this run
    record = logged_run(tiny_glue, tmp_path, f"paths.cache_dir={tmp_path / 'cache'}")
    rows = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    expected = [
        {f"{row['stage']}/{key}": value for key, value in row.items() if key != "stage"}
        for row in rows
    ]
    assert wandb_run.rows == expected
    stages = {row["stage"] for row in rows}
    assert {"teacher", "intermediate", "prediction", "student_dev"} <= stages
    assert wandb_run.step_metrics == {
        name: metric
        for stage in stages
        for name, metric in ((f"{stage}/step", None), (f"{stage}/*", f"{stage}/step"))
    }
    dev = {f"dev/{key}": value for key, value in record["metrics"].items()}
    assert wandb_run.summary == dev | {"score": record["score"]}
    assert wandb_run.exit_code == 0


def test_a_failed_run_finishes_its_wandb_run_as_failed(tiny_glue, tmp_path, wandb_run, monkeypatch):
    def broken(plan, run_dir, log):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setitem(job.RECIPES, "task_specific", broken)
    with pytest.raises(ZeroDivisionError):
        logged_run(tiny_glue, tmp_path)
    assert wandb_run.exit_code == 1


def test_a_job_started_again_in_its_folder_logs_into_its_own_wandb_run(
    tiny_glue, tmp_path, monkeypatch
):
    def preempted(plan, run_dir, log):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setitem(job.RECIPES, "task_specific", preempted)
        with pytest.raises(KeyboardInterrupt):
            logged_run(tiny_glue, tmp_path)
    assert logged_run(tiny_glue, tmp_path)["status"] == "completed"
    ids = {folder.name.rsplit("-", 1)[1] for folder in (tmp_path / "wandb").glob("offline-run-*")}
    assert len(ids) == 1  # one wandb run, begun and then resumed
    assert ids == {(tmp_path / "wandb_run_id").read_text().strip()}


def test_a_wandb_run_that_cannot_start_is_one_error_line_and_a_failed_record(
    tiny_glue, tmp_path, monkeypatch, capsys
):
    import wandb

    def refused(**settings):
        raise wandb.errors.UsageError("No API key configured. Use `wandb login` to log in.")

    monkeypatch.setattr(wandb, "init", refused)
    overrides = tiny_overrides(tiny_glue, tmp_path, "logger=wandb", "logger.mode=online")
    monkeypatch.setattr(sys, "argv", ["kdbench.run", *overrides])
    with pytest.raises(SystemExit) as exited:
        entry.main()
    stderr = capsys.readouterr().err
    lines = [line for line in stderr.splitlines() if line.startswith("kdbench")]
    assert exited.value.code == 2 and len(lines) == 1 and "Traceback" not in stderr
    assert lines[0].startswith("kdbench: error: logger=wandb could not start its run (No API key")
    assert "logger.mode=offline" in lines[0]
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["status"] == "failed" and record["error"] == lines[0][len("kdbench: error: ") :]


def test_the_jobs_of_an_init_sweep_have_names_of_their_own(tiny_glue, tmp_path):
    names = [
        make_plan(
            compose_config(
                tiny_overrides(tiny_glue, tmp_path, "init=layers", f"init.layers={layers}")
            )
        ).logger.run_name
        for layers in ("[1,2]", "[2,4]")
    ]
    assert names == ["sst2-att_kl-tiny-1,2-s1", "sst2-att_kl-tiny-2,4-s1"]


def test_a_fine_tuning_is_named_by_the_student_it_fine_tunes_and_its_grid_point(
    tiny_glue, tmp_path
):
    corpus = write_tiny_corpus(tmp_path / "corpus")
    overrides = agnostic_overrides(corpus, tmp_path / "distill", "objective=hid_seq", "seed=7")
    distilled = run(compose_config(overrides))
    plan = make_plan(
        compose_config(
            [
                "setting=finetune",
                f"setting.student_path={distilled['student_path']}",
                "task=rte",
                f"data.glue_dir={tiny_glue}",
                "stages.finetune.optimizer.lr=3e-5",
                "stages.finetune.batch_size=16",
            ]
        )
    )
    assert plan.logger.run_name == "rte-hid_seq-tiny-random-s7-lr3e-05-bs16"
    assert make_plan(compose_config(overrides)).logger.run_name == "hid_seq-tiny-random-s7"
