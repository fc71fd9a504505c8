"""What `python -m kdbench.advise` is asked, checked before any job: bad input refused in one line,
the default cells of a shape, the pilot's sweeps (one per init), a budget too small refused after
the calibration naming one that fits, a folder that holds another command's pilot, and the design's
registration in the ledger."""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import asdict, replace
from datetime import datetime, timezone

import pytest

from kdbench.advise import cli, jobs
from kdbench.advise.cli import CALIBRATION_JSON, DESIGN_JSON, main
from kdbench.advise.design import Calibration, Sizing
from kdbench.advise.inputs import read_inputs
from kdbench.advise.jobs import (
    calibration_of,
    ledger_seconds,
    note,
    pilot_commands,
    register,
    report,
    run_step,
)
from kdbench.errors import ConfigError
from kdbench.records.record import RunRecord
from kdbench.report.paired import seeds_needed
from tests.unit.report_helpers import write_pilot, write_run


@pytest.fixture(autouse=True)
def no_stale_log_handlers(monkeypatch):
    """No handler that a Hydra run earlier in this process bound to a capture stream since closed:
    the command's own output is what the tests read."""
    for name in (None, "kdbench"):
        monkeypatch.setattr(logging.getLogger(name), "handlers", [])


@pytest.fixture
def argv(user_data, tmp_path) -> list[str]:
    return [
        "task=custom",
        f"task.train_file={user_data['csv']}",
        f"task.validation_file={user_data['csv_dev']}",
        "task.text_columns=[review]",
        "task.label_column=sentiment",
        "teacher=tiny",
        "student=tiny",
        "trainer=smoke",
        f"advise.out={tmp_path / 'advice'}",
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("objective=att_kl", "objective=att_kl: kdbench.advise sets objective itself"),
        ("seed=3", "seed=3: kdbench.advise sets seed itself"),
        ("task.lr=1e-3,2e-3", "task.lr=1e-3,2e-3: kdbench.advise runs its own sweep"),
        ("advise.budget=2hours", "advise.budget='2hours' must be a duration"),
        ("advise.nope=1", "advise has no key nope; valid keys: budget, candidates"),
        ("advise.candidates=[att_kl]", "advise.candidates=['att_kl'] must be a list of"),
        ("advise.candidates=[att_kl@layers,vanilla_kd@random]", "advise.candidates: att_kl@"),
        ("advise.candidates=[att_kl@random]", "the pilot needs two cells or more, has 1"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_any_job(argv, extra, message):
    with pytest.raises(ConfigError) as refused:
        read_inputs([*argv, extra])
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def test_the_default_cells_of_a_student_as_wide_as_its_teacher(argv):
    inputs = read_inputs(argv)
    names = {cell.name for cell in inputs.cells}
    objectives = ("vanilla_kd", "att_kl+val_kl", "hid_seq")
    assert names == {f"{o}@{layers}" for o in objectives for layers in ("1,2", "2,4")}
    assert inputs.scale.examples == 40 and inputs.keys["budget"] == "2h"
    assert (inputs.scale.intermediate_epochs, inputs.scale.prediction_epochs) == (1, 1)


def test_a_student_of_another_feed_forward_size_is_advised_random_inits(argv):
    """As wide as the teacher, but a copy the plan refuses: the cells are random, not none."""
    inputs = read_inputs([*argv, "student.ffn_size=128"])
    names = {cell.name for cell in inputs.cells}
    assert names == {f"{o}@random" for o in ("vanilla_kd", "att_kl+val_kl", "hid_seq")}


def test_the_pilot_is_one_sweep_per_init_over_the_seeds(argv):
    cells = "advise.candidates=[vanilla_kd@every_kth,att_kl+val_kl@every_kth,vanilla_kd@bottom]"
    inputs = read_inputs([*argv, cells])
    design = {"sizing": {"subset": 30, "epochs": 1}}
    commands = pilot_commands(inputs, design, "/models/teacher", range(4, 6))
    assert len(commands) == 2
    first = commands[0]
    for token in (
        "objective=vanilla_kd,att_kl+val_kl",
        "init=every_kth",
        "seed=4,5",
        "data.train_limit=30",
        "stages.intermediate.epochs=1",
        "teacher.finetuned_path='/models/teacher'",
        "save_student=false",
        "trainer=smoke",
        f"hydra.sweep.dir='{inputs.out / 'pilot'}'",
    ):
        assert token in first
    assert "init=bottom" in commands[1] and "objective=vanilla_kd" in commands[1]


EXCLUDE_KEYS = "hydra.job.config.override_dirname.exclude_keys"


@pytest.mark.parametrize(
    ("excluded", "cells", "key"),
    [
        ("objective", "[vanilla_kd@random,att_kl@random]", "objective"),
        ("init", "[vanilla_kd@random,vanilla_kd@every_kth]", "init"),
    ],
)
def test_job_folders_that_leave_out_a_key_the_cells_differ_in_are_refused_before_any_job(
    argv, excluded, cells, key
):
    """The calibration and the pilot sweep the cells' objectives and inits: their jobs would write
    one folder, each over the record of the one before."""
    naming = f"{EXCLUDE_KEYS}=[seed,{excluded}]"
    with pytest.raises(ConfigError) as refused:
        read_inputs([*argv, naming, f"advise.candidates={cells}"])
    assert str(refused.value) == (
        f"a sweep over {key} writes the jobs of all its values into one folder (a job's folder is "
        f"not named by {key}): kdbench.advise sweeps its cells' objectives and inits: drop "
        f"{naming}"
    )


def test_job_folders_that_name_every_key_the_cells_differ_in_pass(argv):
    cells = "advise.candidates=[vanilla_kd@random,att_kl@random]"
    assert len(read_inputs([*argv, f"{EXCLUDE_KEYS}=[seed,init]", cells]).cells) == 2


def calibration_file(argv):
    """A calibration as if measured for `argv`: 60 s, then every job 30 s, nothing else; the
    inputs."""
    inputs = read_inputs(argv)
    inputs.out.mkdir(parents=True)
    measured = Calibration(0.0, {}, 0.0, {}, 0.0, 30.0, 0.0, 60.0)
    key = {"overrides": list(inputs.overrides), "objectives": [c.objective for c in inputs.cells]}
    (inputs.out / CALIBRATION_JSON).write_text(
        json.dumps({"asked": key, "calibration": asdict(measured)})
    )
    return inputs


def test_a_budget_too_small_for_two_seeds_is_one_line_naming_one_that_fits(argv, capsys):
    argv = [*argv, "advise.candidates=[vanilla_kd@random,att_kl@random]", "advise.budget=2m"]
    inputs = calibration_file(argv)
    with pytest.raises(SystemExit) as exited:
        main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(lines) == 1
    assert lines[0].startswith("kdbench: error: advise.budget=2m is too small")
    # the calibration, a teacher job unless it is cached, 2 seeds of 2 cells
    need = 60 + (0 if inputs.scale.teacher_ready else 30) + 2 * 2 * 30
    assert f"set advise.budget={-(-need // 60)}m or more" in lines[0]


def test_a_folder_holding_another_command_s_pilot_is_refused(argv, capsys, tmp_path):
    (tmp_path / "advice").mkdir()
    (tmp_path / "advice" / DESIGN_JSON).write_text(json.dumps({"asked": {"overrides": []}}))
    with pytest.raises(SystemExit) as exited:
        main([*argv, "advise.candidates=[vanilla_kd@random,att_kl@random]"])
    assert exited.value.code == 2
    assert "holds the pilot of another command" in capsys.readouterr().err


def pilot_stopped(argv, cells, frame, monkeypatch, capsys) -> tuple[int, list[str], list[str]]:
    """The advice on `cells` whose first seeds' runs are `frame`, run until it exits: its exit
    code, its standard error's lines and the steps it ran."""
    argv = [*argv, f"advise.candidates=[{','.join(cells)}]", "advise.budget=1h"]
    calibration_file(argv)
    steps = []
    monkeypatch.setattr(cli, "teacher_of", lambda inputs: "/models/teacher")
    monkeypatch.setattr(cli, "run_step", lambda out, step, command, folder: steps.append(step))
    monkeypatch.setattr(cli, "pilot_frame", lambda inputs: frame)
    with pytest.raises(SystemExit) as exited:
        main(argv)
    return exited.value.code, capsys.readouterr().err.strip().splitlines(), steps


def test_a_pilot_whose_first_seeds_all_predict_one_class_stops_in_one_line(
    argv, capsys, monkeypatch, tmp_path
):
    cells = ["vanilla_kd@random", "att_kl@random"]
    collapsed = write_pilot(tmp_path / "runs", {c: [50.0] * 3 for c in cells}, one_class=cells)
    code, lines, steps = pilot_stopped(argv, cells, collapsed, monkeypatch, capsys)
    assert code == 2 and len(lines) == 1
    assert "every pilot run of seeds 1-3 predicts one class" in lines[0]
    assert "raise the students' learning rate (task.lr)" in lines[0]
    assert steps == ["pilot seeds 1-3"]


@pytest.mark.parametrize("unscored", [1, 2])
def test_a_pilot_whose_first_seeds_leave_a_cell_without_a_score_stops_in_one_line(
    argv, capsys, monkeypatch, tmp_path, unscored
):
    # a run whose score is not a finite number (a regression's constant predictions) has none
    cells = ["vanilla_kd@random", "att_kl@random"]
    scores = {
        c: [math.nan] * 3 if i < unscored else [70.0, 71.0, 72.0] for i, c in enumerate(cells)
    }
    frame = write_pilot(tmp_path / "runs", scores)
    code, lines, steps = pilot_stopped(argv, cells, frame, monkeypatch, capsys)
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("kdbench: error: no seed was scored by every cell of the pilot")
    assert "vanilla_kd@random: none" in lines[0]
    assert steps == ["pilot seeds 1-3"]


def test_the_pilot_names_the_seeds_its_spread_asks_for_beyond_what_the_budget_allows(
    argv, capsys, monkeypatch, tmp_path
):
    cells = ["vanilla_kd@random", "att_kl@random"]
    inputs = read_inputs([*argv, f"advise.candidates=[{','.join(cells)}]"])
    frame = write_pilot(tmp_path / "runs", {cells[0]: [60.0, 80.0, 70.0], cells[1]: [70, 70, 70]})
    monkeypatch.setattr(cli, "run_step", lambda out, step, command, folder: None)
    monkeypatch.setattr(cli, "pilot_frame", lambda inputs: frame)
    sizing = Sizing(frame["seed"].max(), 1, 3, 3, 0.0, 1.0)
    cli.run_pilot(inputs, {"sizing": asdict(sizing), "alpha": 0.05, "family": 1}, "/teacher")
    # differences -10, +10, 0 (sd 10 points); 8 dev examples of 400 are 2 points
    needed = seeds_needed(2.0 / 10.0, 0.05)
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "spread" in line]
    assert f"is 10.00 points: {needed:.0f} seeds per cell detect 2.00 points" in line
    assert line.endswith("; the budget allows 3: the pilot runs 3 seeds per cell")


def test_a_pilot_folder_without_records_stops_in_one_line(argv, capsys, monkeypatch):
    # the report's own refusal (a ReportError) read by the advice: one line, not a traceback
    cells = ["vanilla_kd@random", "att_kl@random"]
    argv = [*argv, f"advise.candidates=[{','.join(cells)}]", "advise.budget=1h"]
    calibration_file(argv)
    monkeypatch.setattr(cli, "teacher_of", lambda inputs: "/models/teacher")
    monkeypatch.setattr(cli, "run_step", lambda out, step, command, folder: None)
    with pytest.raises(SystemExit) as exited:
        main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(lines) == 1
    assert lines[0].startswith("kdbench: error: results directory ")
    assert f"{cli.PILOT} does not exist" in lines[0]


def test_the_design_is_registered_in_the_ledger_apart_from_the_steps_wall_times(tmp_path):
    design = tmp_path / "DESIGN.md"
    design.write_text("# Pilot design\n")
    before = datetime.now(timezone.utc)
    register(tmp_path, design)
    note(tmp_path, "pilot seeds 1-3", 12.5)
    entry = json.loads((tmp_path / "ledger.jsonl").read_text().splitlines()[0])
    assert entry["sha256"] == hashlib.sha256(b"# Pilot design\n").hexdigest()
    assert before <= datetime.fromisoformat(entry["written_at"]) <= datetime.now(timezone.utc)
    assert ledger_seconds(tmp_path, "pilot", "design") == 12.5


def test_re_running_done_steps_leaves_the_pilots_wall_time_as_it_was(tmp_path, monkeypatch):
    pending = [lambda: write_run(tmp_path / "pilot", objective="vanilla_kd", seed=1)]

    def child(command):  # the first run finishes a job, the re-run finds it done
        if pending:
            pending.pop()()
        return 0, False

    monkeypatch.setattr(jobs, "run_child", child)
    monkeypatch.setattr("kdbench.report.cli.main", lambda arguments: None)
    first = run_step(tmp_path, "pilot seeds 1-3", ["kdbench.run"], "pilot")
    report(tmp_path)
    took = ledger_seconds(tmp_path, "pilot", "report")
    run_step(tmp_path, "pilot seeds 1-3", ["kdbench.run"], "pilot")
    report(tmp_path)
    assert ledger_seconds(tmp_path, "pilot", "report") == took and took >= first


@pytest.mark.parametrize(
    ("store", "device", "each_run"),
    [
        ("auto", "cpu: Intel(R) Xeon(R) Processor", False),
        ("auto", "NVIDIA H200", True),
        ("disk", "NVIDIA H200", False),
        ("memory", "cpu: Intel(R) Xeon(R) Processor", True),
    ],
)
def test_the_calibration_says_whether_every_run_builds_its_features_table(
    tmp_path, store, device, each_run
):
    record = RunRecord("task_specific", "sst2", "t", "s", "2,4", "every_kth", "att_kl", 1)
    outcome = {"metrics": {"accuracy": 80.0}, "timing": {"features_table_s": 4.0}}
    config = {"trainer": {"teacher_features_store": store}}
    record = replace(record, provenance={"device": device}).completed(outcome, 10.0, config)
    record.write(tmp_path / "att_kl" / "result.json")
    measured = calibration_of(tmp_path, examples=200, elapsed=12.0)
    assert measured.tables == {"att_kl": 0.02} and measured.tables_each_run is each_run
