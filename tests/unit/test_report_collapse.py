"""kdbench.report.collapse: runs whose dev predictions are (almost) all one class."""

from __future__ import annotations

from kdbench.report.collapse import COLLAPSED, HEALTHY, UNKNOWN, collapse_status


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
