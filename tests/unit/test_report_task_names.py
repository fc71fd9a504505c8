"""How the report names and orders tasks: kdbench's own by their configs, any other by the title
and order its records hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from kdbench.report.cli import main
from tests.unit.report_helpers import run_main, write_run


def _write(results: Path, task: str, title: str | None, order: int | None, seeds=(1, 2)) -> None:
    config = {"task": {"name": task, "title": title, "order": order}}
    for seed in seeds:
        write_run(results, task=task, seed=seed, score=60.0 + seed, config=config)


def _heading(out: Path) -> str:
    return next(
        line for line in (out / "tables.md").read_text().splitlines() if line.startswith("| Obj")
    )


# (task, title, order) as records hold them -> the tables' heading
HEADINGS = {
    "a custom task at its records' order": (
        [("rte", "RTE", 6), ("tickets", "Tickets", 0)],
        "| Objective | Tickets | RTE | Avg |",
    ),
    "a searchpath task ordered after the paper's": (
        [("reviews", "Reviews", 10), ("sst2", "SST-2", 2), ("rte", "RTE", 6)],
        "| Objective | SST-2 | RTE | Reviews | Avg |",
    ),
    "the paper's tasks by their configs whatever records say": (
        [("rte", "Entailment", 0), ("sst2", "Sentiment", 9)],
        "| Objective | SST-2 | RTE | Avg |",
    ),
}


@pytest.mark.parametrize("case", HEADINGS)
def test_a_task_is_headed_by_its_records_title_at_its_order_unless_kdbench_ships_it(tmp_path, case):
    columns, heading = HEADINGS[case]
    for task, title, order in columns:
        _write(tmp_path / "results", task, title, order)
    assert _heading(run_main(tmp_path / "results")) == heading


def test_a_task_whose_records_hold_no_title_goes_by_its_name_after_the_ordered_ones(tmp_path):
    results = tmp_path / "results"
    write_run(results, task="tickets", config={})
    _write(results, "rte", "RTE", 6)
    assert _heading(run_main(results)) == "| Objective | RTE | tickets | Avg |"


def test_two_titles_of_one_task_are_refused_in_one_line(tmp_path, capsys):
    results = tmp_path / "results"
    _write(results, "tickets", "Tickets", 0)
    _write(results, "tickets", "Help desk", 0, seeds=(3,))
    with pytest.raises(SystemExit) as exc:
        main([str(results), "--out", str(tmp_path / "out"), "--no-plots"])
    assert exc.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "records of task tickets disagree on its title" in line
    assert "'Tickets'" in line and "'Help desk'" in line
