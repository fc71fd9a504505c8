"""The pilot's design by arithmetic on a calibration: its cells from the student's shape, its
subset, epochs and seeds within a budget, the refusal of a budget too small for two seeds, and the
seeds the first seeds' spread asks for."""

from __future__ import annotations

import math

import pytest

from kdbench.advise.design import (
    Calibration,
    Scale,
    default_cells,
    duration_text,
    size_pilot,
    total_seconds,
    total_seeds,
)
from kdbench.errors import ConfigError
from kdbench.models.layers import check_copyable
from kdbench.planning.declared import declared_keys
from kdbench.planning.group_keys import AdviseKeys
from kdbench.planning.rules import duration_seconds
from kdbench.report.claims import TIE_EXAMPLES
from kdbench.report.paired import seeds_needed

CELLS = ["vanilla_kd", "att_kl+val_kl"]  # one cell each


def calibration(**changes) -> Calibration:
    """Stage 1 of att_kl+val_kl and stage 2 each 1 s per example and epoch, nothing else."""
    values = dict(
        teacher=0.0,
        intermediate={"att_kl+val_kl": 1.0},
        prediction=1.0,
        tables={},
        logits=0.0,
        job=0.0,
        sweep=0.0,
        spent=0.0,
    )
    return Calibration(**(values | changes))


SCALE = Scale(1000, 3, 2, 2, teacher_ready=True)


def test_the_subset_and_epochs_are_the_largest_equal_share_that_fits_five_seeds():
    # one seed: e epochs cost 3e s per example (vanilla_kd e, att_kl+val_kl 2e); five seeds of
    # 1 epoch fit 9000 / 15 = 600 examples (share min(0.6, 1/2)), of 2 epochs 300 (share 0.3)
    sizing = size_pilot(calibration(), CELLS, SCALE, groups=1, budget=9000, most=10)
    assert (sizing.subset, sizing.epochs, sizing.first_seeds, sizing.max_seeds) == (600, 1, 3, 5)
    assert sizing.projected_s(5) == pytest.approx(9000)


def test_a_budget_beyond_the_full_run_adds_seeds_up_to_the_most():
    sizing = size_pilot(calibration(), CELLS, SCALE, groups=1, budget=60_000, most=8)
    assert (sizing.subset, sizing.epochs, sizing.max_seeds) == (1000, 2, 8)  # 6000 s a seed


def test_the_teacher_tables_and_process_starts_are_paid_once():
    cal = calibration(teacher=0.5, tables={"att_kl+val_kl": 2.0}, logits=1.0, sweep=7.0, spent=11)
    scale = Scale(1000, 3, 2, 2, teacher_ready=False)
    once = 11 + (1000 * 3 * 0.5 + 7) + 100 * (2 + 1) + (2 * 2 + 1) * 7
    assert total_seconds(cal, CELLS, scale, 2, 100, 1, 0) == pytest.approx(once)
    assert total_seconds(cal, CELLS, scale, 2, 100, 1, 4) == pytest.approx(once + 4 * 300)


def test_features_tables_kept_in_memory_are_paid_by_every_seed():
    cal = calibration(teacher=0.5, tables={"att_kl+val_kl": 2.0}, logits=1.0, sweep=7.0, spent=11)
    in_memory = calibration(**(vars(cal) | {"tables_each_run": True}))
    scale = Scale(1000, 3, 2, 2, teacher_ready=False)
    once = 11 + (1000 * 3 * 0.5 + 7) + 100 * 1 + (2 * 2 + 1) * 7  # the logits table alone
    assert total_seconds(in_memory, CELLS, scale, 2, 100, 1, 0) == pytest.approx(once)
    each_seed = 300 + 100 * 2  # the stages, then the features table
    assert total_seconds(in_memory, CELLS, scale, 2, 100, 1, 4) == pytest.approx(
        once + 4 * each_seed
    )


def test_a_small_budget_takes_fewer_seeds_of_the_smallest_pilot():
    # 100 examples, 1 epoch: 300 s a seed; 3 seeds fit 1000 s, 5 do not
    sizing = size_pilot(calibration(), CELLS, SCALE, groups=1, budget=1000, most=10)
    assert (sizing.subset, sizing.epochs, sizing.first_seeds, sizing.max_seeds) == (100, 1, 3, 3)


