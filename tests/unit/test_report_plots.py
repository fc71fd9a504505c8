"""What the score plots show: every seed with its cell's mean and t interval, objectives by family,
one colour per objective and init in every report, stars on cells significantly below their group's
best, the reference lines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import kdbench
from kdbench.report.figures import FALLBACK, OBJECTIVE_COLOURS, colour_of, family_order
from kdbench.report.frames import to_frame
from kdbench.report.load import load_records
from kdbench.report.plots import below_best, references, slots
from kdbench.report.stats import paired_tests, summarise
from kdbench.report.tables import build_tables
from kdbench.tasks import MAJORITY
from tests.unit.report_helpers import A, B, C, run_main, write_run, write_scores


def report_parts(results: Path):
    frame = to_frame(load_records(results).records)
    return frame, build_tables(summarise(frame)), paired_tests(frame)


def test_one_colour_per_objective_and_init_in_every_report():
    objectives = [
        p.stem for p in (Path(kdbench.__file__).parent / "conf" / "objective").glob("*.yaml")
    ]
    assert len(objectives) >= 13 and set(objectives) <= set(
        OBJECTIVE_COLOURS
    )  # each known objective: its colour
    assert len(set(OBJECTIVE_COLOURS.values())) == len(OBJECTIVE_COLOURS)
    assert colour_of("objective", "att_kl") == OBJECTIVE_COLOURS["att_kl"] == "#CC6677"
    assert colour_of("init", "2,4,6") == colour_of(
        "init", "4,8,12"
    )  # the every-k-th role, whatever the depth
    assert (
        colour_of("init", "5,6") == colour_of("init", "5,6") in FALLBACK
    )  # an unknown level: stable


def test_objectives_are_grouped_by_family():
    assert family_order(
        ["att_kl", "hid_seq", "vanilla_kd", "att_mse+hid_seq", "hid_cls", "minilm_v2"]
    ) == ["vanilla_kd", "hid_cls", "hid_seq", "att_kl", "att_mse+hid_seq", "minilm_v2"]


def test_every_seed_is_a_slot_point_with_its_t_interval(tmp_path: Path):
    write_scores(
        tmp_path,
        {
            ("rte", "att_kl", "4,8,12"): A,
            ("rte", "vanilla_kd", "4,8,12"): C,
            ("rte", "att_kl", "1,2,3"): B,
        },
    )
    frame, (table,), _ = report_parts(tmp_path)
    panel = slots(table, frame, "rte")
    assert [(s.objective, s.init) for s in panel] == [
        ("vanilla_kd", "4,8,12"),
        ("att_kl", "1,2,3"),
        ("att_kl", "4,8,12"),
    ]
    assert panel[0].scores == C and panel[1].colour == colour_of("init", "1,2,3")
    assert panel[1].x - panel[0].x == 2.0  # a family apart
    interval = stats.t.interval(0.95, len(A) - 1, loc=np.mean(A), scale=stats.sem(A))
    assert panel[2].interval() == pytest.approx((np.mean(A), *interval))


def test_a_star_marks_cells_significantly_below_the_best(tmp_path: Path):
    far = [a - 10 + 0.1 * i for i, a in enumerate(A)]  # clearly below A on every seed
    write_scores(
        tmp_path,
        {
            ("rte", "att_kl", "4,8,12"): A,
            ("rte", "hid_mse", "4,8,12"): far,
            ("rte", "logit_kl", "4,8,12"): [a + 0.3 * (-1) ** i for i, a in enumerate(A)],
        },
    )
    frame, (table,), pvalues = report_parts(tmp_path)
    head = {"setting": table.setting, "teacher": table.teacher, "student": table.student}
    means = {s.objective: s.interval()[0] for s in slots(table, frame, "rte")}
    assert below_best(head, "objective", "4,8,12", "rte", means, pvalues, 0.05) == {"hid_mse"}
    assert below_best(head, "objective", "4,8,12", "rte", means, pvalues, 1e-12) == set()


def test_no_star_on_a_cell_significantly_above_the_best_on_their_matched_seeds(tmp_path: Path):
    # att_kl's best mean comes from a fifth seed hid_seq lacks; on seeds 1-4 hid_seq is higher
    write_scores(
        tmp_path,
        {
            ("rte", "att_kl", "4,8,12"): [70.0, 71.0, 72.0, 73.0, 100.0],
            ("rte", "hid_seq", "4,8,12"): [72.0, 73.1, 74.0, 75.05],
        },
    )
    frame, (table,), pvalues = report_parts(tmp_path)
    head = {"setting": table.setting, "teacher": table.teacher, "student": table.student}
    means = {s.objective: s.interval()[0] for s in slots(table, frame, "rte")}
    (row,) = pvalues[pvalues["task"] == "rte"].itertuples()
    assert means["att_kl"] > means["hid_seq"] and row.p_holm < 0.05 and row.diff < 0
    assert below_best(head, "objective", "4,8,12", "rte", means, pvalues, 0.05) == set()


def test_the_plots_are_byte_stable(tmp_path: Path):
    write_scores(
        tmp_path / "results", {("rte", "att_kl", "4,8,12"): A, ("rte", "hid_mse", "4,8,12"): B}
    )
    first = {
        p.name: p.read_bytes() for p in run_main(tmp_path / "results", plots=True).glob("*.png")
    }
    second = {
        p.name: p.read_bytes() for p in run_main(tmp_path / "results", plots=True).glob("*.png")
    }
    assert first == second and len(first) == 2


def test_reference_lines_come_from_the_records_and_the_dev_sets(tmp_path: Path):
    for seed, teacher in ((1, 80.0), (2, 82.0)):
        write_run(
            tmp_path,
            task="sst2",
            seed=seed,
            score=75.0,
            score_metric="accuracy",
            teacher_metrics={"accuracy": teacher},
        )
    frame, (table,), _ = report_parts(tmp_path)
    refs = references(frame, table.key)
    assert refs.teacher == {"sst2": pytest.approx(81.0)} and refs.metric == {"sst2": "accuracy"}
    assert refs.majority("sst2") == MAJORITY["sst2"]["accuracy"]
