"""kdbench.report.verdicts: the paper's conclusions judged from synthetic runs with known effects.

Scores are 70 + an offset per run set + a small zero-mean pattern of its own (orthogonal +-1
patterns), so a difference of offsets is exactly the mean paired difference and equal offsets give
mean difference 0.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from scipy import stats

from kdbench.report.claims import CLAIMS, TABLE_DESIGNS, TIE
from kdbench.report.frames import drop_duplicates, split_designs, to_frame
from kdbench.report.grids import best_of_grid
from kdbench.report.load import load_records
from kdbench.report.rules import (
    ALL_COLLAPSED,
    CONTRADICTED,
    EQUIVALENT,
    INCONCLUSIVE,
    NOT_COVERED,
    NOT_EQUIVALENT,
    NOT_SIGNIFICANT,
    OPPOSITE,
    OUTSIDE,
    SUPPORTED,
    TOO_FEW,
    UNTESTABLE,
    combine,
)
from kdbench.report.verdicts import judge_claims, missing_runs
from tests.unit.report_helpers import run_main, write_run

# Zero-mean, mutually orthogonal +-1 patterns over the 8 (task, seed) pairs.
PATTERNS = (
    (1, -1, 1, -1, 1, -1, 1, -1),
    (1, 1, -1, -1, 1, 1, -1, -1),
    (1, -1, -1, 1, 1, -1, -1, 1),
    (1, 1, 1, 1, -1, -1, -1, -1),
    (1, -1, 1, -1, -1, 1, -1, 1),
    (1, 1, -1, -1, -1, -1, 1, 1),
    (1, -1, -1, 1, -1, 1, 1, -1),
)
KEYS = [(task, seed) for task in ("sst2", "rte") for seed in (1, 2, 3, 4)]  # 2 tasks x 4 seeds
# A claimed tie's margin on KEYS: 4 dev examples of SST-2 (872) and of RTE (277), as many pairs each
POOLED_MARGIN = (400 / 872 + 400 / 277) / 2

T1_OBJECTIVES, _ = TABLE_DESIGNS[1]
T2_OBJECTIVES, _ = TABLE_DESIGNS[2]
T3_OBJECTIVES, T3_INITS = TABLE_DESIGNS[3]
ATTENTION_T3 = ("att_kl", "att_mse")
T1_REPLICA = {
    "teacher": "minilm_l6",
    "student": "3x384",
    "config": {"paper_analogue": {"table": 1, "inits": {"2,4,6": "4,8,12"}}},
}
T3_INIT_OF = {"4,8,12": "2,4,6", "1,8,12": "1,4,6", "1,2,3": "1,2,3"}  # paper -> measured
T3_REPLICA = {
    "teacher": "minilm_l6",
    "student": "3x384",
    "config": {"paper_analogue": {"table": 3, "inits": {v: k for k, v in T3_INIT_OF.items()}}},
}
AGNOSTIC = {"setting": "task_agnostic", "teacher": "bert_base_uncased", "student": "6x768"}

# Table 1 as the paper has it: attention above the rest; att_kl noisy enough to tie with att_mse,
# att_kl+hid_seq and att_mse+hid_seq; att_mse and att_mse+hid_seq equal; every other pair far apart.
T1_PAPER_LIKE = {
    "vanilla_kd": -40,
    "hid_cls_contrast": -30,
    "hid_cls": -20,
    "hid_seq": -10,
    "att_kl": 0,
    "att_mse": 0.5,
    "att_kl+hid_seq": -0.5,
    "att_mse+hid_seq": 0.5,
    "att_kl+val_kl": 10,
}
T1_LOUD = {"att_kl": 0.6}  # att_kl 0.5 from its tied partners: not significant, equivalent within 1


def scores(
    offsets: dict[str, float], noise: float = 0.1, loud: dict[str, float] | None = None
) -> dict:
    """Per level: 70 + offset + noise (``loud[level]`` for some) x a pattern of its own, over
    ``KEYS``."""
    loud = loud or {}
    return {
        level: [70.0 + offset + loud.get(level, noise) * p for p in PATTERNS[k % len(PATTERNS)]]
        for k, (level, offset) in enumerate(offsets.items())
    }


def write_table(
    root: Path, values: dict[str, list[float]], *, objective=None, init=None, keys=KEYS, **common
):
    """One run per (level, task, seed); levels are objectives (``init`` given) or measured inits
    (``objective``)."""
    for level, row in values.items():
        for (task, seed), score in zip(keys, row, strict=False):
            run = (
                {"objective": level, "init": init}
                if objective is None
                else {"objective": objective, "init": level}
            )
            write_run(root, task=task, seed=seed, score=score, **run, **common)


def ties(judgement) -> list:
    """The evidence of a judgement's claimed ties (``~``)."""
    return [e for g in judgement.groups for e in g.evidence if e.assertion.relation == TIE]


