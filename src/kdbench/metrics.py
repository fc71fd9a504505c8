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


def compute_metrics(names, predictions: np.ndarray, labels: np.ndarray, suffix: str = "") -> dict[str, float]:
    """{name[_suffix]: 100 * metric} for model outputs `predictions` [N, C] and gold `labels` [N]."""
    key = (lambda name: f"{name}_{suffix}") if suffix else (lambda name: name)
    return {key(name): 100.0 * float(lookup(METRICS, name, "metric")(predictions, labels)) for name in names}