def test_a_budget_too_small_for_two_seeds_is_refused_naming_one_that_fits():
    cal = calibration(job=45.0, spent=120.0)
    six = CELLS * 3
    with pytest.raises(ConfigError) as refused:
        size_pilot(cal, six, SCALE, groups=2, budget=600, most=10)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("advise.budget=10m is too small")
    named = message.split("set advise.budget=")[1].split()[0]
    # 120 s of calibration + 2 seeds x 6 cells x (45 s + 100 x 1.5 s per example)
    assert duration_seconds(named) == math.ceil((120 + 2 * 6 * 45 + 2 * 100 * 9) / 60) * 60
    sizing = size_pilot(cal, six, SCALE, groups=2, budget=duration_seconds(named), most=10)
    assert sizing.max_seeds == 2 and sizing.projected_s(2) <= duration_seconds(named)


def test_the_first_seeds_spread_sets_the_seeds_from_the_first_up_to_the_most():
    sizing = size_pilot(calibration(), CELLS, SCALE, groups=1, budget=60_000, most=8)
    # 2 points at a spread of 1.5, at the Holm level of 15 pairs
    assert total_seeds(1.5, 2.0, 0.05, 15, sizing) == min(8, seeds_needed(2 / 1.5, 0.05 / 15))
    assert total_seeds(0.1, 2.0, 0.05, 15, sizing) == 3  # never fewer than the first seeds
    assert total_seeds(9.0, 2.0, 0.05, 15, sizing) == 8  # never more than the most
    assert total_seeds(math.nan, 2.0, 0.05, 15, sizing) == 8


@pytest.mark.parametrize(
    ("teacher", "student", "cells"),
    [
        ((6, 384, 1536, 12), (3, 384, 1536, 12), 6),  # layers 1,2,3 and 2,4,6; raw hid_seq
        ((6, 384, 1536, 12), (6, 384, 1536, 12), 6),  # bottom and every_kth both 1-6: and random
        ((6, 384, 1536, 12), (3, 192, 768, 12), 2),  # no layer copy: random; no raw hidden states
    ],
)
def test_the_default_cells_are_the_inits_the_student_s_shape_permits(teacher, student, cells):
    found = default_cells(teacher, student)
    assert len(found) == cells and len(set(found)) == cells
    assert {objective for objective, _ in found} >= {"vanilla_kd", "att_kl+val_kl"}
    if student[1] != teacher[1]:
        assert {init for _, init in found} == {"random"}


@pytest.mark.parametrize("student", [(3, 384, 1024, 12), (3, 384, 1536, 6)])
def test_the_default_cells_copy_no_layers_the_plan_refuses_to_copy(student):
    """As wide as the teacher, but of another feed-forward size or head count: the plan refuses a
    copy (`check_copyable`), so the advice proposes random inits, hid_seq still comparing widths."""
    teacher = (6, 384, 1536, 12)
    with pytest.raises(ConfigError, match="copies teacher layers"):
        check_copyable(student[1:], teacher[1:], "every_kth")
    assert default_cells(teacher, student) == [
        ("vanilla_kd", "random"),
        ("att_kl+val_kl", "random"),
        ("hid_seq", "random"),
    ]


def test_durations_read_and_written_as_advise_budget_takes_them():
    assert [duration_seconds(t) for t in ("2h", "90m", "1h30m", "1.5h", "45s")] == [
        7200,
        5400,
        5400,
        5400,
        45,
    ]
    assert all(duration_seconds(t) is None for t in ("2 hours", "", "0m", 5, "h"))
    assert [duration_text(s) for s in (3900, 2700, 30)] == ["1h05m", "45m", "30s"]
    assert duration_text(61, up=True) == "2m"


def test_the_default_margin_is_the_report_s_tie_and_the_smallest_effect_twice_it():
    keys = {name: f.default for name, f in declared_keys(AdviseKeys).items()}
    assert keys["margin"] == TIE_EXAMPLES and keys["min_effect"] == 2 * TIE_EXAMPLES
