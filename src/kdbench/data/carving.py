"""The validation split carved from training data that has none: a seeded, stratified sample of its
distinct inputs, so that no input is in both splits and each class (a regression: each range of
values) has its share of either split, the same for every run of a sweep; and the inputs that
given splits share."""

from __future__ import annotations

import logging

import numpy as np

from kdbench.data.columns import column_list
from kdbench.data.labels import label_order, label_text
from kdbench.errors import DataError

log = logging.getLogger("kdbench")


def inputs(ds, text_fields: tuple[str, ...]):
    """Each row's input: the values of its text columns, as a tuple."""
    return zip(*(column_list(ds, field) for field in text_fields))


def input_groups(ds, text_fields: tuple[str, ...]) -> list[list[int]]:
    """The rows of `ds` grouped by their input (the values of its text columns), in the order of
    each input's first row."""
    groups: dict[tuple, list[int]] = {}
    for row, key in enumerate(inputs(ds, text_fields)):
        groups.setdefault(key, []).append(row)
    return list(groups.values())


def warn_shared(given, train, text_fields: tuple[str, ...], names: tuple[str, str]) -> None:
    """Warns where rows of the given split `given` have an input (the values of its text columns)
    that a row of `train` has too: its scores are then optimistic (a carved split shares none).
    `names`: how messages name the two."""
    seen = set(inputs(train, text_fields))
    shared = sum(key in seen for key in inputs(given, text_fields))
    if shared:
        log.warning(
            "%s: %d of its %d examples have an input that train (%s) has too, so its scores "
            "are optimistic: remove them from one of the two",
            names[0],
            shared,
            len(given),
            names[1],
        )


def carve(
    ds, text_fields: tuple[str, ...], label_column: str, fraction: float, seed: int, source: str
) -> tuple[list[int], list[int]]:
    """The rows of `ds` (read from `source`) for training and for validation, each in file order.

    Validation gets `fraction` of the distinct inputs, every copy of an input on the same side:
    the inputs are ordered by the label of their first row (`label_order`), at random (`seed`)
    among equal labels, and every (inputs / size)-th one of that order from a random start is
    drawn (systematic sampling), so each class gets its share of them to within one.
    """
    groups = input_groups(ds, text_fields)
    if len(groups) < 2:
        raise DataError(
            f"{source} holds {len(groups)} distinct input: carving a validation split from it "
            "needs two or more; add examples, or give task.validation_file"
        )
    labels = column_list(ds, label_column)
    rng = np.random.default_rng(seed)
    draw = rng.permutation(len(groups))
    order = sorted(
        range(len(groups)),
        key=lambda g: (label_order(label_text(labels[groups[g][0]]) or ""), draw[g]),
    )
    size = min(max(round(fraction * len(groups)), 1), len(groups) - 1)
    start = rng.uniform()
    drawn = {order[int((i + start) * len(groups) / size)] for i in range(size)}
    sides = ([], [])
    for g, group in enumerate(groups):
        sides[g in drawn].extend(group)
    return sorted(sides[0]), sorted(sides[1])
