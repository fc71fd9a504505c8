"""Task metrics (GLUE's, and macro F1 for many classes), x100, from well-kept implementations
(scikit-learn, scipy)."""

from __future__ import annotations

from importlib import import_module

import numpy as np

from kdbench.errors import lookup


def _classes(predictions: np.ndarray) -> np.ndarray:
    return predictions.argmax(-1)


def _library(module: str, name: str):
    """`module.name`, imported when a metric is computed: scikit-learn and scipy take about a
    second to import, which a command refused before it evaluates, and a report reading metric
    names, need not wait for."""
    return getattr(import_module(module), name)


def _classification(name: str, **options):
    """scikit-learn's metric `name` of the predicted classes against the gold labels."""
    return lambda pred, gold: _library("sklearn.metrics", name)(gold, _classes(pred), **options)


def _correlation(name: str):
    """scipy's correlation `name` of a regression's outputs with the gold scores."""
    return lambda pred, gold: _library("scipy.stats", name)(pred.reshape(-1), gold)[0]


METRICS = {
    "accuracy": _classification("accuracy_score"),
    "f1": _classification("f1_score"),
    "f1_macro": _classification("f1_score", average="macro"),
    "mcc": _classification("matthews_corrcoef"),
    "pearson": _correlation("pearsonr"),
    "spearman": _correlation("spearmanr"),
}


def compute_metrics(
    names, predictions: np.ndarray, labels: np.ndarray, suffix: str = ""
) -> dict[str, float]:
    """{name[_suffix]: 100 * metric} for model outputs `predictions` [N, C] and gold `labels`
    [N]."""
    key = (lambda name: f"{name}_{suffix}") if suffix else (lambda name: name)
    return {
        key(name): 100.0 * float(lookup(METRICS, name, "metric")(predictions, labels))
        for name in names
    }


PREDICTED, GOLD = (
    "predicted_class",
    "dev_class",
)  # the count metrics' prefixes: predicted and gold labels per class


def scores_only(metrics: dict) -> dict:
    """``metrics`` without the label counts of :func:`label_counts`."""
    return {
        name: value for name, value in metrics.items() if not name.startswith((PREDICTED, GOLD))
    }


def label_counts(predictions: np.ndarray, labels: np.ndarray, suffix: str = "") -> dict[str, int]:
    """Per class c of a classifier's outputs [N, C]: how many examples it predicts as c
    (``predicted_class_c``) and how many are labelled c (``dev_class_c``), with ``_suffix`` like the
    metrics; {} for a regression."""
    if predictions.ndim != 2 or predictions.shape[1] < 2:
        return {}
    n_classes = predictions.shape[1]
    predicted = np.bincount(_classes(predictions), minlength=n_classes)
    gold = np.bincount(labels.astype(np.int64), minlength=n_classes)
    end = f"_{suffix}" if suffix else ""
    return {
        f"{prefix}_{c}{end}": int(counts[c])
        for prefix, counts in ((PREDICTED, predicted), (GOLD, gold))
        for c in range(n_classes)
    }