def write_t1(root: Path, offsets: dict[str, float], **noise) -> Path:
    write_table(root, scores(offsets, **noise), init="2,4,6", **T1_REPLICA)
    return root


def write_t3(root: Path, offsets: dict[str, dict[str, float]], keys=KEYS, **noise) -> Path:
    """``offsets[objective][paper init]``; the runs carry the replica's measured inits."""
    for objective, by_init in offsets.items():
        measured = {T3_INIT_OF[init]: value for init, value in by_init.items()}
        write_table(root, scores(measured, **noise), objective=objective, keys=keys, **T3_REPLICA)
    return root


def t3_offsets(lower: tuple[float, float, float], attention: tuple[float, float, float]) -> dict:
    """Offsets at paper inits (4,8,12, 1,8,12, 1,2,3): ``lower`` for the non-attention
    objectives."""
    return {
        objective: dict(
            zip(T3_INITS, attention if objective in ATTENTION_T3 else lower, strict=True)
        )
        for objective in T3_OBJECTIVES
    }


def write_t2(root: Path, offsets: dict[str, float], **noise) -> Path:
    """The paper's own task-agnostic design, two fine-tuning grid points per run: the worse one 30
    points down."""
    for objective, row in scores(offsets, **noise).items():
        for (task, seed), score in zip(KEYS, row, strict=True):
            for lr, points in ((1e-5, score), (5e-5, score - 30)):
                write_run(
                    root,
                    task=task,
                    objective=objective,
                    init="random",
                    seed=seed,
                    score=points,
                    grid={"lr": lr},
                    name=f"{objective}/{task}/s{seed}/lr{lr}",
                    **AGNOSTIC,
                )
    return root


def usable(root: Path):
    """The report's usable runs, as cli.py builds them."""
    frame, _ = best_of_grid(to_frame(load_records(root).records))
    frame, _ = drop_duplicates(frame)
    frame, _ = split_designs(frame)
    return frame


def judge(root: Path, claim_id: str, alpha: float = 0.05):
    return {j.claim.id: j for j in judge_claims(usable(root), alpha)}[claim_id]


def reasons(judgement) -> set[str]:
    return {e.reason for group in judgement.groups for e in group.evidence}


def without(offsets: dict, *levels: str) -> dict:
    return {level: value for level, value in offsets.items() if level not in levels}


# ------------------------------------------------------------------------------------------------
# the rules


def test_claims_are_well_formed():
    ids = [claim.id for claim in CLAIMS]
    assert len(ids) == len(set(ids))
    for claim in CLAIMS:
        objectives, inits = TABLE_DESIGNS[claim.table]
        for assertion in claim.assertions:
            for objective, init in assertion.runs():
                assert objective in objectives and init in inits, (claim.id, assertion)


def test_combine_rule():
    assert combine([SUPPORTED, CONTRADICTED, NOT_COVERED]) == CONTRADICTED
    assert combine([SUPPORTED, SUPPORTED]) == SUPPORTED
    assert combine([SUPPORTED, INCONCLUSIVE, NOT_COVERED]) == NOT_COVERED
    assert combine([SUPPORTED, INCONCLUSIVE]) == INCONCLUSIVE
    assert combine([]) == NOT_COVERED


# ---------------------------------------------------------------------------------------
# T1.attention_best


def test_attention_best_supported_on_a_replica(tmp_path: Path):
    judgement = judge(write_t1(tmp_path, T1_PAPER_LIKE, loud=T1_LOUD), "T1.attention_best")
    assert judgement.verdict == SUPPORTED
    (group,) = judgement.groups
    assert group.runs.replica and group.runs.measured_init == {"4,8,12": "2,4,6"}
    assert len(group.evidence) == 20 and all(
        e.n_pairs == 8 and e.p_holm < 0.05 for e in group.evidence
    )


