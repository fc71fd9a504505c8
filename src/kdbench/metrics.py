"""Task metrics (GLUE's, and macro F1 for many classes), x100, from well-kept implementations
(scikit-learn, scipy)."""

from __future__ import annotations

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from kdbench.errors import lookup


def _classes(predictions: np.ndarray) -> np.ndarray:
    return predictions.argmax(-1)


METRICS = {
    "accuracy": lambda pred, gold: accuracy_score(gold, _classes(pred)),
    "f1": lambda pred, gold: f1_score(gold, _classes(pred)),
    "f1_macro": lambda pred, gold: f1_score(gold, _classes(pred), average="macro"),
    "mcc": lambda pred, gold: matthews_corrcoef(gold, _classes(pred)),
    "pearson": lambda pred, gold: pearsonr(pred.reshape(-1), gold)[0],
    "spearman": lambda pred, gold: spearmanr(pred.reshape(-1), gold)[0],
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
