"""The task list (kdbench.tasks) and the task configs agree."""

from __future__ import annotations

from kdbench.cli import group_options
from kdbench.tasks import TASKS


def test_every_task_has_a_config_and_every_config_a_task():
    assert sorted(TASKS) == group_options("task")


def test_wnli_comes_last_in_the_paper_order():
    assert list(TASKS)[-1] == "wnli"