def test_attention_best_contradicted_when_reversed(tmp_path: Path):
    offsets = {o: (-5.0 if o.startswith("att") else 0.0) for o in T1_OBJECTIVES}
    judgement = judge(write_t1(tmp_path, offsets), "T1.attention_best")
    assert judgement.verdict == CONTRADICTED
    assert reasons(judgement) == {"significant in the opposite direction", OPPOSITE}
    # 9 objectives, 7 noise patterns: att_kl+hid_seq and att_kl+val_kl share theirs with
    # vanilla_kd and hid_cls_contrast, so those two pairs differ by -5 on every (task, seed); the
    # sign test's p 2^-7 does not survive Holm over the family's 36 pairs
    shared = {(e.assertion.a, e.assertion.b): e for e in judgement.groups[0].evidence}
    for pair in (("att_kl+hid_seq", "vanilla_kd"), ("att_kl+val_kl", "hid_cls_contrast")):
        assert shared[pair].reason == OPPOSITE and shared[pair].diff == pytest.approx(-5.0)
        assert shared[pair].ci == (-math.inf, math.inf)


@pytest.mark.parametrize("noise, reason", [(0.1, NOT_SIGNIFICANT), (0.0, UNTESTABLE)])
def test_attention_best_inconclusive_without_effect(tmp_path: Path, noise: float, reason: str):
    judgement = judge(
        write_t1(tmp_path, dict.fromkeys(T1_OBJECTIVES, 0.0), noise=noise), "T1.attention_best"
    )
    assert judgement.verdict == INCONCLUSIVE
    assert reason in reasons(judgement)


def test_attention_best_not_covered_names_missing_objectives(tmp_path: Path):
    offsets = without(T1_PAPER_LIKE, "att_kl+val_kl", "hid_cls")
    judgement = judge(write_t1(tmp_path, offsets, loud=T1_LOUD), "T1.attention_best")
    assert judgement.verdict == NOT_COVERED
    missing = missing_runs(judgement)
    assert len(missing) == 2
    assert (
        missing[0] == "hid_cls at paper init 4,8,12 (Table 1) in task_specific minilm_l6 -> 3x384"
    )
    assert missing[1].startswith("att_kl+val_kl at paper init 4,8,12 (Table 1)")


def test_no_runs_for_a_table_is_not_covered(tmp_path: Path):
    judgement = judge(write_t1(tmp_path, T1_PAPER_LIKE, loud=T1_LOUD), "T3.lower_layers_help")
    assert judgement.verdict == NOT_COVERED
    assert judgement.groups[0].runs is None
    assert "vanilla_kd at paper init 1,2,3 (Table 3)" in missing_runs(judgement)


# --------------------------------------------------------------------------------
# T1.attention_variants_tie


def test_variants_tie_supported_when_only_the_four_pairs_tie(tmp_path: Path):
    judgement = judge(write_t1(tmp_path, T1_PAPER_LIKE, loud=T1_LOUD), "T1.attention_variants_tie")
    assert judgement.verdict == SUPPORTED
    evidence = judgement.groups[0].evidence
    ties = [e for e in evidence if e.assertion.relation == "~"]
    assert len(evidence) == 36 and len(ties) == 4
    assert all(e.p_holm >= 0.05 for e in ties)


def test_variants_tie_contradicted_when_a_tie_is_significant(tmp_path: Path):
    spread = {objective: 2.0 * k for k, objective in enumerate(T1_OBJECTIVES)}
    judgement = judge(write_t1(tmp_path, spread), "T1.attention_variants_tie")
    assert judgement.verdict == CONTRADICTED
    assert OUTSIDE in reasons(judgement)


def test_variants_tie_inconclusive_when_nothing_differs(tmp_path: Path):
    judgement = judge(
        write_t1(tmp_path, dict.fromkeys(T1_OBJECTIVES, 0.0)), "T1.attention_variants_tie"
    )
    assert judgement.verdict == INCONCLUSIVE  # the ties hold, the other pairs are not significant
    assert NOT_SIGNIFICANT in reasons(judgement)


