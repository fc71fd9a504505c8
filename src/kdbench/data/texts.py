"""The text columns of a task of the user's own data checked where they enter: text in every row,
none blank, and none holding a whole row that an unclosed quote swallowed. Each problem is one
DataError naming where it is (`source`) and the fix."""

from __future__ import annotations

from collections.abc import Callable

import datasets

from kdbench.data.columns import column_list
from kdbench.errors import DataError


def check_text(ds: datasets.Dataset, column: str, source: str) -> None:
    """The column `column` holds text in every row: not numbers, no values of mixed types (a JSON
    file's), none missing or blank (empty or whitespace only, as a blank label is missing)."""
    texts = column_list(ds, column)
    dtype = getattr(ds.features[column], "dtype", type(ds.features[column]).__name__)
    if dtype not in ("string", "large_string"):
        if any(isinstance(text, str) for text in texts):
            row = next(i for i, text in enumerate(texts) if not isinstance(text, (str, type(None))))
            raise DataError(
                f"{source}: column {column!r} mixes text and other values (row "
                f"{row + 1} holds {texts[row]!r}): write every value of it as a string"
            )
        raise DataError(
            f"{source}: column {column!r} holds {dtype}, not text: "
            "name its text columns in task.text_columns"
        )
    blank = next((row for row, text in enumerate(texts) if not (text or "").strip()), None)
    if blank is not None:
        raise DataError(
            f"{source}: row {blank + 1} has no text in column {column!r} (it is "
            "missing or blank): fill it in or drop the row"
        )


def check_whole_rows(
    texts: list[str], source: str, delimiter: str, is_label: Callable[[str], bool]
) -> None:
    """No text of a CSV file holds, on a line after its first, a whole row: a line ending in
    `delimiter` and a label (`is_label`). A field opening with a quote that is never closed runs on
    to the next quote, taking the rows between into its text; a quoted text of several lines is
    read as one."""
    for row, text in enumerate(texts):
        for line in text.splitlines()[1:]:
            _, found, label = line.rpartition(delimiter)
            if found and is_label(label):
                raise DataError(
                    f"{source}: row {row + 1}'s text holds the line {line!r}, a whole row: a "
                    'field opening with a quote (") runs on to the next quote; close or escape '
                    'that quote ("") or remove it'
                )
