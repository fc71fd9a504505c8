"""Claimed ties, their margins, power at the family's Holm level, and interactions, judged on
synthetic runs with known effects (kdbench.report.rules, margins, interaction, verdicts)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from kdbench.report.claims import (
    CLAIMS,
    DIFFERENCE,
    MAGNITUDE,
    TIE,
    TIE_EXAMPLES,
    Claim,
    Interaction,
)
from kdbench.report.margins import dev_sizes, pooled_margin
from kdbench.report.paired import seeds_needed
from kdbench.report.rules import (
    CONTRADICTED,
    EQUIVALENT,
    EQUIVALENT_AND_DIFFERENT,
    INCONCLUSIVE,
    NOT_COVERED,
    OUTSIDE,
    SUPPORTED,
    UNSETTLED,
    PairedResult,
    verdict,
)
from kdbench.report.verdicts import judge_claims
from tests.unit.report_helpers import write_run
from tests.unit.test_report_claims import (
    POOLED_MARGIN,
    T3_REPLICA,
    judge,
    t3_offsets,
    ties,
    tost_by_hand,
    usable,
    write_t3,
)

SST2_MARGIN = 400 / 872  # 4 of SST-2's 872 dev examples, in points


def tie(diff: float, se: float, p_holm: float, margin: float = 1.0, n: int = 8, m: int = 1):
    """A claimed tie's test with its TOST p and its (1 - 0.05 / m) interval computed here."""
    half = stats.t.ppf(1 - 0.05 / m / 2, n - 1) * se
    above = stats.t.sf((diff + margin) / se, n - 1)
    below = stats.t.cdf((diff - margin) / se, n - 1)
    return PairedResult(
        n, diff, se, p_holm, m, (diff - half, diff + half), math.nan, margin, max(above, below)
    )


# ------------------------------------------------------------------------------------ the tie rule


def test_a_significant_difference_inside_the_margin_is_a_supported_tie():
    test = tie(diff=0.3, se=0.05, p_holm=0.001)
    assert test.p_equivalence < 0.05
    assert verdict(TIE, test, 0.05) == (SUPPORTED, EQUIVALENT_AND_DIFFERENT)
    assert verdict(TIE, tie(diff=0.3, se=0.05, p_holm=0.2), 0.05) == (SUPPORTED, EQUIVALENT)


def test_a_tie_is_contradicted_only_when_its_interval_lies_outside_the_margin():
    assert verdict(TIE, tie(diff=2.0, se=0.2, p_holm=0.001), 0.05) == (CONTRADICTED, OUTSIDE)
    assert verdict(TIE, tie(diff=-2.0, se=0.2, p_holm=0.001), 0.05) == (CONTRADICTED, OUTSIDE)
    # significant, the interval across the margin: neither equivalent nor outside it
    straddling = tie(diff=1.0, se=0.2, p_holm=0.001)
    assert straddling.ci[0] < 1.0 < straddling.ci[1]
    assert verdict(TIE, straddling, 0.05) == (INCONCLUSIVE, UNSETTLED)


def test_the_interval_of_a_tie_is_read_at_the_family_level():
    one, six = tie(diff=1.6, se=0.2, p_holm=0.001), tie(diff=1.6, se=0.2, p_holm=0.001, m=6)
    assert one.ci[0] > 1.0 > six.ci[0]  # outside at 95%, not at 1 - 0.05 / 6
    assert verdict(TIE, one, 0.05)[0] == CONTRADICTED
    assert verdict(TIE, six, 0.05)[0] == INCONCLUSIVE


def test_a_significant_but_equivalent_tie_is_supported_on_runs(tmp_path: Path):
    # att_kl and att_mse 0.3 points apart at 1,4,6 and 1,2,3 with little noise: significant, inside
    write_t3(tmp_path, t3_offsets(lower=(0, 5, 10), attention=(-5, 0.3, 0)), noise=0.02)
    judgement = judge(tmp_path, "T3.attention_robust_to_init")
    assert judgement.verdict == SUPPORTED
    frame = usable(tmp_path)
    for e in ties(judgement):
        assert e.p_holm < 0.05 and e.reason == EQUIVALENT_AND_DIFFERENT
        assert e.diff == pytest.approx(0.3)
        by_hand = tost_by_hand(frame, e.assertion.fixed, "1,4,6", "1,2,3", POOLED_MARGIN)
        assert e.p_equivalence == pytest.approx(by_hand, rel=1e-9) and by_hand < 0.05