def test_variants_tie_not_covered_without_a_tied_objective(tmp_path: Path):
    judgement = judge(
        write_t1(tmp_path, without(T1_PAPER_LIKE, "att_mse+hid_seq"), loud=T1_LOUD),
        "T1.attention_variants_tie",
    )
    assert judgement.verdict == NOT_COVERED
    assert [m.split(" in ")[0] for m in missing_runs(judgement)] == [
        "att_mse+hid_seq at paper init 4,8,12 (Table 1)"
    ]


# -------------------------------------------------------------------------------------------------
# Table 3


def test_lower_layers_and_attention_robust_supported(tmp_path: Path):
    write_t3(tmp_path, t3_offsets(lower=(0, 5, 10), attention=(-5, 0, 0)))
    lower = judge(tmp_path, "T3.lower_layers_help")
    assert lower.verdict == SUPPORTED
    assert lower.groups[0].runs.measured_init == {
        "4,8,12": "2,4,6",
        "1,8,12": "1,4,6",
        "1,2,3": "1,2,3",
    }
    assert len(lower.groups[0].evidence) == 12
    assert judge(tmp_path, "T3.attention_robust_to_init").verdict == SUPPORTED


def test_lower_layers_and_attention_robust_contradicted(tmp_path: Path):
    write_t3(tmp_path, t3_offsets(lower=(10, 5, 0), attention=(0, 0, 5)))
    lower = judge(tmp_path, "T3.lower_layers_help")
    assert lower.verdict == CONTRADICTED
    assert reasons(lower) == {"significant in the opposite direction"}
    assert judge(tmp_path, "T3.attention_robust_to_init").verdict == CONTRADICTED


def test_without_effect_the_inits_differ_nowhere_though_the_attention_tie_holds(tmp_path: Path):
    write_t3(tmp_path, t3_offsets(lower=(0, 0, 0), attention=(0, 0, 0)))
    lower = judge(tmp_path, "T3.lower_layers_help")
    assert lower.verdict == INCONCLUSIVE and reasons(lower) == {NOT_SIGNIFICANT}
    robust = judge(tmp_path, "T3.attention_robust_to_init")
    assert [e.verdict for e in ties(robust)] == [SUPPORTED, SUPPORTED]  # 1,8,12 ~ 1,2,3 holds
    # but the claim also says 4,8,12 differs from both: not significant, so not supported
    assert robust.verdict == INCONCLUSIVE and NOT_SIGNIFICANT in reasons(robust)


def test_attention_robust_needs_4_8_12_to_differ_from_the_lower_inits(tmp_path: Path):
    write_t3(tmp_path, t3_offsets(lower=(0, 5, 10), attention=(-5, 0, 0)))
    robust = judge(tmp_path, "T3.attention_robust_to_init")
    assert robust.verdict == SUPPORTED
    labels = [e.assertion.label() for g in robust.groups for e in g.evidence]
    assert labels == [
        f"{objective}: {pair}"
        for objective in ("att_kl", "att_mse")
        for pair in ("4,8,12 != 1,8,12", "4,8,12 != 1,2,3", "1,8,12 ~ 1,2,3")
    ]


def test_a_claimed_tie_whose_paired_differences_are_all_0_is_shown_equivalent(tmp_path: Path):
    write_t3(tmp_path, t3_offsets(lower=(0, 0, 0), attention=(-5, 0, 0)), noise=0.0)
    robust = judge(tmp_path, "T3.attention_robust_to_init")
    assert robust.verdict == SUPPORTED and {e.reason for e in ties(robust)} == {EQUIVALENT}
    for e in ties(robust):  # no t-test, so the exact sign test: p 2^-8 of 8 pairs
        assert math.isnan(e.p_holm) and e.p_equivalence == 2.0**-8
    four = write_t3(
        tmp_path / "four", t3_offsets(lower=(0, 0, 0), attention=(-5, 0, 0)), KEYS[:4], noise=0.0
    )
    robust = judge(four, "T3.attention_robust_to_init")  # p 2^-4 > 0.05: 5 pairs would show it
    assert robust.verdict == INCONCLUSIVE and {e.reason for e in ties(robust)} == {NOT_EQUIVALENT}
    assert {e.seeds_needed for e in ties(robust)} == {5}


