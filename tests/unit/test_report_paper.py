"""kdbench.report --paper: the shipped published numbers (kdbench/paper/wang2023.json) and how they are shown."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest

import kdbench
from kdbench.report import cli
from kdbench.report.load import ReportError, load_records
from kdbench.report.paper import PAPER_COLS, load_paper, paper_frame
from kdbench.report.stats import AVG, summarise, to_frame
from kdbench.report.tables import build_tables, render_markdown
from kdbench.tasks import TASKS as TASK_LABELS
from tests.unit.report_helpers import read_csv, run_main, write_scores

CONF = Path(kdbench.__file__).resolve().parent / "conf"
OBJECTIVES = {path.stem for path in (CONF / "objective").glob("*.yaml")}
TASKS = {path.stem for path in (CONF / "task").glob("*.yaml")} | set(TASK_LABELS)
TEACHERS = {path.stem for path in (CONF / "teacher").glob("*.yaml")}
STUDENTS = {path.stem for path in (CONF / "student").glob("*.yaml")}
SETTINGS = {"task_specific", "task_agnostic"}
INIT_RE = r"random|\d+(,\d+)*"

# Made-up numbers to exercise the rendering: NOT the paper's.
FAKE_PAPER = {
    "source": "test fixture",
    "tables": {
        "table1": {
            "setting": "task_specific",
            "teacher": "roberta_base",
            "student": "3x768",
            "init": "4,8,12",
            "columns": ["rte", "mrpc", "qnli", "Avg"],
            "rows": [
                {"objective": "att_kl", "scores": {"rte": 11.5, "mrpc": 12.25, "qnli": 13.0, "Avg": 12.25},
                 "std": {"rte": 0.5}},
                {"objective": "vanilla_kd", "scores": {"rte": 21.0, "mrpc": 22.0, "qnli": 23.0, "Avg": 22.0}},
            ],
        },
        "table3": {
            "setting": "task_specific",
            "teacher": "roberta_base",
            "student": "3x768",
            "columns": ["rte", "Avg"],
            "rows": [
                {"objective": "att_kl", "init": "4,8,12", "scores": {"rte": 31.0, "Avg": 31.0}},
                {"objective": "att_kl", "init": "1,2,3", "scores": {"rte": 32.0, "Avg": 32.0}},
            ],
        },
        "table2": {
            "setting": "task_agnostic",
            "teacher": "bert_base_uncased",
            "student": "6x768",
            "columns": ["rte"],
            "rows": [{"objective": "att_kl", "init": "random", "scores": {"rte": 41.0}}],
        },
        "table4": {"setting": "task_agnostic", "teacher": "bert_base_uncased", "student": "6x768",
                   "columns": [], "rows": []},
    },
}


def shipped() -> dict:
    return json.loads((resources.files("kdbench.paper") / "wang2023.json").read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------- the JSON


def test_shipped_json_loads_and_names_its_source():
    paper = load_paper()
    assert paper == shipped()
    assert "2305.15032" in paper["source"]
    assert set(paper["tables"]) == {"table1", "table2", "table3", "table4"}


def test_shipped_tables_use_kdbench_names():
    expected_setting = {"table1": "task_specific", "table2": "task_agnostic", "table3": "task_specific",
                        "table4": "task_agnostic"}
    for name, spec in shipped()["tables"].items():
        assert spec["setting"] == expected_setting[name]
        assert spec["setting"] in SETTINGS
        assert spec["teacher"] in TEACHERS, name
        assert spec["student"] in STUDENTS, name
        if spec.get("init") is not None:
            assert pd.Series([spec["init"]]).str.fullmatch(INIT_RE).all(), name
        assert isinstance(spec["columns"], list) and isinstance(spec["rows"], list)
        for column in spec["columns"]:
            assert column in TASKS or column == AVG, (name, column)


def test_shipped_scores_are_finite_percentages_with_valid_names():
    for name, spec in shipped()["tables"].items():
        columns = set(spec["columns"])
        for row in spec["rows"]:
            assert row["objective"] in OBJECTIVES, (name, row["objective"])
            init = row.get("init") or spec.get("init")
            assert init is not None and pd.Series([init]).str.fullmatch(INIT_RE).all(), (name, row)
            assert row["scores"], (name, row)
            for part in ("scores", "std"):
                for task, value in (row.get(part) or {}).items():
                    assert task in TASKS or task == AVG, (name, task)
                    assert task in columns, (name, task)
                    assert isinstance(value, int | float) and not isinstance(value, bool), (name, task, value)
                    assert math.isfinite(value) and 0 <= value <= 100, (name, task, value)
            assert set(row.get("std") or {}) <= set(row["scores"]), (name, row)


def test_paper_frame_has_one_row_per_published_cell():
    paper = shipped()
    frame = paper_frame(paper)
    assert list(frame.columns) == PAPER_COLS
    assert len(frame) == sum(len(r["scores"]) for spec in paper["tables"].values() for r in spec["rows"])
    fake = paper_frame(FAKE_PAPER)
    assert len(fake) == 4 + 4 + 2 + 2 + 1
    row = fake[(fake.table == "table1") & (fake.objective == "att_kl") & (fake.task == "mrpc")].iloc[0]
    assert row["init"] == "4,8,12" and row["score"] == 12.25  # the table's init fills rows without one


# ------------------------------------------------------------------------------------------------- the CLI


@pytest.fixture
def results(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    write_scores(
        root,
        {
            ("rte", "att_kl", "4,8,12"): [70.0, 71.0],
            ("rte", "hid_seq", "4,8,12"): [60.0, 61.0],
            ("mrpc", "att_kl", "4,8,12"): [80.0, 81.0],
            ("mrpc", "hid_seq", "4,8,12"): [75.0, 76.0],
        },
    )
    return root


def _sections(md: str) -> dict[str, str]:
    """Markdown split at headings: heading line -> text up to the next heading."""
    parts, head = {}, None
    for line in md.splitlines():
        if line.startswith("#"):
            head = line
            parts[head] = ""
        elif head is not None:
            parts[head] += line + "\n"
    return parts


def test_paper_flag_adds_published_tables_and_paper_csv(results: Path, monkeypatch):
    monkeypatch.setattr(cli, "load_paper", lambda: FAKE_PAPER)
    out = run_main(results, "--paper")
    md = (out / "tables.md").read_text()
    sections = _sections(md)
    t1 = sections["### Published (Wang et al. 2023, Table 1)"]
    # restricted to the measured objectives (att_kl; vanilla_kd dropped) and tasks (MRPC, RTE) plus Avg
    assert "| Objective | MRPC | RTE | Avg |" in t1
    assert "| att_kl | 12.25 | 11.5 ± 0.5 | 12.25 |" in t1
    assert "vanilla_kd" not in t1 and "QNLI" not in t1
    assert "Paper: teacher roberta_base, student 3x768, init 4,8,12" in t1
    assert "this table: teacher roberta_base, student 3x768" in t1
    assert "1 of 2 rows and 3 of 4 columns shown" in t1
    t3 = sections["### Published (Wang et al. 2023, Table 3)"]
    assert "| Objective | Init | RTE | Avg |" in t3
    assert "| att_kl | 4,8,12 | 31.0 | 31.0 |" in t3 and "| att_kl | 1,2,3 | 32.0 | 32.0 |" in t3
    # only the paper tables of the measured setting
    assert "Table 2)" not in md and "Table 4)" not in md
    # the published tables follow the measured one
    assert md.index("## setting task_specific") < md.index("Table 1)") < md.index("Table 3)")
    paper = read_csv(out / "paper.csv")
    assert list(paper.columns) == PAPER_COLS
    assert len(paper) == len(paper_frame(FAKE_PAPER))
    cell = paper[(paper.table == "table3") & (paper.init == "1,2,3") & (paper.task == "rte")]
    assert cell["score"].tolist() == [32.0]


def test_whole_paper_table_when_nothing_matches(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(cli, "load_paper", lambda: FAKE_PAPER)
    root = tmp_path / "results"
    write_scores(root, {("cola", "hid_cls", "1,8,12"): [50.0], ("cola", "att_mse", "1,8,12"): [51.0]})
    md = (run_main(root, "--paper") / "tables.md").read_text()
    t1 = _sections(md)["### Published (Wang et al. 2023, Table 1)"]
    assert "| Objective | RTE | MRPC | QNLI | Avg |" in t1  # the paper's own column order
    assert "| att_kl |" in t1 and "| vanilla_kd |" in t1
    assert "rows and" not in t1


def test_empty_paper_table_says_so(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(cli, "load_paper", lambda: FAKE_PAPER)
    root = tmp_path / "results"
    write_scores(root, {("rte", "att_kl", "random"): [60.0]}, setting="task_agnostic",
                 teacher="bert_base_uncased", student="6x768")
    md = (run_main(root, "--paper") / "tables.md").read_text()
    sections = _sections(md)
    assert "| att_kl | 41.0 |" in sections["### Published (Wang et al. 2023, Table 2)"]
    assert "No published numbers recorded" in sections["### Published (Wang et al. 2023, Table 4)"]
    assert "Table 1)" not in md


def test_paper_flag_with_shipped_json(results: Path):
    out = run_main(results, "--paper")
    md = (out / "tables.md").read_text()
    assert "### Published (Wang et al. 2023, Table 1)" in md
    assert "### Published (Wang et al. 2023, Table 3)" in md
    paper = read_csv(out / "paper.csv")
    assert list(paper.columns) == PAPER_COLS
    assert len(paper) == len(paper_frame(shipped()))


def test_without_paper_flag_nothing_changes(results: Path, monkeypatch, tmp_path: Path):
    calls = []
    monkeypatch.setattr(cli, "load_paper", lambda: calls.append(1) or FAKE_PAPER)
    plain = run_main(results)
    md = (plain / "tables.md").read_text()
    assert not calls
    assert "Published" not in md
    assert not (plain / "paper.csv").exists()
    # the --paper output is the plain one with the published sections inserted
    tables = build_tables(summarise(to_frame(load_records(results).records)))
    assert render_markdown(tables, 1, None, None) == render_markdown(tables, 1)
    with_paper = render_markdown(tables, 1, None, FAKE_PAPER)
    lines = iter(with_paper.splitlines())
    assert all(any(line == other for other in lines) for line in render_markdown(tables).splitlines())
    assert len(with_paper) > len(render_markdown(tables))


def test_unreadable_paper_json_fails_cleanly(results: Path, monkeypatch, capsys):
    def broken():
        raise ReportError("cannot read the published numbers kdbench/paper/wang2023.json: boom")

    monkeypatch.setattr(cli, "load_paper", broken)
    with pytest.raises(SystemExit) as exc:
        cli.main([str(results), "--out", str(results.parent / "out"), "--no-plots", "--paper"])
    assert exc.value.code == 2
    assert "wang2023.json: boom" in capsys.readouterr().err
