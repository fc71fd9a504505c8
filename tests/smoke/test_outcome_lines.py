"""What a run prints when it ends: both models' scores in one format, and with `measure_cost` the
student's cost beside its teacher's (a fine-tuning, which measures none, says so)."""

from __future__ import annotations

import re

from kdbench.command import print_outcome
from kdbench.job import run
from tests.helpers import agnostic_overrides, compose_config, tiny_overrides, write_tiny_corpus

SCORES = r"pearson -?\d+\.\d\d, spearman -?\d+\.\d\d"  # the record's x100 scale, two decimals


def test_a_run_prints_its_scores_in_one_format_and_its_cost(tiny_glue, tmp_path, capsys):
    overrides = tiny_overrides(tiny_glue, tmp_path, "task=stsb", "measure_cost=true")
    record = run(compose_config(overrides))
    capsys.readouterr()
    print_outcome(record, tmp_path)
    teacher, student, cost, where = capsys.readouterr().out.splitlines()
    assert re.fullmatch(rf"teacher \(tiny\): {SCORES}", teacher), teacher
    assert re.fullmatch(rf"student \(tiny, att_kl, init 2,4\): {SCORES}", student), student
    assert re.match(r"cost: the student has [\d,]+ parameters \(\d+% of the teacher's\)", cost)
    assert re.search(r"FLOPs per example \(\d+%\); [\d.]+x as fast at batch 1", cost), cost
    assert re.search(r"timed on cpu.* \(1-minute load average [\d.]+ on \d+ CPUs\)", cost), cost
    assert where == f"record: {tmp_path / 'result.json'}"


def test_a_fine_tuning_says_in_one_line_that_it_measures_no_cost(tiny_glue, tmp_path, capsys):
    corpus = write_tiny_corpus(tmp_path / "corpus")
    distilled = run(compose_config(agnostic_overrides(corpus, tmp_path / "distill")))
    finetune = [
        "setting=finetune",
        f"setting.student_path={distilled['student_path']}",
        "task=rte",
        f"data.glue_dir={tiny_glue}",
        f"paths.run_dir={tmp_path / 'ft'}",
        "measure_cost=true",
    ]
    record = run(compose_config(finetune))
    capsys.readouterr()
    print_outcome(record, tmp_path / "ft")
    lines = capsys.readouterr().out.splitlines()
    assert "cost" not in record
    assert lines[2] == (
        "cost: not measured: measure_cost measures a task-specific run's teacher and student; "
        "a setting=finetune run measures none"
    )
