"""kdbench.report statistics: Holm, the paired t-tests against scipy, unmatched runs,
significance.md."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from kdbench.report.frames import drop_duplicates, split_designs, to_frame
from kdbench.report.load import load_records
from kdbench.report.paired import MAX_SEEDS, holm, paired_effect, paired_power, seeds_needed
from kdbench.report.stats import PVALUE_COLS, UNMATCHED_COLS, paired_tests
from tests.unit.report_helpers import (
    A,
    B,
    C,
    read_csv,
    run_main,
    write_run,
    write_scores,
    write_three_objectives,
)


@pytest.fixture
def three_objectives(tmp_path: Path) -> Path:
    return write_three_objectives(tmp_path / "results")


# ---------------------------------------------------------------------------------------------
# statistics


def test_holm_by_hand():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1, monotone
    adjusted = holm([0.01, float("nan"), 0.04])  # NaN does not count in m
    assert adjusted[0] == pytest.approx(0.02) and adjusted[2] == pytest.approx(0.04)
    assert math.isnan(adjusted[1])
    assert np.isnan(holm([float("nan")])).all()


def test_paired_t_and_p_equal_scipy(three_objectives: Path):
    out = run_main(three_objectives)
    pv = read_csv(out / "pvalues.csv")
    assert list(pv.columns) == PVALUE_COLS
    rte = pv[(pv.task == "rte") & (pv.factor == "objective")]
    assert len(rte) == 3
    cases = [
        ("att_kl", "hid_mse", A, B),
        ("att_kl", "logit_kl", A, C),
        ("hid_mse", "logit_kl", B, C),
    ]
    for a, b, xs, ys in cases:
        row = rte[(rte.a == a) & (rte.b == b)].iloc[0]
        expected = stats.ttest_rel(xs, ys)
        assert row.t == pytest.approx(expected.statistic)
        assert row.p == pytest.approx(expected.pvalue)
        assert row.n_pairs == 4
        assert row.mean_a == pytest.approx(np.mean(xs)) and row.mean_b == pytest.approx(np.mean(ys))
        assert row.fixed == "4,8,12"
    expected_holm = holm(rte.p.to_numpy())
    assert rte.p_holm.to_numpy() == pytest.approx(expected_holm)


def test_pooled_all_pairs_by_task_and_seed(tmp_path: Path):
    results = tmp_path / "results"
    rte_a, rte_b = [70.0, 72.0, 71.0], [69.0, 70.5, 71.5]
    mrpc_a, mrpc_b = [80.0, 82.0, 79.0], [78.0, 81.0, None]
    write_scores(
        results,
        {
            ("rte", "att_kl", "4,8,12"): rte_a,
            ("rte", "hid_mse", "4,8,12"): rte_b,
            ("mrpc", "att_kl", "4,8,12"): mrpc_a,
            ("mrpc", "hid_mse", "4,8,12"): mrpc_b,
        },
    )
    pv = read_csv(run_main(results) / "pvalues.csv")
    row = pv[pv.task == "ALL"].iloc[0]
    xs = mrpc_a[:2] + rte_a  # matched (task, seed): mrpc 1-2, rte 1-3
    ys = mrpc_b[:2] + rte_b
    expected = stats.ttest_rel(xs, ys)
    assert row.n_pairs == 5
    assert row.t == pytest.approx(expected.statistic) and row.p == pytest.approx(expected.pvalue)
    assert row.mean_a == pytest.approx(np.mean(xs)) and row.mean_b == pytest.approx(np.mean(ys))
    assert row.p_holm == pytest.approx(row.p)  # a family of one


def test_pair_with_one_matched_seed_is_kept_with_empty_p(tmp_path: Path):
    results = tmp_path / "results"
    write_scores(
        results,
        {
            ("rte", "att_kl", "4,8,12"): [70.0, 71.0],
            ("rte", "hid_mse", "4,8,12"): [None, 69.0, 68.0],
        },
    )
    out = run_main(results)
    pv = read_csv(out / "pvalues.csv")
    rte = pv[pv.task == "rte"].iloc[0]
    assert rte.n_pairs == 1
    assert math.isnan(rte.t) and math.isnan(rte.p) and math.isnan(rte.p_holm)
    assert rte.mean_a == 71.0 and rte.mean_b == 69.0
    raw = (out / "pvalues.csv").read_text().splitlines()
    assert any(
        line.endswith(",1,71.0,69.0,2.0,,,,,,,,") for line in raw
    )  # a difference, nothing inferred

    unmatched = read_csv(out / "unmatched.csv")
    assert list(unmatched.columns) == UNMATCHED_COLS
    got = set(
        unmatched[["task", "a", "b", "missing_side", "seed"]].itertuples(index=False, name=None)
    )
    assert got == {("rte", "att_kl", "hid_mse", "b", 1), ("rte", "att_kl", "hid_mse", "a", 3)}
    assert "untestable" in (out / "significance.md").read_text()


def test_zero_variance_pair_has_empty_p_and_is_left_out_of_holm(tmp_path: Path):
    results = tmp_path / "results"
    write_scores(
        results,
        {
            ("rte", "att_kl", "4,8,12"): A,
            ("rte", "copy", "4,8,12"): A,  # identical: all differences 0 -> NaN from scipy
            ("rte", "logit_kl", "4,8,12"): C,
        },
    )
    pv = read_csv(run_main(results) / "pvalues.csv")
    rte = pv[pv.task == "rte"].set_index(["a", "b"])
    assert math.isnan(rte.loc[("att_kl", "copy"), "p"]) and math.isnan(
        rte.loc[("att_kl", "copy"), "p_holm"]
    )
    p = stats.ttest_rel(A, C).pvalue
    # m = 2 (the NaN pair is not counted), both remaining pairs have the same p
    assert rte.loc[("att_kl", "logit_kl"), "p_holm"] == pytest.approx(min(1.0, 2 * p))
    assert rte.loc[("copy", "logit_kl"), "p_holm"] == pytest.approx(min(1.0, 2 * p))


def test_init_factor_compares_inits_within_objective(tmp_path: Path):
    results = tmp_path / "results"
    write_scores(
        results,
        {
            ("rte", "att_kl", "4,8,12"): A,
            ("rte", "att_kl", "random"): C,
            ("rte", "hid_mse", "4,8,12"): B,
        },
    )
    pv = read_csv(run_main(results) / "pvalues.csv")
    init_rows = pv[(pv.factor == "init") & (pv.task == "rte")]
    assert len(init_rows) == 1
    row = init_rows.iloc[0]
    assert (row.fixed, row.a, row.b) == ("att_kl", "4,8,12", "random")
    assert row.p == pytest.approx(stats.ttest_rel(A, C).pvalue)
    objective_rows = pv[pv.factor == "objective"]
    assert set(objective_rows.fixed) == {
        "4,8,12"
    }  # 'random' has one objective only: nothing to compare


def test_significance_lists_non_significant_pairs(three_objectives: Path):
    text = (run_main(three_objectives) / "significance.md").read_text()
    pv = paired_tests(to_frame(load_records(three_objectives).records))
    rte = pv[(pv.task == "rte")].set_index(["a", "b"])
    assert rte.loc[("att_kl", "hid_mse"), "p_holm"] >= 0.05  # sanity of the fixture
    row = rte.loc[("att_kl", "hid_mse")]
    rte_line = next(
        line for line in text.splitlines() if line.startswith("| rte | att_kl | hid_mse |")
    )
    cells = [cell.strip() for cell in rte_line.strip("|").split("|")]
    assert cells[6] == f"{row['diff']:+.1f} [{row.ci_low:+.1f}, {row.ci_high:+.1f}]"
    assert cells[9:] == [f"{row.p_holm:.3f}", "no", f"{int(row.seeds_needed)} pairs"]
    assert "| | att_kl | hid_mse | logit_kl |" in text  # the ALL matrix of differences
    pooled = pv[pv.task == "ALL"].set_index(["a", "b"]).loc[("att_kl", "hid_mse")]
    matrix_row = next(line for line in text.splitlines() if line.startswith("| hid_mse | "))
    assert (
        f"{-pooled['diff']:+.1f}" in matrix_row.split("|")[2]
    )  # hid_mse - att_kl, read from hid_mse's row


# ------------------------------------------------------------------------------------------------
# designs


def _config(lr: float, seed: int, device: str = "cpu", compile_: bool = False) -> dict:
    return {
        "seed": seed,
        "paths": {"out": f"runs/{seed}"},
        "trainer": {"device": device, "compile": compile_},
        "stages": {"prediction": {"optimizer": {"lr": lr}}},
    }


def test_split_designs_excludes_a_cells_other_design_naming_the_key(tmp_path: Path):
    results = tmp_path / "results"
    # seeds 1-3: one design, differing only in seed, paths, device and trainer.compile (not design
    # keys)
    write_run(results, seed=1, config=_config(5e-5, 1))
    write_run(results, seed=2, config=_config(5e-5, 2, device="cuda"))
    write_run(results, seed=3, config=_config(5e-5, 3, compile_=True))
    write_run(results, seed=4, config=_config(1e-4, 4))  # another learning rate: another design
    write_run(results, seed=5, config=None)  # no config: not compared, kept
    write_run(
        results, seed=1, objective="hid_seq", config=_config(1e-4, 1)
    )  # another cell: its own design
    frame, excluded = split_designs(to_frame(load_records(results).records))
    assert sorted(frame[frame.objective == "att_kl"].seed) == [1, 2, 3, 5]
    assert list(frame[frame.objective == "hid_seq"].seed) == [1]
    (row,) = excluded
    assert (row["kind"], row["objective"], row["seed"]) == ("config_mismatch", "att_kl", "4")
    assert row["path"].endswith("seed4/result.json")
    assert (
        "stages.prediction.optimizer.lr=0.0001 (used: 5e-05)" in row["reason"]
        and "3 run(s)" in row["reason"]
    )
    for not_design in ("seed", "paths", "device", "compile"):
        assert not_design not in row["reason"]


def test_a_subset_drawn_per_seed_is_one_design_and_a_fixed_subset_another(tmp_path: Path):
    results = tmp_path / "results"
    for seed in (1, 2, 3):  # data.subset_seed: ${seed}, resolved
        write_run(results, seed=seed, config=_config(5e-5, seed) | {"data": {"subset_seed": seed}})
    write_run(results, seed=4, config=_config(5e-5, 4) | {"data": {"subset_seed": 0}})  # fixed
    frame, excluded = split_designs(to_frame(load_records(results).records))
    assert sorted(frame.seed) == [1, 2, 3]
    (row,) = excluded
    assert row["seed"] == "4" and 'data.subset_seed=0 (used: "the run\'s seed")' in row["reason"]


def test_split_designs_keeps_cells_of_one_design(three_objectives: Path):
    frame = to_frame(load_records(three_objectives).records)
    kept, excluded = split_designs(frame)
    assert excluded == [] and len(kept) == len(frame)


def test_same_key_other_design_is_a_mismatch_not_a_duplicate(tmp_path: Path):
    results = tmp_path / "results"
    for seed in (1, 2):  # one sweep, and a second sweep of another design into the same folder tree
        write_run(results, seed=seed, name=f"a/seed{seed}", config=_config(5e-5, seed))
        write_run(results, seed=seed, name=f"b/seed{seed}", config=_config(1e-4, seed))
    write_run(
        results, seed=1, name="c/seed1", config=_config(5e-5, 1, device="cuda")
    )  # a re-run of a/seed1
    frame, duplicates = drop_duplicates(to_frame(load_records(results).records))
    assert [(row["kind"], row["path"]) for row in duplicates] == [
        ("duplicate", "c/seed1/result.json")
    ]
    assert "a/seed1/result.json" in duplicates[0]["reason"]
    kept, mismatched = split_designs(frame)
    assert sorted(kept.path) == [
        "a/seed1/result.json",
        "a/seed2/result.json",
    ]  # equal counts: the first path's
    assert sorted(row["path"] for row in mismatched) == [
        "b/seed1/result.json",
        "b/seed2/result.json",
    ]


def test_paired_effect_by_hand():
    # differences 1, 2, 3: mean 2, sample std 1, t(0.975, 2) = 4.302653, half width 4.302653 /
    # sqrt(3)
    effect = paired_effect([11.0, 12.0, 13.0], [10.0, 10.0, 10.0])
    assert effect["diff"] == pytest.approx(2.0) and effect["effect"] == pytest.approx(2.0)
    assert effect["ci_low"] == pytest.approx(2 - 4.302653 / math.sqrt(3), abs=1e-5)
    assert effect["ci_high"] == pytest.approx(2 + 4.302653 / math.sqrt(3), abs=1e-5)
    assert math.isnan(paired_effect([1.0], [0.0])["ci_low"])
    assert math.isnan(paired_effect([1.0, 2.0], [1.0, 2.0])["effect"])  # no difference at all
    assert paired_effect([2.0, 3.0], [1.0, 2.0])["effect"] == math.inf  # a constant difference


@pytest.mark.parametrize(("effect", "pairs"), [(0.5, 34), (0.8, 15), (1.0, 10), (-1.0, 10)])
def test_seeds_needed_matches_the_power_tables(effect, pairs):
    # paired t-test, two-sided, alpha 0.05, power 0.8 (G*Power: d_z 0.5 -> 34, 0.8 -> 15, 1.0 -> 10)
    assert seeds_needed(effect, 0.05) == pairs
    assert paired_power(effect, pairs, 0.05) >= 0.8 > paired_power(effect, pairs - 1, 0.05)


def test_seeds_needed_bounds():
    assert seeds_needed(0.01, 0.05) == MAX_SEEDS
    assert math.isnan(seeds_needed(0.0, 0.05)) and math.isnan(seeds_needed(math.nan, 0.05))


def test_only_open_pairs_get_seeds_needed(tmp_path: Path):
    results = tmp_path / "results"
    write_scores(
        results,
        {
            ("rte", "a", "4,8,12"): [70.0, 71.0, 72.0, 73.0],
            ("rte", "b", "4,8,12"): [60.0, 61.0, 62.0, 63.5],
            ("rte", "c", "4,8,12"): [70.5, 70.0, 72.5, 73.5],
        },
    )
    pv = read_csv(run_main(results) / "pvalues.csv")
    pooled = pv[pv.task == "ALL"].set_index(["a", "b"])
    assert pooled.loc[("a", "b"), "p_holm"] < 0.05 and math.isnan(
        pooled.loc[("a", "b"), "seeds_needed"]
    )
    open_pair = pooled.loc[("a", "c")]
    assert open_pair.p_holm >= 0.05
    # at the level Holm holds each of the family's 3 pairs to: alpha / 3
    assert open_pair.seeds_needed == seeds_needed(open_pair.effect, 0.05 / 3) > 4
    assert open_pair.seeds_needed > seeds_needed(open_pair.effect, 0.05)


def test_findings_and_significance_give_the_interval_at_the_report_level_signed(tmp_path: Path):
    # hid_mse - att_kl per seed: at alpha 0.1 significant after Holm (one pair), its 90% interval
    # +0.07 to +1.97; the 95% one, -0.21 to +2.25, crosses 0
    results = tmp_path / "results"
    gains = [1.8, -0.2, 1.9, 0.1, 1.5]
    base = [71.0, 72.0, 73.0, 74.0, 75.0]
    write_scores(
        results,
        {
            ("rte", "att_kl", "4,8,12"): base,
            ("rte", "hid_mse", "4,8,12"): [b + g for b, g in zip(base, gains)],
        },
    )
    out = run_main(results, "--alpha", "0.1", "--digits", "2")
    pooled = read_csv(out / "pvalues.csv").query("task == 'ALL'").iloc[0]
    low, high = stats.ttest_rel(base, np.add(base, gains)).confidence_interval(0.9)
    assert (pooled.ci_low, pooled.ci_high) == pytest.approx((low, high))  # att_kl - hid_mse
    findings = (out / "claims.md").read_text()
    assert "hid_mse > att_kl by 1.02 points (90% CI +0.07 to +1.97; init 4,8,12;" in findings
    significance = (out / "significance.md").read_text()
    assert "a - b [90% CI]" in significance and "its 90% confidence interval" in significance
    assert "| ALL | att_kl | hid_mse | 5 | 73.00 | 74.02 | -1.02 [-1.97, -0.07] |" in significance
