"""Per-example dev predictions: ``predictions.npz`` in the run directory, which the record names by
its relative path (``predictions``).

Per dev split (``dev`` for a task with one, else its metric suffix, ``matched``), three arrays of
one length: ``<split>.example`` (the example's index in the dev split), ``<split>.predicted`` (the
predicted class, or the predicted score of a regression) and ``<split>.gold`` (the gold label or
score). The report's example-level tests read them (``kdbench.report.examples``)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from kdbench.runtime.storage import atomic_write

PREDICTIONS_FILE = "predictions.npz"
SINGLE_SPLIT = "dev"  # the split name of a task with one dev set (metric suffix "")
FIELDS = ("example", "predicted", "gold")


def predicted_values(outputs: np.ndarray) -> np.ndarray:
    """A classifier's predicted classes (argmax of outputs [N, C]), or a regression's scores."""
    if outputs.ndim == 2 and outputs.shape[1] > 1:
        return outputs.argmax(-1).astype(np.int64)
    return outputs.reshape(-1).astype(np.float32)


def split_arrays(
    outputs: np.ndarray, labels: np.ndarray, examples: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """One dev split's arrays from a model's outputs [N, C], gold labels [N] and the examples'
    indices in the split [N] (None: the outputs are in the split's order), in loader order."""
    predicted = predicted_values(outputs)
    gold = labels.astype(predicted.dtype)
    example = np.arange(len(labels)) if examples is None else np.asarray(examples)
    return {"example": example.astype(np.int64), "predicted": predicted, "gold": gold}


def write_predictions(path: Path, splits: dict[str, dict[str, np.ndarray]]) -> None:
    """Writes ``splits`` ({metric suffix: `split_arrays`}) to `path`, atomically, compressed."""
    arrays = {
        f"{suffix or SINGLE_SPLIT}.{field}": values[field]
        for suffix, values in splits.items()
        for field in FIELDS
    }
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    atomic_write(path, lambda handle: handle.write(buffer.getvalue()), binary=True)


def read_predictions(path: Path) -> dict[str, dict[str, np.ndarray]] | None:
    """{split suffix ("" for ``dev``): {field: array}} of a predictions file; None when it is
    missing or unreadable."""
    try:
        with np.load(path) as saved:
            arrays = {name: saved[name] for name in saved.files}
    except (OSError, ValueError):
        return None
    splits: dict[str, dict[str, np.ndarray]] = {}
    for name, values in arrays.items():
        split, _, field = name.rpartition(".")
        splits.setdefault("" if split == SINGLE_SPLIT else split, {})[field] = values
    return {split: fields for split, fields in splits.items() if set(FIELDS) <= set(fields)}
