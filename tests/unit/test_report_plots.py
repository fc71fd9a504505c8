"""What the score plots show: the compared factor as the colour, the same colour for a level in every plot, the
stars on bars significantly below their group's best, and the reference lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from kdbench.report.load import load_records
from kdbench.report.plots import PALETTE, bar_groups, below_best, level_styles, references
from kdbench.report.stats import paired_tests, summarise, to_frame
from kdbench.report.tables import build_tables
from kdbench.tasks import MAJORITY
from tests.unit.report_helpers import A, B, C, write_run, write_scores


def report_parts(results: Path):
    frame = to_frame(load_records(results).records)
    return frame, build_tables(summarise(frame)), paired_tests(frame)


def test_a_level_keeps_its_colour_whatever_else_is_plotted():
    one = level_styles(["hid_seq", "att_kl", "vanilla_kd"])
    other = level_styles(["att_kl", "vanilla_kd", "hid_seq", "att_kl"])
    assert one == other and one["att_kl"]["color"] == PALETTE[0]
    many = level_styles([f"objective_{i:02d}" for i in range(12)])
    assert len({(s["color"], s["hatch"]) for s in many.values()}) == 12  # hatches beyond the palette


def test_inits_are_the_colours_when_the_init_varies(tmp_path: Path):
    write_scores(tmp_path, {("rte", "att_kl", "4,8,12"): A, ("rte", "att_kl", "1,2,3"): C,
                            ("rte", "hid_mse", "4,8,12"): B, ("rte", "hid_mse", "1,2,3"): C})
    _, (table,), _ = report_parts(tmp_path)
    factor, groups = bar_groups(table, "rte")
    assert factor == "init" and [g.label for g in groups] == ["att_kl", "hid_mse"]
    assert groups[0].levels == ["1,2,3", "4,8,12"] and groups[0].fixed == "att_kl"
    assert groups[0].means == pytest.approx([sum(C) / len(C), sum(A) / len(A)])


def test_objectives_are_the_colours_over_the_tasks_at_one_init(tmp_path: Path):
    write_scores(tmp_path, {("rte", "att_kl", "4,8,12"): A, ("rte", "hid_mse", "4,8,12"): B,
                            ("mrpc", "att_kl", "4,8,12"): B, ("mrpc", "hid_mse", "4,8,12"): A})
    _, (table,), _ = report_parts(tmp_path)
    factor, groups = bar_groups(table, None)
    assert factor == "objective" and [g.task for g in groups] == ["mrpc", "rte"]
    assert all(g.levels == ["att_kl", "hid_mse"] and g.fixed == "4,8,12" for g in groups)


def test_a_star_marks_bars_significantly_below_the_best(tmp_path: Path):
    far = [a - 10 + 0.1 * i for i, a in enumerate(A)]  # clearly below A on every seed
    write_scores(tmp_path, {("rte", "att_kl", "4,8,12"): A, ("rte", "hid_mse", "4,8,12"): far,
                            ("rte", "logit_kl", "4,8,12"): [a + 0.3 * (-1) ** i for i, a in enumerate(A)]})
    frame, (table,), pvalues = report_parts(tmp_path)
    _, (group,) = bar_groups(table, None)
    head = {"setting": table.setting, "teacher": table.teacher, "student": table.student}
    assert below_best(group, head, "objective", pvalues, 0.05) == {"hid_mse"}
    assert below_best(group, head, "objective", pvalues, 1e-12) == set()


def test_reference_lines_come_from_the_records_and_the_dev_sets(tmp_path: Path):
    for seed, teacher in ((1, 80.0), (2, 82.0)):
        write_run(tmp_path, task="sst2", seed=seed, score=75.0,
                  score_metric="accuracy", teacher_metrics={"accuracy": teacher})
    frame, (table,), _ = report_parts(tmp_path)
    refs = references(frame, table.key)
    assert refs.teacher == {"sst2": pytest.approx(81.0)} and refs.metric == {"sst2": "accuracy"}
    assert refs.majority("sst2") == MAJORITY["sst2"]["accuracy"]
