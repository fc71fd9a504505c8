"""Run records: result.json (written atomically) and the per-step JSONL loss log."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

SCHEMA_VERSION = 1
RESULT_FILE = "result.json"
# What identifies a run in the tables: the design, one seed.
KEY_FIELDS = ("setting", "teacher", "student", "task", "objective", "init", "seed")
# What every completed record holds (a task-agnostic distillation has task None: its fine-tuning runs carry scores).
COMPLETED_FIELDS = ("status", *KEY_FIELDS, "score", "metrics")


def atomic_write(path: Path, write: Callable[[IO], None], *, binary: bool = False) -> None:
    """Write through `write(handle)` to a temp file in the same folder, fsync, then rename: readers (and a
    process killed mid-write) never leave or see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda handle: handle.write(text))


def write_json(path: Path, payload: dict) -> None:
    atomic_write_text(path, json.dumps(payload, indent=2, sort_keys=False, default=_jsonable) + "\n")


def _jsonable(value):
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class StepLog:
    """Appends one JSON line per logged step: {"stage", "step", "epoch", "lr", term: value, ...}."""

    def __init__(self, path: Path | None, sinks=()):
        """`path` None: a process that logs nothing (a data-parallel rank other than 0)."""
        self.path = path
        self.sinks = list(sinks)
        self._handle = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = path.open("a")

    def log(self, stage: str, step: int, values: dict[str, float], **extra) -> None:
        if self._handle is None:
            return
        row = {"stage": stage, "step": step, **extra, **{k: float(v) for k, v in values.items()}}
        self._handle.write(json.dumps(row, allow_nan=True) + "\n")
        self._handle.flush()
        for sink in self.sinks:
            sink({f"train/{k}": v for k, v in row.items() if k != "stage"}, step)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
