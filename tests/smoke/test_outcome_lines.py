"""What a run prints when it ends: both models' scores in one format, and with `measure_cost` the
student's cost beside its teacher's."""

from __future__ import annotations

import re

from kdbench.command import print_outcome
from kdbench.job import run
from tests.helpers import compose_config, tiny_overrides

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
