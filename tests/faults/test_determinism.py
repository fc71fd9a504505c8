"""Determinism: the same config and seed give the same record and the same per-step losses; the seed
is what varies."""

from __future__ import annotations

import json

from kdbench.job import run
from tests.helpers import compose_config, tiny_overrides


def losses(run_dir) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    return [
        row for row in rows if row["stage"] != "teacher"
    ]  # the shared teacher is built by whichever run comes first


def test_same_seed_same_metrics_and_losses_another_seed_differs(tiny_glue, tmp_path):
    extra = ("objective=att_kl+hid_seq", "stages.intermediate.epochs=2")
    a = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "a", "seed=3", *extra)))
    b = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "b", "seed=3", *extra)))
    run(compose_config(tiny_overrides(tiny_glue, tmp_path / "c", "seed=4", *extra)))
    assert a["metrics"] == b["metrics"]
    assert losses(tmp_path / "a") == losses(tmp_path / "b")  # every logged loss term, every step
    # the seed drives data order, dropout, head and projection init: the first step already differs
    assert losses(tmp_path / "c")[0] != losses(tmp_path / "a")[0]
