"""Every objective option distils end to end on the tiny model and logs each of its terms by
name."""

from __future__ import annotations

import json
import math

import pytest

from kdbench.job import run
from kdbench.planning.hydra_config import group_options
from tests.helpers import compose_config, tiny_overrides


@pytest.mark.parametrize("objective", group_options("objective"))
def test_objective_runs_end_to_end(objective, tiny_glue, tmp_path):
    cfg = compose_config(
        tiny_overrides(tiny_glue, tmp_path, f"objective={objective}", "stages.prediction.epochs=0")
    )
    record = run(cfg)
    assert record["status"] == "completed"
    steps = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    stage1 = [s for s in steps if s["stage"] == "intermediate"]
    term_names = [t.get("name") or t["loss"] for t in cfg.objective.terms]
    if not term_names:
        assert not stage1
        return
    assert stage1, "an objective with terms runs stage 1"
    for row in stage1:
        assert set(term_names) | {"total"} <= set(row)
        assert all(math.isfinite(row[name]) for name in term_names)
        assert row["total"] == pytest.approx(sum(row[name] for name in term_names), rel=1e-5)
