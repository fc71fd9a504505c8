"""A stage block's per-task tables: the task's entry over the block's own value, read when the
stage is planned (the planned `StageSpec` holds the task's values, not the tables)."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from kdbench.errors import ConfigError
from kdbench.planning.stage_specs import TASK_TABLES, stage_spec, task_values

BLOCK = {
    "epochs": 10,
    "eval_every": 500,
    "batch_size": 32,
    "optimizer": {"lr": 3e-5, "warmup_ratio": 0.0, "warmup_ratio_per_task": {"qqp": 0.25}},
    "epochs_per_task": {"rte": 20, "cola": 0},
    "eval_every_per_task": {"rte": 50},
}
OWN = {"epochs": 10, "eval_every": 500, "batch_size": 32, "optimizer": BLOCK["optimizer"]}


def test_a_tasks_entries_stand_for_the_blocks_values():
    assert task_values(BLOCK, "rte") == OWN | {"epochs": 20, "eval_every": 50}
    assert task_values(BLOCK, "cola") == OWN | {"epochs": 0}  # 0 epochs: the stage is skipped
    assert task_values(BLOCK, "qqp") == OWN
    assert task_values(OWN | {"epochs_per_task": None}, "rte") == OWN
    assert set(TASK_TABLES.values()) == {"epochs", "eval_every"}


def test_the_planned_stage_holds_the_tasks_values_and_no_table():
    rte, qqp = stage_spec("finetune", BLOCK, "rte"), stage_spec("finetune", BLOCK, "qqp")
    assert (rte.epochs, rte.eval_every, rte.optimizer.warmup_ratio) == (20, 50, 0.0)
    assert (qqp.epochs, qqp.eval_every, qqp.optimizer.warmup_ratio) == (10, 500, 0.25)
    assert not set(TASK_TABLES) & set(asdict(rte))  # a teacher's cache key reads asdict
    assert not stage_spec("finetune", BLOCK, "cola").runs


def test_a_tasks_epochs_with_steps_is_refused():
    with pytest.raises(ConfigError, match="stages.finetune needs exactly one of epochs and steps"):
        stage_spec("finetune", BLOCK | {"epochs": None, "steps": 100}, "rte")
