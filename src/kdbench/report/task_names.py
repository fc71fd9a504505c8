"""How the report names and orders its tasks: kdbench's own by their configs (:mod:`kdbench.tasks`),
any other (a `task=custom` run's `task.name`, a task of a `hydra.searchpath` folder) by the
`task.title` and `task.order` its records hold, which :func:`learn_tasks` reads as the records
become a frame. A task with neither goes by its name, after every ordered task."""

from __future__ import annotations

from kdbench.errors import ReportError
from kdbench.tasks import COLUMNS

# {task: (order, title)} of the tasks kdbench does not ship, from the records last read
_RECORDED: dict[str, tuple[int, str]] = {}


def _column(record: dict) -> tuple[int, str] | None:
    """(order, title) a record holds for its task; None when its config names neither."""
    design = record.get("design") or {}
    if "task.title" not in design and "task.order" not in design:
        return None
    order = design.get("task.order")
    return (order if isinstance(order, int) else None), design.get("task.title") or record["task"]


def learn_tasks(records: list[dict]) -> None:
    """Takes the title and order of each task kdbench does not ship from its records (kdbench's own
    keep their configs'); refuses a task whose records disagree on its title or order."""
    _RECORDED.clear()
    where: dict[str, str] = {}
    for record in records:
        task, column = record.get("task"), _column(record)
        if task is None or task in COLUMNS or column is None:
            continue
        seen = _RECORDED.setdefault(task, column)
        where.setdefault(task, record["path"])
        if seen != column:
            (order, title), (other_order, other_title) = seen, column
            raise ReportError(
                f"the records of task {task} disagree on its title or order: {title!r} (order "
                f"{order}) in {where[task]}, {other_title!r} (order {other_order}) in "
                f"{record['path']}; report them from separate folders or rerun one with the "
                "other's task.title and task.order"
            )


def task_title(task) -> str:
    """How the tables name ``task``: its config's title, its records', else its name."""
    shipped = COLUMNS.get(task)
    return (shipped or _RECORDED.get(task) or (None, task))[1]


def task_sort_key(task) -> tuple:
    """By the tasks' order (the paper's columns in its order), then by name; a task without an
    order after them all."""
    lower = str(task).lower()
    order, _ = COLUMNS.get(lower) or _RECORDED.get(task) or (None, task)
    return (1, 0, lower) if order is None else (0, order, lower)


def ordered_tasks(tasks) -> list[str]:
    return sorted(set(tasks), key=task_sort_key)