def test_a_significant_tie_across_the_margin_is_inconclusive_on_runs(tmp_path: Path):
    write_t3(tmp_path, t3_offsets(lower=(0, 5, 10), attention=(-5, 1.0, 0)), noise=0.3)
    judgement = judge(tmp_path, "T3.attention_robust_to_init")
    assert judgement.verdict == INCONCLUSIVE
    for e in ties(judgement):
        assert e.p_holm < 0.05 and e.reason == UNSETTLED
        assert e.ci[0] < e.margin.points < e.ci[1] and e.ci_level == pytest.approx(1 - 0.05 / 3)


# ------------------------------------------------------------------------------------- the margin


def test_the_margin_is_a_number_of_dev_examples_recorded_with_the_verdict(tmp_path: Path):
    write_t3(tmp_path, t3_offsets(lower=(0, 5, 10), attention=(-5, 0, 0)))
    margin = ties(judge(tmp_path, "T3.attention_robust_to_init"))[0].margin
    assert margin.points == pytest.approx(POOLED_MARGIN)
    assert margin.source == (
        "4 dev examples of each task (SST-2 0.46, RTE 1.44), averaged over the pairs"
    )
    alone = pooled_margin({"sst2": 12}, {"sst2": 872}, TIE_EXAMPLES)
    assert alone.points == pytest.approx(SST2_MARGIN)
    assert alone.source == "4 of SST-2's 872 dev examples"
    assert not pooled_margin({"mytask": 3}, {}, TIE_EXAMPLES).known


def test_the_dev_set_size_comes_from_the_records_gold_counts(tmp_path: Path):
    for seed in (1, 2):
        gold = {"accuracy": 70.0, "dev_class_0": 60, "dev_class_1": 40}
        write_run(tmp_path, task="sst2", seed=seed, metrics=gold)
        write_run(tmp_path, task="rte", seed=seed)  # no counts: the task's known dev set
    assert dev_sizes(usable(tmp_path)) == {"sst2": 100, "rte": 277}


def test_a_claim_may_state_its_margin_in_points(tmp_path: Path):
    write_t3(tmp_path, t3_offsets(lower=(0, 5, 10), attention=(-5, 0, 0)))
    robust = next(c for c in CLAIMS if c.id == "T3.attention_robust_to_init")
    stated = dataclasses.replace(robust, margin=0.25)
    (judgement,) = judge_claims(usable(tmp_path), claims=(stated,))
    margin = ties(judgement)[0].margin
    assert (margin.points, margin.source) == (0.25, "+-0.25 points, stated by the claim")


# -------------------------------------------------------------------- power at the family's level


def test_seeds_needed_are_at_the_holm_level_of_the_family(tmp_path: Path):
    write_t3(tmp_path, t3_offsets(lower=(0, 0.25, 0.5), attention=(0, 0.25, 0.5)), noise=1.0)
    judgement = judge(tmp_path, "T3.lower_layers_help")
    pvalues = judgement.groups[0].runs.pvalues
    opened = [e for e in judgement.groups[0].evidence if not math.isnan(e.seeds_needed)]
    assert opened
    for e in opened:
        a, b = e.assertion.a, e.assertion.b
        row = pvalues[
            (pvalues["task"] == "ALL")
            & (pvalues["fixed"] == e.assertion.fixed)
            & pvalues["a"].isin([T3_INIT[a], T3_INIT[b]])
            & pvalues["b"].isin([T3_INIT[a], T3_INIT[b]])
        ].iloc[0]
        assert e.seeds_needed == seeds_needed(row["effect"], 0.05 / 3)  # 3 pairs of inits
        assert e.seeds_needed >= seeds_needed(row["effect"], 0.05)


T3_INIT = {"4,8,12": "2,4,6", "1,8,12": "1,4,6", "1,2,3": "1,2,3"}


# ------------------------------------------------------------------------------------ interactions


def write_effects(root: Path, cells: dict[tuple[str, str], float], sd: float = 0.5, seeds=12):
    """Runs of (objective, measured init) at the given means plus seeded normal noise, on SST-2."""
    rng = np.random.default_rng(7)
    for (objective, init), mean in cells.items():
        for seed in range(1, seeds + 1):
            score = mean + sd * rng.standard_normal()
            write_run(
                root,
                task="sst2",
                objective=objective,
                init=init,
                seed=seed,
                score=score,
                **T3_REPLICA,
            )
    return root


def per_seed_effects(frame, objective: str) -> np.ndarray:
    runs = frame[frame["objective"] == objective].set_index("seed").sort_index()
    return (
        runs[runs["init"] == "1,2,3"]["score"] - runs[runs["init"] == "2,4,6"]["score"]
    ).to_numpy()


def interaction_of(judgement, kind: str, other: str = "vanilla_kd"):
    (group,) = judgement.groups
    return next(
        e
        for e in group.evidence
        if e.assertion.kind == kind and e.assertion.a == "att_kl" and e.assertion.b == other
    )


