"""task=custom through the real command line, on a tiny random BERT: a user's CSV, JSONL pair task
and regression run end to end; the saved student loads with `pipeline`, predicts label names and
carries its model card and cost."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from kdbench.metrics import scores_only
from tests.helpers import custom_overrides

COST_FIELDS = ("params", "flops_per_example", "latency_ms", "throughput_per_s")


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "kdbench.run", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=900,
    )


def completed(run_dir, *overrides: str) -> dict:
    result = cli(*custom_overrides(run_dir, *overrides))
    assert result.returncode == 0, result.stderr
    record = json.loads((run_dir / "result.json").read_text())
    assert record["status"] == "completed" and record["task"] == "custom"
    return record


def test_a_csv_task_ships_a_student_that_predicts_label_names(user_data, tmp_path):
    from transformers import pipeline

    record = completed(
        tmp_path,
        f"task.train_file={user_data['csv']}",
        f"task.validation_file={user_data['csv_dev']}",
        "task.text_columns=[review]",
        "task.label_column=sentiment",
        "save_student=true",
    )
    assert set(scores_only(record["metrics"])) == {"accuracy"}
    classifier = pipeline("text-classification", model=str(tmp_path / "student"))
    predictions = classifier(["a good movie", "awful plot"])
    assert {prediction["label"] for prediction in predictions} <= {"neg", "pos"}
    card = (tmp_path / "student" / "README.md").read_text()
    header = yaml.safe_load(card.split("---")[1])
    assert header["library_name"] == "transformers" and "knowledge-distillation" in header["tags"]
    assert "datasets" not in header  # local files: the Hub's field takes Hub ids only
    assert header["metrics"] == ["accuracy"]
    assert "model-index" not in header  # its dataset type is read as a Hub id
    for fragment in (
        "**Teacher**: tiny\n",
        "**Objective**: intermediate: att_kl (padding=masked); then prediction: kd (alpha=0.5, "
        "temperature=2.0)",
        "**Init**: every_kth (2,4)",
        f"**Data**: {user_data['csv'].name}, {user_data['csv_dev'].name} (local files)",
        "| parameters |",
        "1-minute load average",  # the timings beside it depend on it: tests/unit/test_card.py
    ):
        assert fragment in card


def test_a_fine_tuned_teacher_given_back_maps_the_labels_by_its_names(
    user_data, tmp_path, monkeypatch
):
    from kdbench.planning.plan import make_plan
    from tests.helpers import compose_config

    monkeypatch.setenv("KDBENCH_CACHE", str(tmp_path / "cache"))
    data = [
        f"task.train_file={user_data['csv']}",
        "task.text_columns=[review]",
        "task.label_column=sentiment",
    ]
    completed(tmp_path / "run", *data, "stages.intermediate.epochs=0", "measure_cost=false")
    (teacher,) = (tmp_path / "cache" / "teachers").glob("custom-tiny-*[0-9a-f]")
    assert json.loads((teacher / "config.json").read_text())["id2label"] == {"0": "neg", "1": "pos"}
    given = [*data, f"teacher.finetuned_path={teacher}"]
    overrides = custom_overrides(tmp_path / "again", *given, "task.label_names=[pos,neg]")
    assert make_plan(compose_config(overrides)).task.labels == ("neg", "pos")


def test_the_record_carries_both_models_measured_cost(user_data, tmp_path):
    cost = completed(
        tmp_path,
        f"task.train_file={user_data['csv']}",
        "task.text_columns=[review]",
        "task.label_column=sentiment",
        "stages.intermediate.epochs=0",
    )["cost"]
    for model in ("teacher", "student"):
        assert all(cost[model][field] > 0 for field in COST_FIELDS), cost
    assert cost["student"]["params"] < cost["teacher"]["params"]
    assert cost["student"]["flops_per_example"] < cost["teacher"]["flops_per_example"]
    ratio = cost["teacher"]["latency_ms"] / cost["student"]["latency_ms"]
    assert cost["speedup_latency"] == pytest.approx(ratio)
    assert cost["length"] > 2 and cost["device"].startswith(("cpu", "NVIDIA"))
    assert cost["load_1min"] >= 0 and cost["cpu_count"] >= 1


def test_a_jsonl_pair_task_without_validation_file_runs(user_data, tmp_path):
    record = completed(
        tmp_path,
        f"task.train_file={user_data['jsonl']}",
        "task.text_columns=[question,answer]",
        "task.metric=[f1,accuracy]",
        "objective=vanilla_kd",
    )
    assert (
        list(scores_only(record["metrics"])) == ["f1", "accuracy"]
        and record["score_metric"] == "f1"
    )


def test_a_regression_csv_runs_with_correlations(user_data, tmp_path):
    record = completed(
        tmp_path,
        f"task.train_file={user_data['scores']}",
        "task.text_columns=[first,second]",
        "task.label_column=score",
        "task.regression=true",
        "objective=hid_seq",
    )
    assert list(record["metrics"]) == ["pearson", "spearman"]


def test_a_bad_file_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "one.csv").write_text("text,label\na,x\nb,x\n")
    result = cli(*custom_overrides(tmp_path, f"task.train_file={tmp_path / 'one.csv'}"))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("kdbench: error: ") and "one.csv has one class only" in lines[0]
