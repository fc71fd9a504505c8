"""The task list (kdbench.tasks) and the task configs agree."""

from __future__ import annotations

import yaml

from kdbench.planning.hydra_config import group_options
from kdbench.report.paper import read_cells
from kdbench.tasks import TASKS


def test_every_task_has_a_config_and_every_config_a_task():
    assert sorted(TASKS) == group_options("task")


def test_wnli_comes_last_in_the_paper_order():
    assert list(TASKS)[-1] == "wnli"


def test_the_papers_tasks_come_in_the_order_of_its_columns():
    columns = [task for task in dict.fromkeys(read_cells()["task"]) if task != "Avg"]
    assert [title for title in TASKS.values() if title in columns] == columns
    assert list(TASKS)[:8] == ["custom", "qnli", "sst2", "mnli", "mrpc", "qqp", "rte", "cola"]


def test_a_task_config_in_another_folder_is_a_task_with_no_code_change(user_data, tmp_path):
    """A new task is one YAML file: in a folder added by hydra.searchpath it is a valid `task=`
    choice, composes and plans; in conf/task it would also be listed with its title."""
    from kdbench.planning.groups import task_spec
    from kdbench.planning.hydra_config import compose, sweep_point
    from kdbench.tasks import task_columns

    config = {
        "name": "reviews",
        "title": "Reviews",
        "order": 10,
        "train_file": str(user_data["csv"]),
        "validation_file": str(user_data["csv_dev"]),
        "test_file": None,
        "dataset_name": None,
        "dataset_config": None,
        "text_columns": ["review"],
        "label_column": "sentiment",
        "label_names": None,
        "regression": False,
        "metric": ["accuracy", "f1"],
        "validation_fraction": 0.1,
        "split_seed": 0,
        "eval_splits": {"": "validation"},
        "lr": 2.0e-5,
        "batch_size": 16,
    }
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "reviews.yaml").write_text(yaml.safe_dump(config))
    points = sweep_point([f"hydra.searchpath=[file://{tmp_path}]", "task=reviews"])
    task = task_spec(compose(points).task)
    assert (task.name, task.labels, task.metrics) == ("reviews", ("neg", "pos"), ("accuracy", "f1"))
    assert task_columns(tmp_path / "task") == {"reviews": (10, "Reviews")}


def test_a_custom_task_is_titled_by_its_name_unless_given_a_title():
    from omegaconf import OmegaConf

    from kdbench.planning.hydra_config import compose, sweep_point

    def title(*overrides: str) -> str:
        task = compose(sweep_point(["task=custom", *overrides])).task
        return OmegaConf.to_container(task, resolve=True)["title"]

    assert (title(), title("task.name=tickets")) == ("custom", "tickets")
    assert title("task.name=tickets", "task.title=Tickets") == "Tickets"
    assert TASKS["custom"] == "custom"