def test_attention_robust_inconclusive_with_one_seed(tmp_path: Path):
    one_seed = write_t3(
        tmp_path / "one", t3_offsets(lower=(0, 5, 10), attention=(-5, 0, 0)), keys=KEYS[:1]
    )
    for claim_id in ("T3.attention_robust_to_init", "T3.lower_layers_help"):
        judgement = judge(one_seed, claim_id)
        assert judgement.verdict == INCONCLUSIVE and reasons(judgement) == {TOO_FEW}
        assert all(e.n_pairs == 1 for e in judgement.groups[0].evidence)


def test_table3_not_covered_names_missing_inits(tmp_path: Path):
    offsets = t3_offsets(lower=(0, 5, 10), attention=(-5, 0, 0))
    del offsets["hid_seq"]["1,8,12"], offsets["att_mse"]["1,2,3"]
    write_t3(tmp_path, offsets)
    lower = judge(tmp_path, "T3.lower_layers_help")
    assert lower.verdict == NOT_COVERED
    assert [m.split(" in ")[0] for m in missing_runs(lower)] == [
        "hid_seq at paper init 1,8,12 (Table 3)"
    ]
    robust = judge(tmp_path, "T3.attention_robust_to_init")
    assert robust.verdict == NOT_COVERED
    assert [m.split(" in ")[0] for m in missing_runs(robust)] == [
        "att_mse at paper init 1,2,3 (Table 3)"
    ]


# ---------------------------------------------------------------------------------------- Tables 2
# and 4


def test_att_mse_best_agnostic_supported_on_best_grid_points(tmp_path: Path):
    offsets = {o: (5.0 if o == "att_mse" else 0.0) for o in T2_OBJECTIVES}
    judgement = judge(write_t2(tmp_path, offsets), "T2.att_mse_best_agnostic")
    assert judgement.verdict == SUPPORTED
    (group,) = judgement.groups
    assert not group.runs.replica and len(group.evidence) == 7
    assert all(
        e.mean_a == pytest.approx(75.0) and e.mean_b == pytest.approx(70.0) for e in group.evidence
    )


def test_att_mse_best_agnostic_contradicted_inconclusive_not_covered(tmp_path: Path):
    reversed_ = {o: (-5.0 if o == "att_mse" else 0.0) for o in T2_OBJECTIVES}
    assert (
        judge(write_t2(tmp_path / "rev", reversed_), "T2.att_mse_best_agnostic").verdict
        == CONTRADICTED
    )
    flat = dict.fromkeys(T2_OBJECTIVES, 0.0)
    assert (
        judge(write_t2(tmp_path / "flat", flat), "T2.att_mse_best_agnostic").verdict == INCONCLUSIVE
    )
    judgement = judge(
        write_t2(tmp_path / "few", without(flat, "vanilla_kd")), "T2.att_mse_best_agnostic"
    )
    assert judgement.verdict == NOT_COVERED
    assert missing_runs(judgement)[0].startswith("vanilla_kd at paper init random (Table 2)")


def test_first_six_layers_count_as_the_papers_first_6(tmp_path: Path):
    offsets = {o: (5.0 if o == "att_mse" else 0.0) for o in TABLE_DESIGNS[4][0]}
    for init in ("random", "1,2,3,4,5,6"):
        write_table(tmp_path / init, scores(offsets), init=init, **AGNOSTIC)
    judgement = judge(tmp_path, "T4.attention_best_both_inits")
    assert judgement.verdict == SUPPORTED
    assert judgement.groups[0].runs.measured_init == {"random": "random", "first 6": "1,2,3,4,5,6"}


# -----------------------------------------------------------------------------------------------
# claims.md


def test_report_writes_claims_md(tmp_path: Path):
    results = write_t1(tmp_path / "results", T1_PAPER_LIKE, loud=T1_LOUD)
    text = (run_main(results) / "claims.md").read_text()
    assert text.startswith(
        "# Findings: results\n\n### task_specific / minilm_l6 / 3x384: 9 objective(s)"
    )
    assert text.index("# Findings") < text.index("# Claims of Wang et al. 2023")
    assert (
        "Not covered by these runs (a run set they compare has no run): T3.lower_layers_help "
        "(Table 3)" in text
    )
    assert "| T3.lower_layers_help |" not in text  # not covered: in the one line, not the table
    assert "alpha = 0.05" in text and "Holm-adjusted within the family" in text
    assert "## When not to trust a verdict" in text
    assert "| T1.attention_best | 1 | supported |" in text
    assert "## T1.attention_variants_tie: supported" in text
    assert "### task_specific minilm_l6 -> 3x384: supported" in text
    assert "paper init (measured): 4,8,12 (2,4,6)." in text
    assert "| 4,8,12: att_kl > vanilla_kd |" in text
    assert "## T3.lower_layers_help: not covered" in text
    assert "- vanilla_kd at paper init 4,8,12 (Table 3)" in text
    assert "No run stands for Table 2" in text


