"""A dataset's column read in one call.

From datasets 5 on, `dataset[name]` is a lazy column: converting it indexes it row by row, one
table slice per row (about 2 ms each: a minute for 30,000 examples, minutes for MNLI), and
iterating it formats one row at a time. These read the whole column through Arrow at once, with
the dataset's selection of rows applied; anything else that maps a name to values (a dict of
lists, a `datasets` version whose columns are lists) is read as it is.
"""

from __future__ import annotations

import json

import numpy as np

JSON_TYPE = "arrow.json"  # Arrow's type of a JSON file's column of mixed types: values as JSON text


def arrow_column(dataset, name: str):
    """The column as an Arrow array for a `datasets.Dataset`, else None."""
    with_format = getattr(dataset, "with_format", None)
    return with_format("arrow")[name][:] if with_format is not None else None


def column_array(dataset, name: str) -> np.ndarray:
    """A numeric column (lengths, labels) as one writable numpy array (Arrow's own is read-only,
    which torch warns of)."""
    column = arrow_column(dataset, name)
    return np.array(column.to_numpy() if column is not None else dataset[name])


def column_list(dataset, name: str) -> list:
    """A column of any type (texts, labels) as a Python list; a column of mixed types (`JSON_TYPE`)
    as its values, decoded."""
    column = arrow_column(dataset, name)
    if column is None:
        return list(dataset[name])
    values = column.to_pylist()
    if getattr(column.type, "extension_name", None) != JSON_TYPE:
        return values
    return [None if value is None else json.loads(value) for value in values]
