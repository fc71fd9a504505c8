"""The example-level test: a paired bootstrap over dev examples of a task metric's mean difference
(or of a contrast of several cells, such as an interaction's difference of differences).

Two compared cells a and b each have seed-paired runs with per-example predictions on the same dev
split. One resample draws N of the N dev examples with replacement (each example's count of
draws); every run is scored on it, each side's score averaged over its seeds, and the resample's
difference is mean a - mean b. The observed difference is that of the whole dev set (the
seed-level test's mean difference). The two-sided p value is the percentile bootstrap's: twice
the smaller share of resampled differences at or below 0 and at or above 0, each counted with one
added, (1 + k) / (B + 1), so no p value is 0; the interval holds the 2.5% and 97.5% quantiles.

The same resamples score every run, so an example's difficulty is shared by every seed and both
sides: the test holds the trained models fixed and asks whether the dev set's finite sample
explains the difference (the seed-level t-test holds the dev set fixed and samples the training
seeds). Metrics are scored from weighted counts: accuracy, F1 (of class 1), macro F1 (over the
classes of the whole split), MCC (Gorodkin's multiclass form, as scikit-learn's), Pearson, and
Spearman as Pearson of the whole split's ranks (the one approximation: ties a resample creates are
not re-ranked). Scores are x100, like the records'.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import rankdata

from kdbench.report.collapse import _metric_name

RESAMPLES = 2_000  # p values from 2 / 2001 up: Holm over a family of tens still resolves
CHUNK = 250  # resamples drawn at once
# the same resamples on every report: its numbers regenerate (BLAS may round their last bits
# differently on another CPU)
BOOTSTRAP_SEED = 0


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, 0 where the denominator is 0 (scikit-learn's convention)."""
    safe = np.where(denominator == 0, 1.0, denominator)
    return np.where(denominator == 0, 0.0, numerator / safe)


def _class_counts(weights, predicted, gold, classes) -> tuple:
    """Per class (columns): weighted true positives, predicted and gold counts [B, K]."""
    columns = [(predicted == k) & (gold == k) for k in classes]
    columns += [predicted == k for k in classes] + [gold == k for k in classes]
    counts = weights @ np.stack(columns, axis=1).astype(float)
    k = len(classes)
    return counts[:, :k], counts[:, k : 2 * k], counts[:, 2 * k :]


def _mcc(weights, predicted, gold, classes) -> np.ndarray:
    hits, said, truth = _class_counts(weights, predicted, gold, classes)
    total, correct = weights.sum(1), hits.sum(1)
    numerator = correct * total - (said * truth).sum(1)
    denominator = np.sqrt(
        (total**2 - (said**2).sum(1)).clip(0) * (total**2 - (truth**2).sum(1)).clip(0)
    )
    return _ratio(numerator, denominator)


def _f1(weights, predicted, gold, classes) -> np.ndarray:
    """F1 per class [B, K]."""
    hits, said, truth = _class_counts(weights, predicted, gold, classes)
    return _ratio(2 * hits, said + truth)


def _pearson(weights, x, y) -> np.ndarray:
    total = weights.sum(1)
    mean_x, mean_y = weights @ x / total, weights @ y / total
    cov = weights @ (x * y) / total - mean_x * mean_y
    var_x = weights @ (x * x) / total - mean_x**2
    var_y = weights @ (y * y) / total - mean_y**2
    return _ratio(cov, np.sqrt((var_x * var_y).clip(0)))


def weighted_metric(metric: str, weights: np.ndarray, predicted, gold) -> np.ndarray:
    """The metric (x100) of one run's predictions on each resample; `weights` [B, N] counts each
    example's draws."""
    weights = np.asarray(weights, dtype=float)
    predicted, gold = np.asarray(predicted), np.asarray(gold)
    classes = np.union1d(predicted, gold)
    if metric == "accuracy":
        value = weights @ (predicted == gold) / weights.sum(1)
    elif metric == "f1":
        value = _f1(weights, predicted, gold, [1])[:, 0]
    elif metric == "f1_macro":
        value = _f1(weights, predicted, gold, classes).mean(1)
    elif metric == "mcc":
        value = _mcc(weights, predicted, gold, classes)
    elif metric == "pearson":
        value = _pearson(weights, predicted.astype(float), gold.astype(float))
    elif metric == "spearman":
        value = _pearson(weights, rankdata(predicted), rankdata(gold))
    else:
        raise ValueError(f"no example-level test for metric {metric!r}")
    return 100.0 * value


def _side(metric: str, weights: np.ndarray, runs: list[tuple]) -> np.ndarray:
    """A side's score on each resample: the mean over its runs (seeds)."""
    return np.mean([weighted_metric(metric, weights, p, g) for p, g in runs], axis=0)


def contrast_bootstrap(
    metric: str,
    sides: list[tuple[float, list[tuple]]],
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict:
    """The paired bootstrap of a contrast of cells, the sum of weight x the cell's mean score over
    `sides` ([(weight, runs)], runs holding (predicted, gold) arrays of one length per run; see the
    module): ``diff`` (on the whole split), ``ci_low``/``ci_high`` (95% percentile interval), ``p``
    and ``n_examples``. A difference of two cells weighs them +1 and -1; an interaction's difference
    of differences its four cells +1, -1, -1, +1."""

    def contrast(weights: np.ndarray) -> np.ndarray:
        return sum(weight * _side(metric, weights, runs) for weight, runs in sides)

    n = len(sides[0][1][0][1])
    diff = float(contrast(np.ones((1, n)))[0])
    rng = np.random.default_rng(seed)
    deltas = []
    for start in range(0, resamples, CHUNK):
        size = min(CHUNK, resamples - start)
        draws = rng.integers(0, n, size=(size, n)) + n * np.arange(size)[:, None]
        weights = np.bincount(draws.ravel(), minlength=size * n).reshape(size, n).astype(float)
        deltas.append(contrast(weights))
    resampled = np.concatenate(deltas)
    at_most, at_least = int((resampled <= 0).sum()), int((resampled >= 0).sum())
    p = min(1.0, 2 * (1 + min(at_most, at_least)) / (resamples + 1))
    low, high = np.quantile(resampled, [0.025, 0.975])
    return {"diff": diff, "ci_low": float(low), "ci_high": float(high), "p": p, "n_examples": n}


def paired_bootstrap(
    metric: str,
    runs_a: list[tuple],
    runs_b: list[tuple],
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict:
    """The paired bootstrap of mean a - mean b over dev examples (`contrast_bootstrap`)."""
    return contrast_bootstrap(metric, [(1.0, runs_a), (-1.0, runs_b)], resamples, seed)


def metric_of(score_metric: str | None) -> str | None:
    """The metric of a score (accuracy of accuracy_matched); None when none has a test (or a record
    names none: a table's empty cell)."""
    if not isinstance(score_metric, str) or not score_metric:
        return None
    name = _metric_name(score_metric)
    return name if name in {"accuracy", "f1", "f1_macro", "mcc", "pearson", "spearman"} else None


NO_TEST = {"diff": math.nan, "ci_low": math.nan, "ci_high": math.nan, "p": math.nan}
