"""The pilot's decision rule on synthetic records: a clear winner, equivalent cells -> the cheapest,
undecided -> the seeds that would decide it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from kdbench.advise.decide import (
    BELOW,
    CHEAPEST,
    EQUIVALENT,
    OPEN,
    UNDECIDED,
    WINNER,
    decide,
    dev_examples,
    in_points,
    none_learned,
    spread,
)
from kdbench.advise.pages import answer_lines, evidence_table, held_line, pilot_line
from kdbench.errors import KdbenchError
from kdbench.records.predictions import write_predictions
from kdbench.report.paired import MAX_SEEDS, paired_power
from tests.unit.report_helpers import DEV, write_pilot


def noisy(mean: float, sd: float, n: int, seed: int) -> list[float]:
    return list(mean + sd * np.random.default_rng(seed).standard_normal(n))


def test_a_cell_above_every_other_significantly_is_the_answer(tmp_path):
    frame = write_pilot(
        tmp_path,
        {
            "att_kl+val_kl@1,2": noisy(80, 0.5, 5, 1),
            "vanilla_kd@1,2": noisy(74, 0.5, 5, 2),
            "vanilla_kd@2,4": noisy(70, 0.5, 5, 3),
        },
        staged={"att_kl+val_kl@1,2"},
    )
    decision = decide(frame, margin=1.0, min_effect=2.0)
    assert (decision.kind, decision.chosen) == (WINNER, "att_kl+val_kl@1,2")
    assert [pair.verdict for pair in decision.pairs] == [BELOW, BELOW]
    assert decision.family == 3 and decision.seeds_run == 5
    assert all(pair.p_holm < 0.05 and pair.diff > 5 for pair in decision.pairs)


def test_equivalent_cells_give_the_cheapest_no_intermediate_stage_first(tmp_path):
    base = noisy(80, 1.0, 6, 4)
    frame = write_pilot(
        tmp_path,
        {
            # the best mean, but an intermediate stage (and the shortest training)
            "att_kl+val_kl@1,2": [s + 0.05 + d for s, d in zip(base, noisy(0, 0.02, 6, 5))],
            "vanilla_kd@1,2": base,  # equal within the margin, no intermediate stage
            "vanilla_kd@random": noisy(60, 0.5, 6, 6),
        },
        staged={"att_kl+val_kl@1,2"},
        train_s={"att_kl+val_kl@1,2": 3.0, "vanilla_kd@1,2": 9.0},
    )
    decision = decide(frame, margin=1.0, min_effect=2.0)
    assert decision.best == "att_kl+val_kl@1,2"
    assert (decision.kind, decision.chosen) == (CHEAPEST, "vanilla_kd@1,2")
    verdicts = {pair.other: pair.verdict for pair in decision.pairs}
    assert verdicts == {"vanilla_kd@1,2": EQUIVALENT, "vanilla_kd@random": BELOW}


def test_among_equivalent_cells_of_one_kind_the_shorter_training_wins(tmp_path):
    base = noisy(80, 1.0, 6, 7)
    frame = write_pilot(
        tmp_path,
        {"vanilla_kd@1,2": [s + 0.02 for s in base], "vanilla_kd@2,4": base},
        train_s={"vanilla_kd@1,2": 9.0, "vanilla_kd@2,4": 4.0},
    )
    decision = decide(frame, margin=1.0, min_effect=2.0)
    assert (decision.kind, decision.chosen) == (CHEAPEST, "vanilla_kd@2,4")


def test_an_open_pair_leaves_no_decision_with_the_seeds_that_would_decide_it(tmp_path):
    frame = write_pilot(
        tmp_path,
        {"att_kl+val_kl@1,2": noisy(80, 3.0, 3, 8), "vanilla_kd@1,2": noisy(79, 3.0, 3, 9)},
        staged={"att_kl+val_kl@1,2"},
        wall_s=60.0,
    )
    decision = decide(frame, margin=1.0, min_effect=2.0)
    assert decision.kind == UNDECIDED and decision.pairs[0].verdict == OPEN
    # provisional: the cheapest cell no test put below the best
    assert decision.chosen == "vanilla_kd@1,2"
    (pair,) = decision.pairs
    target = max(abs(pair.diff), 2.0) / pair.sd  # at the Holm level of a family of one pair
    n = decision.seeds_needed
    assert paired_power(target, n, 0.05) >= 0.8 > paired_power(target, n - 1, 0.05)
    # the normal approximation of the same number, computed apart
    z = stats.norm.ppf(1 - 0.025) + stats.norm.ppf(0.8)
    assert abs(n - (z / target) ** 2) <= 3
    assert decision.more_s == pytest.approx((n - 3) * 2 * 60.0)


def test_the_spread_is_the_pairs_rms_std_of_differences(tmp_path):
    a, b, c = [80.0, 81.0, 83.0], [79.0, 81.5, 80.0], [70.0, 70.0, 71.0]
    frame = write_pilot(tmp_path, {"x@r": a, "y@r": b, "z@r": c})
    sds = [np.std(np.subtract(u, v), ddof=1) for u, v in ((a, b), (a, c), (b, c))]
    assert spread(frame) == pytest.approx(math.sqrt(np.mean(np.square(sds))))


def test_margins_in_dev_examples_become_points_of_the_dev_set(tmp_path):
    frame = write_pilot(tmp_path, {"x@r": [1.0, 2.0], "y@r": [1.0, 3.0]})
    assert dev_examples(frame, tmp_path) == DEV
    assert in_points(4, DEV) == pytest.approx(1.0)


def test_a_regression_s_dev_set_is_counted_from_its_predictions(tmp_path):
    frame = write_pilot(tmp_path, {"x@r": [1.0, 2.0], "y@r": [1.0, 3.0]})
    frame = frame.drop(columns=["dev_class_0", "dev_class_1"]).assign(predictions="p.npz")
    gold = np.linspace(0, 5, 37)
    write_predictions(tmp_path / "p.npz", {"": {"example": gold, "predicted": gold, "gold": gold}})
    assert dev_examples(frame, tmp_path) == 37


def test_a_pilot_is_none_learned_only_when_every_run_predicts_one_class(tmp_path):
    cells = {"vanilla_kd@1,2": [68.0, 68.0], "att_kl+val_kl@1,2": [68.0, 68.0]}
    every = write_pilot(tmp_path / "every", cells, one_class=set(cells))
    assert none_learned(every)
    some = write_pilot(tmp_path / "some", cells, one_class={"vanilla_kd@1,2"})
    assert not none_learned(some)
    assert not none_learned(some.iloc[:0])


def test_the_cheapest_equivalent_is_said_within_the_margin_of_the_best_not_of_each_other(tmp_path):
    # B and C each within +-0.5 of the best, A, by TOST; B - C is not shown within it, and the
    # advice says only what was tested
    swing = [0.36, -0.36, 0.33, -0.33, 0.36, -0.36, 0.34, -0.34]
    base = [80.0 + s for s in range(8)]
    frame = write_pilot(
        tmp_path,
        {
            "A@r": base,
            "B@r": [b - 0.15 + u for b, u in zip(base, swing)],
            "C@r": [b - 0.10 - u for b, u in zip(base, swing)],
        },
        staged={"A@r"},
    )
    decision = decide(frame, margin=0.5, min_effect=0.5)
    assert (decision.kind, decision.best) == (CHEAPEST, "A@r")
    design = {"cells": [{"objective": o, "label": "r", "init": "r"} for o in "ABC"]}
    answer = answer_lines(decision, design)
    assert answer[1] == (
        "Sure at alpha 0.05: each of B@r (TOST Holm p 0.032), C@r (TOST Holm p 0.028) lies within "
        "+-0.50 points of the best, A@r (an equivalence test of each against the best over the 8 "
        "seeds every cell scored, Holm over 3 pairs)."
    )
    assert "each other" not in "\n".join(answer + evidence_table(decision))


def test_an_undecided_pilot_s_full_run_checks_a_provisional_choice_not_a_decision(tmp_path):
    frame = write_pilot(tmp_path, {"A@r": noisy(80, 3.0, 3, 8), "B@r": noisy(79, 3.0, 3, 9)})
    decision = decide(frame, margin=1.0, min_effect=2.0)
    assert decision.kind == UNDECIDED
    held = held_line(decision, {"score": 90.0})
    assert "the provisional choice held" in held and "the decision" not in held
    assert "the provisional choice did not hold" in held_line(decision, {"score": 10.0})


def test_seeds_to_decide_a_pair_with_one_common_seed_are_not_estimated(tmp_path):
    # B's seed 2 scored NaN
    frame = write_pilot(tmp_path, {"A@r": [80.0, 81.0], "B@r": [79.0, math.nan]})
    decision = decide(frame, margin=0.5, min_effect=0.5)
    assert decision.kind == UNDECIDED and decision.pairs[0].n_pairs == 1
    assert decision.seeds_needed is None and decision.more_s is None
    design = {"cells": [{"objective": o, "label": "r", "init": "r"} for o in "AB"]}
    text = answer_lines(decision, design)[1]
    assert text == (
        "Not sure: B@r neither differs significantly from the best, A@r, nor is shown equivalent "
        "to it after the 1 seed every cell scored; the seeds it needs cannot be estimated: they "
        "follow from the spread of each open pair's differences over the seeds every cell scored, "
        "which takes 2."
    )


def test_seeds_to_decide_at_their_bound_are_said_to_be_over_it(tmp_path):
    frame = write_pilot(tmp_path, {"A@r": [80.0, 90.0, 70.0], "B@r": [79.0, 71.0, 88.0]})
    decision = decide(frame, margin=0.5, min_effect=0.5)
    assert decision.kind == UNDECIDED and decision.seeds_needed == MAX_SEEDS
    design = {"cells": [{"objective": o, "label": "r", "init": "r"} for o in "AB"]}
    text = answer_lines(decision, design)[1]
    assert text.endswith(
        f"over {MAX_SEEDS} seeds per cell would be needed for 80% power, at each open pair's "
        "observed spread, to detect the larger of its difference and 0.50 points or to show it "
        "within the margin where its difference lies inside it."
    )
    assert "about" not in text


def test_the_pairs_intervals_are_at_one_minus_alpha(tmp_path):
    frame = write_pilot(tmp_path, {"A@r": [80.0, 82.0, 81.0], "B@r": [79.0, 80.5, 80.8]})
    pair = decide(frame, margin=0.5, min_effect=0.5, alpha=0.1).pairs[0]
    differences = np.array([1.0, 1.5, 0.2])
    low, high = stats.ttest_1samp(differences, 0.0).confidence_interval(0.9)
    assert (pair.ci_low, pair.ci_high) == pytest.approx((low, high))


def test_the_best_and_its_tests_are_over_the_seeds_every_cell_scored(tmp_path):
    # B scores 1 point above A on every seed both scored; A's seed 5, which B's NaN score leaves
    # unpaired, is high: by A's own five seeds A would lead
    frame = write_pilot(
        tmp_path,
        {"A@r": [80.0, 81.0, 79.5, 80.5, 90.0], "B@r": [81.0, 82.1, 80.4, 81.6, math.nan]},
    )
    decision = decide(frame, margin=0.25, min_effect=0.5)
    assert (decision.kind, decision.best, decision.chosen) == (WINNER, "B@r", "B@r")
    assert decision.seeds == (1, 2, 3, 4) and decision.left_out == (("A@r", 5),)
    assert decision.cell("A@r").mean == pytest.approx(80.25) and decision.cell("A@r").seeds == 4
    (pair,) = decision.pairs
    assert (pair.n_pairs, pair.verdict) == (4, BELOW) and pair.diff == pytest.approx(1.025)
    design = {
        "cells": [{"objective": o, "label": "r", "init": "r"} for o in "AB"],
        "sizing": {"subset": 100, "epochs": 1},
        "scale": {"examples": 1000, "intermediate_epochs": 2, "prediction_epochs": 2},
    }
    assert (
        "(paired t-tests over the 4 seeds every cell scored, Holm"
        in answer_lines(decision, design)[1]
    )
    assert pilot_line(design, decision).endswith(
        "; compared on the 4 seeds every cell scored; left out, as some cell has no score for "
        "their seed: A@r's seed 5."
    )


def test_a_design_cell_without_a_scored_run_stops_the_decision_in_one_line(tmp_path):
    frame = write_pilot(
        tmp_path,
        {"A@r": [80.0, 80.5, 81.0], "B@r": [70.0, 70.2, 70.1], "C@r": [math.nan] * 3},
    )
    with pytest.raises(KdbenchError) as stopped:
        decide(frame, margin=0.25, min_effect=0.5, names=["A@r", "B@r", "C@r"])
    message = str(stopped.value)
    assert "\n" not in message and "C@r: none" in message and "A@r: 1-3" in message
    assert "advise.candidates" in message


def test_a_pair_without_any_difference_counts_in_the_design_s_holm_family(tmp_path):
    # B repeats A's scores (its t-test p is 1, no difference shown); C lies below A with a t-test
    # p of 0.018: 0.036 after Holm over two pairs, 0.054 over the design's three
    base = [80.0 + s for s in range(6)]
    gap = [0.3, 2.6, 0.6, 2.4, 0.7, 2.1]
    frame = write_pilot(
        tmp_path,
        {"A@r": base, "B@r": list(base), "C@r": [s - g for s, g in zip(base, gap)]},
        train_s={"B@r": 9.0},
    )
    decision = decide(frame, margin=0.5, min_effect=1.0)
    pairs = {pair.other: pair for pair in decision.pairs}
    assert decision.best == "A@r" and pairs["B@r"].p == 1.0
    p = stats.ttest_rel(base, [s - g for s, g in zip(base, gap)]).pvalue
    assert pairs["C@r"].p_holm == pytest.approx(3 * p)
    assert (pairs["C@r"].verdict, decision.kind) == (OPEN, UNDECIDED)


def test_the_seeds_an_open_pair_needs_are_said_to_give_power_for_the_effect_worth_acting_on(
    tmp_path,
):
    # best - other 1.7, -0.3, 0.7: a difference of 0.7 (sd 1.0) inside the margin of 1; the seeds
    # are those detecting 2 points, which decide a true 0.7 in about a third of pilots, not surely
    frame = write_pilot(tmp_path, {"A@r": [80.0, 82.0, 78.6], "B@r": [78.3, 82.3, 77.9]})
    decision = decide(frame, margin=1.0, min_effect=2.0)
    assert decision.kind == UNDECIDED and decision.seeds_needed == 5
    design = {"cells": [{"objective": o, "label": "r", "init": "r"} for o in "AB"]}
    text = answer_lines(decision, design)[1]
    assert text.endswith(
        "about 5 seeds per cell (about 40s more of this pilot) give 80% power, at each open "
        "pair's observed spread, to detect the larger of its difference and 2.00 points or to "
        "show it within the margin where its difference lies inside it."
    )
    assert "would decide it" not in text
