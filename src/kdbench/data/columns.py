"""A dataset's column read in one call.

From datasets 5 on, `dataset[name]` is a lazy column: converting it indexes it row by row, one
table slice per row (about 2 ms each: a minute for 30,000 examples, minutes for MNLI), and
iterating it formats one row at a time. These read the whole column through Arrow at once, with
the dataset's selection of rows applied; anything else that maps a name to values (a dict of
lists, a `datasets` version whose columns are lists) is read as it is.
"""

from __future__ import annotations

import numpy as np


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
    """A column of any type (texts, labels) as a Python list."""
    column = arrow_column(dataset, name)
    return column.to_pylist() if column is not None else list(dataset[name])
