"""The labels of a task of the user's own data: each read as its text (stripped; an empty one is
missing), classes in a stable order, and every problem one line naming where it is (`source`)."""

from __future__ import annotations

import math

from kdbench.errors import DataError


def label_text(value) -> str | None:
    """A stored label as the class it names: its text, stripped; None where it is missing or
    blank."""
    text = "" if value is None else str(value).strip()
    return text or None


def number(text: str) -> float | None:
    """The finite number `text` reads as, else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def label_order(text: str) -> tuple:
    """The sort key of labels: numbers first, by value, then the others by their text."""
    value = number(text)
    return (0, value, text) if value is not None else (1, 0.0, text)


def label_values(values: list, source: str, column: str, regression: bool) -> list:
    """The labels `values` of the column `column` of `source`: finite numbers for a regression,
    class names otherwise; a missing one, or a regression's that is not a finite number, is
    refused naming its row."""
    texts = [label_text(value) for value in values]
    if None in texts:
        raise DataError(
            f"{source}: row {texts.index(None) + 1} has no label in column {column!r}: "
            "fill it in or drop the row"
        )
    if not regression:
        return texts
    scores = [number(text) for text in texts]
    if None in scores:
        row = scores.index(None)
        raise DataError(
            f"{source}: row {row + 1} has the label {texts[row]!r} in column {column!r}, not a "
            "finite number: a regression needs numeric labels (or set task.regression=false)"
        )
    return scores


def class_names(labels: list[str], source: str, given) -> tuple[str, ...]:
    """The classes: as given (`task.label_names`), else the training labels `labels` (read from
    `source`) in `label_order`."""
    if given:
        return tuple(map(str, given))
    names = tuple(sorted(set(labels), key=label_order))
    if len(names) < 2:
        raise DataError(
            f"{source} has one class only ({names[0]!r}): a classifier needs two or more; add "
            "examples of the others, or set task.regression=true for a score"
        )
    return names


def check_known(labels: list[str], names: tuple[str, ...], source: str, train: str, given) -> None:
    """Every label of `source` is one of the classes `names` (`given`: from task.label_names, else
    from the training data `train`)."""
    unknown = sorted(set(labels) - set(names))
    if not unknown:
        return
    lacking = "task.label_names" if given else train
    problem = f"{source} has labels that {lacking} lacks ({few(unknown)})"
    if are_scores(labels):
        raise DataError(f"{problem}: they are numbers; for a real value set task.regression=true")
    if given:
        raise DataError(
            f"{problem}: name every label in task.label_names (it has {few(names)}), or set "
            "task.label_names=null to take them from the training data"
        )
    raise DataError(
        f"{problem}: add training examples of them, or drop those rows (known: {few(names)})"
    )


def few(values, at_most: int = 5) -> str:
    """The first values, and how many more there are."""
    more = f", ... {len(values) - at_most} more" if len(values) > at_most else ""
    return ", ".join(map(str, list(values)[:at_most])) + more


def are_scores(labels: list[str]) -> bool:
    """Whether labels read as real values: every one a number, most distinct ones not whole."""
    values = {number(label) for label in labels}
    if None in values:
        return False
    return sum(not value.is_integer() for value in values) > len(values) / 2