def test_an_interaction_is_a_paired_test_of_a_difference_of_differences(tmp_path: Path):
    # vanilla KD gains 1 point from the lower layers, att_kl loses 1: att_kl benefits less
    cells = {
        ("vanilla_kd", "2,4,6"): 86.0,
        ("vanilla_kd", "1,2,3"): 87.0,
        ("att_kl", "2,4,6"): 87.5,
        ("att_kl", "1,2,3"): 86.5,
    }
    frame = usable(write_effects(tmp_path, cells))
    judgement = judge(tmp_path, "T3.attention_benefits_less")
    assert judgement.verdict == NOT_COVERED  # the other objectives have no runs
    e = interaction_of(judgement, DIFFERENCE)
    d_att, d_van = per_seed_effects(frame, "att_kl"), per_seed_effects(frame, "vanilla_kd")
    by_hand = stats.ttest_rel(d_att, d_van)
    assert (e.mean_a, e.mean_b) == pytest.approx((d_att.mean(), d_van.mean()))
    assert e.diff == pytest.approx((d_att - d_van).mean()) and e.n_pairs == 12
    assert e.p_holm == pytest.approx(by_hand.pvalue)  # the claim's one covered interaction
    low, high = stats.t.interval(0.95, 11, (d_att - d_van).mean(), stats.sem(d_att - d_van))
    assert e.ci == pytest.approx((low, high)) and e.ci_level == pytest.approx(0.95)
    assert (e.verdict, e.reason) == (SUPPORTED, "significant, in the claimed direction")
    consistent = judge(tmp_path, "T3.attention_consistent_across_inits")
    magnitude = interaction_of(consistent, MAGNITUDE)
    assert magnitude.diff == pytest.approx(abs(d_att.mean()) - abs(d_van.mean()))
    assert magnitude.verdict == INCONCLUSIVE  # as much either way: not smaller
    signed = -d_att - d_van
    assert magnitude.p_holm == pytest.approx(stats.ttest_1samp(signed, 0).pvalue)


def test_an_interaction_in_the_other_direction_is_contradicted(tmp_path: Path):
    cells = {
        ("vanilla_kd", "2,4,6"): 86.0,
        ("vanilla_kd", "1,2,3"): 86.0,
        ("att_kl", "2,4,6"): 85.0,
        ("att_kl", "1,2,3"): 88.0,
    }
    write_effects(tmp_path, cells)
    e = interaction_of(judge(tmp_path, "T3.attention_benefits_less"), DIFFERENCE)
    assert (e.verdict, e.reason) == (CONTRADICTED, "significant in the opposite direction")
    m = interaction_of(judge(tmp_path, "T3.attention_consistent_across_inits"), MAGNITUDE)
    assert m.verdict == CONTRADICTED and m.diff > 2


def test_a_smaller_init_effect_supports_the_magnitude_contrast(tmp_path: Path):
    cells = {
        ("vanilla_kd", "2,4,6"): 84.0,
        ("vanilla_kd", "1,2,3"): 87.0,
        ("att_kl", "2,4,6"): 87.0,
        ("att_kl", "1,2,3"): 87.2,
    }
    write_effects(tmp_path, cells)
    m = interaction_of(judge(tmp_path, "T3.attention_consistent_across_inits"), MAGNITUDE)
    assert m.verdict == SUPPORTED and m.diff < 0


def test_interactions_are_well_formed_and_judged_on_every_covered_pair(tmp_path: Path):
    claims = {c.id: c for c in CLAIMS}
    for claim_id, kind in (
        ("T3.attention_benefits_less", DIFFERENCE),
        ("T3.attention_consistent_across_inits", MAGNITUDE),
    ):
        claim: Claim = claims[claim_id]
        assert len(claim.assertions) == 8
        assert all(isinstance(a, Interaction) and a.kind == kind for a in claim.assertions)
    write_t3(tmp_path, t3_offsets(lower=(0, 1, 2), attention=(0, 0, 0.2)), noise=0.3)
    judgement = judge(tmp_path, "T3.attention_benefits_less")
    evidence = judgement.groups[0].evidence
    assert len(evidence) == 8
    assert all(e.ci_level == pytest.approx(1 - 0.05 / 8) for e in evidence)
    # every objective carries its init's noise, so each contrast is the same on every pair: the
    # sign test's p 2^(1 - 8), Holm over the 8 interactions, is not below 0.05
    assert all(e.p_holm == pytest.approx(8 * 2.0**-7) for e in evidence)
    assert judgement.verdict == INCONCLUSIVE
