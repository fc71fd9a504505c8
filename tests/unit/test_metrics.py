"""kdbench.metrics.compute_metrics: each task metric against values worked out by hand, x100."""

from __future__ import annotations

import numpy as np
import pytest

from kdbench.errors import ConfigError
from kdbench.metrics import METRICS, compute_metrics

# four examples, two classes: predicted 0, 1, 1, 0 against gold 0, 1, 0, 0
CLASS_OUTPUTS = np.array([[2.0, 1.0], [0.0, 3.0], [1.0, 4.0], [5.0, 0.0]])
CLASS_GOLD = np.array([0, 1, 0, 0])
# a regression's outputs [4, 1] against gold scores
SCORES = np.array([[1.0], [2.0], [3.0], [4.0]])

HAND_VALUES = {
    "accuracy": (CLASS_OUTPUTS, CLASS_GOLD, 75.0),  # 3 of 4
    "f1": (CLASS_OUTPUTS, CLASS_GOLD, 200 / 3),  # class 1: precision 1/2, recall 1
    # class 0: precision 1, recall 2/3, F1 0.8; class 1: F1 2/3
    "f1_macro": (CLASS_OUTPUTS, CLASS_GOLD, 100 * (0.8 + 2 / 3) / 2),
    # TP 1, TN 2, FP 1, FN 0: (1*2 - 1*0) / sqrt(2 * 1 * 3 * 2)
    "mcc": (CLASS_OUTPUTS, CLASS_GOLD, 100 * 2 / np.sqrt(12)),
    # deviations -1.5, -0.5, 0.5, 1.5 and -1.75, -0.75, 0.25, 2.25: 6.5 / sqrt(5 * 8.75)
    "pearson": (SCORES, np.array([1.0, 2.0, 3.0, 5.0]), 100 * 6.5 / np.sqrt(5 * 8.75)),
    # rank differences 0, -1, 1, 0: 1 - 6 * 2 / (4 * 15)
    "spearman": (SCORES, np.array([1.0, 3.0, 2.0, 4.0]), 80.0),
}


def test_every_metric_has_a_hand_value():
    assert set(HAND_VALUES) == set(METRICS)


@pytest.mark.parametrize("name", sorted(HAND_VALUES))
def test_metric_equals_its_hand_value(name):
    outputs, gold, expected = HAND_VALUES[name]
    assert compute_metrics([name], outputs, gold) == {name: pytest.approx(expected, abs=1e-9)}


def test_a_suffix_names_the_split():
    scores = compute_metrics(["accuracy", "f1"], CLASS_OUTPUTS, CLASS_GOLD, "matched")
    assert set(scores) == {"accuracy_matched", "f1_matched"}


def test_an_unknown_metric_names_the_valid_ones():
    with pytest.raises(ConfigError, match="unknown metric 'acc'; valid: accuracy, f1, f1_macro"):
        compute_metrics(["acc"], CLASS_OUTPUTS, CLASS_GOLD)
