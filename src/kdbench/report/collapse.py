"""Collapsed runs: models that have not learned their task, their dev predictions (almost) all one
class, or a regression's at chance.

A run is ``collapsed`` when its most predicted class holds at least :data:`COLLAPSE_SHARE` of its
dev predictions (the record's ``predicted_class_<c>`` counts, written by
``kdbench.metrics.label_counts``) while the dev set's own labels (``dev_class_<c>``, where the
record has them) are that class for less of it (a dev set of one class is predicted right so), or,
scored by a correlation (a regression), when that correlation lies within
:data:`CHANCE_CORRELATION` points of 0 (|r| < 0.1; NaN, constant predictions, too);
``not_learned`` says which, for the teacher's metrics as for the student's. A classifier's record
without predicted counts (older runs) is judged from its scores: ``collapsed`` when every accuracy,
F1 and MCC it has equals, up to float rounding, what predicting one class c everywhere scores on its
dev set, computed from the record's gold counts (``dev_class_<c>``); ``ok`` when its accuracy lies
more than 100 (1 - COLLAPSE_SHARE) points from every constant prediction's accuracy (a run
predicting class c for at least 95% of N examples gets between n_c - 0.05 N and n_c + 0.05 N of
them right); ``unknown`` otherwise (a score near a constant predictor's, or no gold counts). A score
equal to a constant prediction's is not a proof (another predictor can score the same), but on dev
sets of hundreds of examples it is the one that does in practice.
"""

from __future__ import annotations

import math
import re

from kdbench.metrics import GOLD, METRICS, PREDICTED, scores_only

COLLAPSE_SHARE = 0.95  # a run predicting one class for >= 95% of its dev examples has collapsed
CHANCE_CORRELATION = 10.0  # score points: a regression with |r| < 0.1 scores at chance
CORRELATIONS = ("pearson", "spearman")
COLLAPSED, HEALTHY, UNKNOWN = "collapsed", "ok", "unknown"
_TOLERANCE = 1e-6  # score points: float rounding of a metric x100


def _counts(metrics: dict, prefix: str, split: str) -> dict[int, float]:
    """{class: count} of the ``prefix`` count metrics of one dev split ("" or a suffix such as
    "matched")."""
    end = f"_{split}" if split else ""
    pattern = re.compile(rf"{prefix}_(\d+){re.escape(end)}$")
    return {
        int(m.group(1)): float(v)
        for name, v in metrics.items()
        if (m := pattern.match(name)) and isinstance(v, int | float)
    }


def _metric_name(score_metric: str) -> str:
    """The metric a score is of (f1_macro of f1_macro_test, accuracy of accuracy_matched)."""
    named = [m for m in METRICS if score_metric == m or score_metric.startswith(f"{m}_")]
    return max(named, key=len, default=score_metric.split("_")[0])


def _split(score_metric: str | None) -> str:
    """The dev split a score is on: the suffix after the metric's name ("matched" of
    accuracy_matched)."""
    return score_metric[len(_metric_name(score_metric)) + 1 :] if score_metric else ""


def _mostly_one_class(gold: dict[int, float], label: int) -> bool:
    """Whether the dev set's own labels are `label` for at least COLLAPSE_SHARE of it: then
    predicting it almost everywhere is right, no sign of a model that has not learned."""
    total = sum(gold.values())
    return total > 0 and gold.get(label, 0.0) >= COLLAPSE_SHARE * total


def not_learned(metrics: dict, score_metric: str | None = None) -> str | None:
    """What shows that a model has not learned its task, from its dev metrics (`score_metric`: its
    score, else the first of them); None where nothing does, or nothing tells."""
    score_metric = score_metric or next(iter(scores_only(metrics)), None)
    predicted = _counts(metrics, PREDICTED, _split(score_metric))
    total = sum(predicted.values())
    if total > 0 and max(predicted.values()) >= COLLAPSE_SHARE * total:
        top = max(predicted, key=predicted.get)
        if not _mostly_one_class(_counts(metrics, GOLD, _split(score_metric)), top):
            return f"predicts class {top} for {predicted[top] / total:.0%} of the dev examples"
    value = metrics.get(score_metric) if score_metric else None
    if _metric_name(score_metric or "") in CORRELATIONS and isinstance(value, int | float):
        if math.isnan(value) or abs(value) < CHANCE_CORRELATION:
            return f"scores at chance ({score_metric} {value:.1f}; |r| < 0.1)"
    return None


def constant_scores(gold: dict[int, float], positive: int = 1) -> dict[int, dict[str, float]]:
    """Per class c, the accuracy, F1 (of class ``positive``) and MCC, x100, of predicting c
    everywhere."""
    total = sum(gold.values())
    true_positive = gold.get(positive, 0.0)
    return {
        c: {
            "accuracy": 100 * gold[c] / total,
            "mcc": 0.0,
            "f1": 100 * 2 * true_positive / (true_positive + total) if c == positive else 0.0,
        }
        for c in gold
    }


def collapse_status(metrics: dict, score_metric: str | None) -> str:
    """``collapsed``, ``ok`` or ``unknown`` for one run's metrics (see the module's rule)."""
    if not_learned(metrics, score_metric):
        return COLLAPSED
    split = _split(score_metric)
    predicted = _counts(metrics, PREDICTED, split)
    correlation = _metric_name(score_metric or "") in CORRELATIONS
    if sum(predicted.values()) > 0 or (correlation and score_metric in metrics):
        return HEALTHY
    gold = _counts(metrics, GOLD, split)
    end = f"_{split}" if split else ""
    measured = {name: metrics.get(name + end) for name in ("accuracy", "f1", "mcc")}
    measured = {name: float(v) for name, v in measured.items() if isinstance(v, int | float)}
    if not gold or sum(gold.values()) == 0 or not measured:
        return UNKNOWN
    constants = constant_scores(gold).values()
    for constant in constants:
        if all(abs(value - constant[name]) < _TOLERANCE for name, value in measured.items()):
            return COLLAPSED
    accuracy = measured.get("accuracy")
    if accuracy is not None and all(
        abs(accuracy - c["accuracy"]) > 100 * (1 - COLLAPSE_SHARE) for c in constants
    ):
        return HEALTHY
    return UNKNOWN


TEACHER_NOT_LEARNED = (
    "fine-tune it longer (stages.teacher.epochs) or give a fine-tuned one (teacher.finetuned_path)"
)
STUDENT_NOT_LEARNED = "its score says nothing of the method"


def learning_warnings(outcome: dict) -> list[str] | None:
    """A run's warnings (`RunRecord.warnings`): its teacher's and its student's that have not
    learned, from a recipe's outcome; None where both have."""
    warnings = [
        f"the {model} {shows}: it has not learned the task; {then}"
        for model, metrics, then in (
            ("teacher", outcome.get("teacher_metrics"), TEACHER_NOT_LEARNED),
            ("student", outcome["metrics"], STUDENT_NOT_LEARNED),
        )
        if metrics and (shows := not_learned(metrics))
    ]
    return warnings or None
