"""The step log: a resumed run's log holds each (stage, step) once, and its logger is never sent
a step twice."""

from __future__ import annotations

import json

from kdbench.records.steplog import StepLog


def test_a_rewound_log_keeps_the_checkpoints_rows_and_sends_no_step_twice(tmp_path):
    path, sent = tmp_path / "log.jsonl", []
    first = StepLog(path, sinks=[lambda stage, row: sent.append((stage, row["step"]))])
    first.log("heldout", 0, {"total": 1.0})
    first.log("distillation", 1, {"total": 0.9})
    checkpoint = first.position()
    first.log("distillation", 2, {"total": 0.8})  # after the checkpoint: logged again on resume
    first.close()
    again = StepLog(path, sinks=[lambda stage, row: sent.append((stage, row["step"]))])
    again.rewind(checkpoint, ("distillation",))
    again.log("heldout", 0, {"total": 1.0})  # measured again by the resumed run
    again.log("distillation", 2, {"total": 0.7})
    again.log("distillation", 3, {"total": 0.6})
    again.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["stage"], r["step"], r["total"]) for r in rows] == [
        ("heldout", 0, 1.0),
        ("distillation", 1, 0.9),
        ("distillation", 2, 0.7),
        ("distillation", 3, 0.6),
    ]
    assert sent == [("heldout", 0), ("distillation", 1), ("distillation", 2), ("distillation", 3)]


def test_a_fresh_start_after_a_failed_one_drops_the_failed_stages_rows(tmp_path):
    path = tmp_path / "log.jsonl"
    failed = StepLog(path)
    failed.log("teacher", 1, {"total": 1.0})
    failed.log("intermediate", 1, {"total": 0.5})
    failed.close()
    fresh = StepLog(path)
    fresh.rewind(None, ("intermediate", "prediction"))
    fresh.log("intermediate", 1, {"total": 0.4})
    fresh.close()
    steps = [(r["stage"], r["total"]) for r in map(json.loads, path.read_text().splitlines())]
    assert steps == [("teacher", 1.0), ("intermediate", 0.4)]
