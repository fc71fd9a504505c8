"""kdbench.report.collapse: runs whose dev predictions are (almost) all one class, or a
regression's at chance."""

from __future__ import annotations

from dataclasses import replace

from kdbench.records.record import RunRecord
from kdbench.report.collapse import (
    COLLAPSED,
    HEALTHY,
    UNKNOWN,
    collapse_status,
    learning_warnings,
    not_learned,
)


def test_from_the_predicted_label_counts():
    assert (
        collapse_status({"predicted_class_0": 96, "predicted_class_1": 4}, "accuracy") == COLLAPSED
    )
    assert collapse_status({"predicted_class_0": 94, "predicted_class_1": 6}, "accuracy") == HEALTHY
    matched = {
        "predicted_class_0_matched": 1,
        "predicted_class_1_matched": 99,
        "predicted_class_0": 50,
        "predicted_class_1": 50,
    }
    assert collapse_status(matched, "accuracy_matched") == COLLAPSED


def test_from_the_score_and_the_gold_counts():
    rte = {"dev_class_0": 146, "dev_class_1": 131}
    assert (
        collapse_status({**rte, "accuracy": 100 * 131 / 277}, "accuracy") == COLLAPSED
    )  # all not_entailment
    assert (
        collapse_status({**rte, "accuracy": 100 * 146 / 277}, "accuracy") == COLLAPSED
    )  # all entailment
    assert (
        collapse_status({**rte, "accuracy": 60.0}, "accuracy") == HEALTHY
    )  # > 5 points from 52.7 and 47.3
    assert (
        collapse_status({**rte, "accuracy": 100 * 147 / 277}, "accuracy") == UNKNOWN
    )  # one off the constant
    mrpc = {"dev_class_0": 129, "dev_class_1": 279}
    constant_f1 = 100 * 2 * 279 / (279 + 408)
    assert (
        collapse_status({**mrpc, "f1": constant_f1, "accuracy": 100 * 279 / 408}, "f1") == COLLAPSED
    )
    assert collapse_status({**mrpc, "f1": constant_f1, "accuracy": 80.0}, "f1") == HEALTHY
    cola = {"dev_class_0": 322, "dev_class_1": 721}
    assert collapse_status({**cola, "mcc": 0.0, "accuracy": 100 * 721 / 1043}, "mcc") == COLLAPSED
    assert collapse_status({"accuracy": 100 * 131 / 277}, "accuracy") == UNKNOWN  # no gold counts


def test_a_regression_at_chance_has_collapsed():
    assert collapse_status({"pearson": 3.3, "spearman": 40.0}, "pearson") == COLLAPSED
    assert collapse_status({"pearson": float("nan")}, "pearson") == COLLAPSED  # constant output
    assert collapse_status({"pearson": -60.0, "spearman": 2.0}, "pearson") == HEALTHY
    assert collapse_status({"spearman_test": 9.0}, "spearman_test") == COLLAPSED


def test_what_shows_that_a_model_has_not_learned():
    one_class = {"accuracy": 50.0, "predicted_class_0": 0, "predicted_class_1": 8}
    assert not_learned(one_class) == "predicts class 1 for 100% of the dev examples"
    assert not_learned({"f1_macro": 30.0, "predicted_class_2": 19, "predicted_class_0": 1}) == (
        "predicts class 2 for 95% of the dev examples"
    )  # f1_macro is a metric's name, not f1 on a split "macro"
    assert not_learned({"pearson": 3.3, "spearman": 4.1}) == (
        "scores at chance (pearson 3.3; |r| < 0.1)"
    )
    assert not_learned({"accuracy": 60.0, "predicted_class_0": 9, "predicted_class_1": 1}) is None
    assert not_learned({"pearson": 10.0}) is None and not_learned({}) is None


def test_a_run_warns_of_a_teacher_or_student_that_has_not_learned():
    record = RunRecord("task_specific", "rte", "tiny", "tiny", "2,4", "every_kth", "vanilla_kd", 1)
    teacher = {"accuracy": 50.0, "predicted_class_0": 16, "predicted_class_1": 0}
    student = {"accuracy": 75.0, "predicted_class_0": 10, "predicted_class_1": 6}
    outcome = {"metrics": student, "teacher_metrics": teacher}
    done = replace(record.completed(outcome, 1.0, {}), warnings=learning_warnings(outcome))
    assert done.warnings == [
        "the teacher predicts class 0 for 100% of the dev examples: it has not learned the task; "
        "fine-tune it longer (stages.teacher.epochs) or give a fine-tuned one "
        "(teacher.finetuned_path)"
    ]
    assert learning_warnings({"metrics": student, "teacher_metrics": student}) is None
    assert "warnings" not in record.completed({"metrics": student}, 1.0, {}).as_json()
    assert RunRecord.from_json(done.as_json()).warnings == done.warnings


def test_a_dev_set_of_one_class_predicted_right_is_no_sign():
    all_similar = {"accuracy": 100.0, "predicted_class_1": 5, "dev_class_1": 5}
    assert not_learned(all_similar) is None
    assert collapse_status(all_similar, "accuracy") == HEALTHY
    mostly_similar = {"predicted_class_1": 20, "dev_class_0": 5, "dev_class_1": 15}
    assert not_learned(mostly_similar) == "predicts class 1 for 100% of the dev examples"
