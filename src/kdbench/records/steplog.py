"""The per-step log of a run: `train_log.jsonl`, one JSON line per logged step, each row also sent
to the run's logger (its sinks)."""

from __future__ import annotations

import json
from pathlib import Path

from kdbench.runtime.storage import atomic_write_text


def _key(row: dict) -> tuple[str, int]:
    return row["stage"], row["step"]


class StepLog:
    """Appends one JSON line per logged step: {"stage", "step", "epoch", "lr", term: value, ...};
    each sink gets the row too, as `sink(stage, the row less its stage)`.

    A resumed run rewinds the log to its checkpoint (`rewind`): the rows logged after it go, and
    the stage logs them again; a row of a (stage, step) the log holds since is not written again
    (an evaluation a resumed stage repeats). So the log holds each (stage, step) once, and a sink
    is never sent a (stage, step) twice: it keeps the rows it was sent before the rewind."""

    def __init__(self, path: Path | None, sinks=()):
        """`path` None: a process that logs nothing (a data-parallel rank other than 0)."""
        self.path = path
        self.sinks = list(sinks)
        self._handle = None
        self._rows = 0  # rows in the file
        self._logged: set[tuple[str, int]] = set()  # in the file since the rewind
        self._sent: set[tuple[str, int]] = set()  # rewound away, the sinks have them
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._rows = len(self._read())
            self._handle = path.open("a")

    def _read(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.is_file() else []

    def position(self) -> dict:
        """Where the log is, as a checkpoint keeps it (nothing in a process that logs nothing)."""
        return {} if self.path is None else {"log": {"path": str(self.path), "rows": self._rows}}

    def rewind(self, state: dict | None, stages: tuple[str, ...]) -> None:
        """Back to where it was when `state` (a checkpoint of `stages`) was saved, or to before the
        first row of `stages` when there is none (a fresh start after a failed one); the file is
        rewritten atomically."""
        if self._handle is None:
            return
        lines = self._read()
        rows = [json.loads(line) for line in lines]
        at = (state or {}).get("log", {})
        if at.get("path") == str(self.path):
            kept = at["rows"]
        elif state is None:
            kept = next((n for n, row in enumerate(rows) if row["stage"] in stages), len(rows))
        else:  # a checkpoint of another run's log (a teacher's, taken over)
            kept = len(rows)
        self._logged = {_key(row) for row in rows[:kept]}
        self._sent |= {_key(row) for row in rows[kept:]}
        if kept < len(rows):
            self._handle.close()
            atomic_write_text(self.path, "".join(line + "\n" for line in lines[:kept]))
            self._handle = self.path.open("a")
        self._rows = kept

    def log(self, stage: str, step: int, values: dict[str, float], **extra) -> None:
        if self._handle is None or (stage, step) in self._logged:
            return
        row = {"stage": stage, "step": step, **extra, **{k: float(v) for k, v in values.items()}}
        self._handle.write(json.dumps(row, allow_nan=True) + "\n")
        self._handle.flush()
        self._rows += 1
        self._logged.add((stage, step))
        if (stage, step) in self._sent:
            return
        for sink in self.sinks:
            sink(stage, {k: v for k, v in row.items() if k != "stage"})

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