def test_claims_md_follows_alpha(tmp_path: Path):
    results = write_t1(tmp_path / "results", dict.fromkeys(T1_OBJECTIVES, 0.0))
    text = (run_main(results, "--alpha", "0.01") / "claims.md").read_text()
    assert "alpha = 0.01" in text
    assert "## T1.attention_best: inconclusive" in text
    assert "effect not significant" in text


# ------------------------------------------------------------------------------------- equivalence
# and direction


def tost_by_hand(frame, objective: str, init_a: str, init_b: str, margin: float) -> float:
    """TOST with scipy: the larger p of ``a - b > -margin`` and ``a - b < +margin``, paired by
    (task, seed)."""
    runs = frame[frame["objective"] == objective].set_index(["task", "seed"])
    a, b = runs[runs["init"] == init_a]["score"], runs[runs["init"] == init_b]["score"]
    a, b = a.align(b, join="inner")
    above = stats.ttest_rel(a + margin, b, alternative="greater").pvalue
    below = stats.ttest_rel(a - margin, b, alternative="less").pvalue
    return max(above, below)


@pytest.mark.parametrize(
    "attention, noise, verdict",
    [
        ((-5, 0, 0), 0.1, SUPPORTED),  # a real tie: equivalent within the margin
        ((-5, 0, 5), 0.1, CONTRADICTED),  # a large gap: significant
        ((-5, 0, 0.8), 1.0, INCONCLUSIVE),  # near the margin, noisy: not different, not equivalent
    ],
)
def test_claimed_tie_needs_an_equivalence_test(tmp_path: Path, attention, noise, verdict):
    write_t3(tmp_path, t3_offsets(lower=(0, 5, 10), attention=attention), noise=noise)
    judgement = judge(tmp_path, "T3.attention_robust_to_init")
    assert judgement.verdict == verdict
    frame = usable(tmp_path)
    for e in ties(judgement):
        assert e.margin.points == pytest.approx(POOLED_MARGIN)
        by_hand = tost_by_hand(frame, e.assertion.fixed, "1,4,6", "1,2,3", e.margin.points)
        assert e.p_equivalence == pytest.approx(by_hand, rel=1e-9)
        assert (e.p_equivalence < 0.05) == (verdict == SUPPORTED)
        if verdict == INCONCLUSIVE:
            assert e.reason == NOT_EQUIVALENT and e.p_holm >= 0.05
            assert (
                e.seeds_needed > e.n_pairs
            )  # |difference| inside the margin: more pairs would settle it


def test_power_advice_only_in_the_claimed_direction(tmp_path: Path):
    write_t3(tmp_path, t3_offsets(lower=(0.5, 0.25, 0), attention=(-5, 0, 0)), noise=1.0)
    evidence = judge(tmp_path, "T3.lower_layers_help").groups[0].evidence
    reversed_gap = [e for e in evidence if e.mean_a < e.mean_b]
    assert reversed_gap and all(
        e.verdict == INCONCLUSIVE and e.reason == OPPOSITE for e in reversed_gap
    )
    assert all(math.isnan(e.seeds_needed) for e in reversed_gap)


def test_a_study_whose_runs_all_collapsed_makes_no_comparison(tmp_path: Path):
    constant = {
        "dev_class_0": 428,
        "dev_class_1": 444,
    }  # SST-2 dev: predicting class 1 everywhere scores 50.9
    for objective in T1_OBJECTIVES:
        for task, seed in KEYS:
            write_run(
                tmp_path,
                task=task,
                seed=seed,
                objective=objective,
                init="2,4,6",
                score=100 * 444 / 872,
                metrics={"accuracy": 100 * 444 / 872, **constant},
                score_metric="accuracy",
                **T1_REPLICA,
            )
    judgement = judge(tmp_path, "T1.attention_best")
    assert judgement.verdict == INCONCLUSIVE
    assert reasons(judgement) == {ALL_COLLAPSED} and judgement.groups[0].runs.all_collapsed
