"""End to end on a tiny random BERT: records, stages, a frozen teacher, caching, and one-line
errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from kdbench.job import run
from kdbench.recipes import task_specific
from kdbench.records.predictions import read_predictions
from kdbench.teacher import finetune as teacher_finetune
from tests.helpers import compose_config, tiny_overrides

RECORD_KEYS = {
    "schema",
    "status",
    "setting",
    "task",
    "teacher",
    "student",
    "init",
    "objective",
    "seed",
    "metrics",
    "score",
    "teacher_metrics",
    "timing",
    "config",
}


def test_smoke_run_writes_a_valid_record(tiny_glue, tmp_path):
    record = run(compose_config(tiny_overrides(tiny_glue, tmp_path)))
    on_disk = json.loads((tmp_path / "result.json").read_text())
    assert on_disk == json.loads(json.dumps(record))
    assert RECORD_KEYS <= set(on_disk)
    assert on_disk["status"] == "completed" and on_disk["schema"] == 1
    assert (on_disk["task"], on_disk["teacher"], on_disk["student"], on_disk["objective"]) == (
        "sst2",
        "tiny",
        "tiny",
        "att_kl",
    )
    assert on_disk["init"] == "2,4"  # every_kth for 4 -> 2 layers
    counts = {f"{kind}_{c}" for kind in ("predicted_class", "dev_class") for c in (0, 1)}
    assert set(on_disk["metrics"]) == {"accuracy"} | counts and 0 <= on_disk["score"] <= 100
    metrics = on_disk["metrics"]
    assert (
        metrics["predicted_class_0"] + metrics["predicted_class_1"]
        == metrics["dev_class_0"] + metrics["dev_class_1"]
    )
    assert on_disk["score"] == on_disk["metrics"]["accuracy"]
    predictions = read_predictions(tmp_path / on_disk["predictions"])[""]
    assert 100 * (predictions["predicted"] == predictions["gold"]).mean() == pytest.approx(
        on_disk["score"]
    )
    # evaluated in length order, each prediction names its row of the dev file
    dev_rows = (tiny_glue / "SST-2" / "dev.tsv").read_text().splitlines()[1:]
    labels = [int(row.split("\t")[1]) for row in dev_rows]
    assert sorted(predictions["example"]) == list(range(len(labels)))
    assert [labels[i] for i in predictions["example"]] == list(predictions["gold"])
    assert {
        "teacher_finetune_s",
        "intermediate_s",
        "prediction_s",
        "eval_s",
        "logits_table_s",
        "features_table_s",
    } <= set(on_disk["timing"])
    assert set(on_disk["throughput"]) == {
        "intermediate_examples_per_s",
        "prediction_examples_per_s",
    }
    assert on_disk["student_parameters"] > 0
    assert on_disk["config"]["objective"]["name"] == "att_kl"
    assert json.loads((tmp_path / "config.json").read_text())["seed"] == 1
    steps = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    stage1 = [s for s in steps if s["stage"] == "intermediate"]
    assert stage1 and {"att_kl", "total", "lr", "step"} <= set(stage1[0])
    assert any(s["stage"] == "prediction" and "kd" in s for s in steps)


def test_vanilla_kd_runs_the_prediction_stage_only(tiny_glue, tmp_path):
    record = run(compose_config(tiny_overrides(tiny_glue, tmp_path, "objective=vanilla_kd")))
    stages = {
        json.loads(line)["stage"]
        for line in (tmp_path / "train_log.jsonl").read_text().splitlines()
    }
    assert "intermediate" not in stages and "prediction" in stages
    assert record["timing"]["intermediate_s"] == 0.0


def test_zero_epochs_skip_stages(tiny_glue, tmp_path):
    record = run(
        compose_config(
            tiny_overrides(
                tiny_glue, tmp_path, "stages.intermediate.epochs=0", "stages.prediction.epochs=0"
            )
        )
    )
    assert record["status"] == "completed" and record["timing"]["prediction_s"] == 0.0


def test_teacher_is_frozen_and_never_updated(tiny_glue, tmp_path, monkeypatch):
    seen = {}
    real = teacher_finetune.finetuned_teacher

    def spy(*args, **kwargs):
        finetuned = real(*args, **kwargs)
        seen["teacher"] = finetuned.model
        seen["before"] = {k: v.clone() for k, v in finetuned.model.state_dict().items()}
        return finetuned

    optimised = []
    real_adamw = torch.optim.AdamW

    def recording_adamw(groups, **kwargs):
        optimised.extend(p for g in groups for p in g["params"])
        return real_adamw(groups, **kwargs)

    monkeypatch.setattr(task_specific, "finetuned_teacher", spy)
    monkeypatch.setattr(torch.optim, "AdamW", recording_adamw)
    run(compose_config(tiny_overrides(tiny_glue, tmp_path)))
    teacher = seen["teacher"]
    assert not teacher.training
    assert all(not p.requires_grad and p.grad is None for p in teacher.parameters())
    assert all(torch.equal(v, seen["before"][k]) for k, v in teacher.state_dict().items())
    teacher_ids = {id(p) for p in teacher.parameters()}
    assert optimised and not teacher_ids & {id(p) for p in optimised}


def test_fine_tuned_teacher_is_cached_and_reused(tiny_glue, tmp_path):
    first = run(
        compose_config(
            tiny_overrides(tiny_glue, tmp_path / "a", "seed=11", "trainer.teacher_seed=5")
        )
    )
    second = run(
        compose_config(
            tiny_overrides(tiny_glue, tmp_path / "b", "seed=12", "trainer.teacher_seed=5")
        )
    )
    assert first["timing"]["teacher_finetune_s"] > 0
    assert second["timing"]["teacher_finetune_s"] == 0.0  # loaded from the cache
    assert second["teacher_metrics"] == first["teacher_metrics"]


def test_save_student_writes_a_loadable_model(tiny_glue, tmp_path):
    from transformers import AutoModelForSequenceClassification

    run(
        compose_config(
            tiny_overrides(tiny_glue, tmp_path, "save_student=true", "objective=vanilla_kd")
        )
    )
    student = AutoModelForSequenceClassification.from_pretrained(tmp_path / "student")
    assert student.config.num_hidden_layers == 2


@pytest.mark.parametrize("task", ["stsb", "rte", "mrpc", "cola"])
def test_other_task_kinds_run(tiny_glue, tmp_path, task):
    record = run(
        compose_config(
            tiny_overrides(tiny_glue, tmp_path, f"task={task}", "stages.intermediate.epochs=0")
        )
    )
    expected = {
        "stsb": {"pearson", "spearman"},
        "rte": {"accuracy"},
        "mrpc": {"f1", "accuracy"},
        "cola": {"mcc", "accuracy"},
    }
    counts = (
        set()
        if task == "stsb"
        else {f"{kind}_{c}" for kind in ("predicted_class", "dev_class") for c in (0, 1)}
    )
    assert set(record["metrics"]) == expected[task] | counts  # a regression has no label counts


@pytest.mark.parametrize(("student", "label"), [("tiny", "2,4"), ("2x384", "random")])
def test_the_default_init_copies_teacher_layers_only_when_the_student_can_take_them(
    tiny_glue, tmp_path, student, label
):
    from kdbench.planning.plan import make_plan

    overrides = [
        o
        for o in tiny_overrides(tiny_glue, tmp_path, f"student={student}")
        if not o.startswith("init=")
    ]
    cfg = compose_config([*overrides, "objective=hid_seq"])
    assert cfg.init.name == "auto"
    assert make_plan(cfg).init.label == label


def test_a_width_mismatch_runs_with_a_random_init_and_the_record_says_so(tiny_glue, tmp_path):
    overrides = [
        o for o in tiny_overrides(tiny_glue, tmp_path, "student=2x384") if not o.startswith("init=")
    ]
    record = run(compose_config([*overrides, "objective=hid_seq", "stages.teacher.epochs=0"]))
    assert record["status"] == "completed"
    assert (record["init"], record["init_name"]) == ("random", "auto")


def test_records_say_where_they_came_from(tiny_glue, tmp_path):
    record = run(
        compose_config(
            tiny_overrides(
                tiny_glue, tmp_path, "stages.intermediate.epochs=0", "stages.prediction.epochs=0"
            )
        )
    )
    provenance = record["provenance"]
    assert {
        "git_commit",
        "git_dirty",
        "source_sha256",
        "kdbench",
        "torch",
        "transformers",
        "datasets",
        "python",
        "device",
        "world_size",
        "started_at",
    } <= provenance.keys()
    assert provenance["world_size"] == 1 and provenance["device"].startswith("cpu")
    assert provenance["started_at"].endswith("Z") and provenance["torch"].startswith("2.")


def test_a_run_that_has_not_learned_ends_with_a_warning_line(
    tiny_glue, tmp_path, monkeypatch, capsys
):
    """The tiny random teacher, fine-tuned for one epoch on 48 examples, predicts one class: the run
    says so in its last lines, its record and its report."""
    from kdbench import run as entry
    from kdbench.report.cli import main as report_main

    overrides = tiny_overrides(tiny_glue, tmp_path / "run", "objective=vanilla_kd")
    monkeypatch.setattr(sys, "argv", ["kdbench.run", *overrides])
    entry.main()
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    err = capsys.readouterr().err.splitlines()
    assert err[-len(record["warnings"]) :] == [f"kdbench: warning: {w}" for w in record["warnings"]]
    assert record["warnings"][0].startswith("the teacher predicts class ")
    assert report_main([str(tmp_path / "run"), "--out", str(tmp_path / "report")]) == 0
    assert (
        "The teacher of 1 of 1 runs has not learned"
        in (tmp_path / "report" / "report.html").read_text()
    )


def test_no_progress_bar_of_any_library_with_progress_bar_false(tiny_glue, tmp_path):
    """datasets' tokenising bars follow trainer.progress_bar too (a subprocess: tqdm writes to the
    terminal's stream, which an in-process capture does not see)."""
    overrides = tiny_overrides(tiny_glue, tmp_path / "run", "objective=vanilla_kd")
    result = subprocess.run(
        [sys.executable, "-m", "kdbench.run", *overrides, "measure_cost=false"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "/s]" not in result.stderr and "%|" not in result.stderr, result.stderr[-2000:]
