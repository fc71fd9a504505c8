"""kdbench.metrics.label_counts: the predicted and gold label counts a record keeps per dev
split."""

from __future__ import annotations

import numpy as np

from kdbench.metrics import label_counts, scores_only


def test_counts_predicted_and_gold_labels_per_class():
    outputs = np.array([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [0.0, 1.0, 2.0], [5.0, 0.0, 0.0]])
    labels = np.array([0, 0, 2, 1])
    assert label_counts(outputs, labels, "matched") == {
        "predicted_class_0_matched": 2,
        "predicted_class_1_matched": 1,
        "predicted_class_2_matched": 1,
        "dev_class_0_matched": 2,
        "dev_class_1_matched": 1,
        "dev_class_2_matched": 1,
    }


def test_a_constant_predictor_and_a_regression():
    counts = label_counts(np.array([[0.0, 1.0]] * 3), np.array([0, 1, 1]))
    assert counts == {
        "predicted_class_0": 0,
        "predicted_class_1": 3,
        "dev_class_0": 1,
        "dev_class_1": 2,
    }
    assert label_counts(np.array([[0.3], [0.7]]), np.array([0.1, 0.9])) == {}


def test_scores_only_leaves_the_counts_out():
    metrics = {"accuracy": 80.0, **label_counts(np.array([[0.0, 1.0]] * 2), np.array([0, 1]))}
    assert scores_only(metrics) == {"accuracy": 80.0}
