"""Which checkpoint a run scored (the record's `scored`): a table holds students scored at their
best dev evaluation or at their last step, never both."""

from __future__ import annotations

from pathlib import Path

import pytest

from kdbench.report.cli import main
from kdbench.report.load import load_records
from tests.unit.report_helpers import run_main, write_run

BEST = {"checkpoint": "best", "stage": "prediction", "step": 150, "eval_every": 50}
LAST = {"checkpoint": "last", "stage": "prediction", "step": 300}


def checkpoints(results: Path) -> dict[str, str]:
    return {r["objective"]: r["checkpoint"] for r in load_records(results).records}


def test_the_report_reads_which_checkpoint_each_run_scored(tmp_path):
    results = tmp_path / "results"
    write_run(results, objective="att_kl", scored=BEST)
    write_run(results, objective="hid_seq", scored=LAST)
    write_run(results, objective="att_mse")  # a record from before `scored`: its last step
    finetune = {"stages": {"finetune": {"eval_every": 50}}}
    write_run(results, objective="val_kl", best_step=7, config=finetune)  # an earlier fine-tuning
    once = {"stages": {"finetune": {"eval_every": 0}}}
    write_run(results, objective="hid_cls", best_step=7, config=once)
    assert checkpoints(results) == {
        "att_kl": "best",
        "hid_seq": "last",
        "att_mse": "last",
        "val_kl": "best",
        "hid_cls": "last",
    }


def test_a_table_of_best_and_last_step_students_is_refused_in_one_line(tmp_path, capsys):
    results = tmp_path / "results"
    for seed in (1, 2):
        write_run(results, objective="att_kl", seed=seed, scored=BEST)
        write_run(results, objective="hid_seq", seed=seed, scored=LAST)
    with pytest.raises(SystemExit) as exc:
        main([str(results), "--out", str(tmp_path / "out"), "--no-plots"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1
    assert err[0].startswith(
        "kdbench.report: error: the table setting task_specific, teacher roberta_base, student "
        "3x768 mixes students scored at their best dev evaluation (2 runs, e.g. "
    )
    assert "with students scored at their last step (2, e.g. " in err[0]
    assert err[0].endswith(
        "trainer.student_best_checkpoint (fine-tuning: stages.finetune.eval_every)"
    )


def test_best_and_last_step_students_of_different_tables_are_reported(tmp_path):
    results = tmp_path / "results"
    for seed in (1, 2):
        write_run(results, student="3x768", seed=seed, scored=BEST)
        write_run(results, student="6x768", seed=seed, scored=LAST)
    out = run_main(results)
    assert "student 3x768" in (out / "tables.md").read_text()
    assert "student 6x768" in (out / "tables.md").read_text()


def test_a_table_of_best_evaluations_says_they_are_chosen_on_the_dev_set_it_reports(tmp_path):
    results = tmp_path / "results"
    note = (
        "Each run is scored at its best dev evaluation, chosen on the dev set it reports: an "
        "optimistic estimate."
    )
    for student, scored in (("3x768", BEST), ("6x768", LAST)):
        for seed in (1, 2):
            write_run(results, student=student, seed=seed, scored=scored)
    tables = (run_main(results) / "tables.md").read_text()
    best, last = tables.split("## setting task_specific, teacher roberta_base, student 6x768")
    assert "_n = 2 seeds per cell. " + note + "_" in best and note not in last
