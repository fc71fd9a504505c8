"""The example-level test (a paired bootstrap over dev examples) against scipy and by hand, and the
report's evidence page on synthetic records with prediction files, and an interaction's
example-level test by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from kdbench.metrics import METRICS
from kdbench.records.predictions import read_predictions, write_predictions
from kdbench.report.claims import DIFFERENCE, MAGNITUDE, Interaction
from kdbench.report.cli import main
from kdbench.report.evidence import interaction_example_test
from kdbench.report.examples import paired_bootstrap, weighted_metric
from kdbench.report.frames import to_frame
from kdbench.report.load import load_records
from tests.unit.report_helpers import write_run


def _discordant(n: int, a_only: int, b_only: int) -> tuple:
    """Gold all 0; a right where b is wrong on `a_only` examples, b right where a is wrong on
    `b_only`, both right elsewhere."""
    gold = np.zeros(n, dtype=int)
    a, b = np.zeros(n, dtype=int), np.zeros(n, dtype=int)
    b[:a_only] = 1
    a[a_only : a_only + b_only] = 1
    return (a, gold), (b, gold)


@pytest.mark.parametrize(("a_only", "b_only"), [(60, 40), (45, 55), (30, 30)])
def test_one_seed_accuracy_matches_mcnemar(a_only, b_only):
    """One seed per side, accuracy: the difference is (b - c) / N and the bootstrap p lies between
    McNemar's chi-square p (no continuity correction, (b - c)^2 / (b + c) on 1 df) and its exact
    binomial p (resamples with no difference count in both tails, as the exact test's ties do)."""
    run_a, run_b = _discordant(1000, a_only, b_only)
    result = paired_bootstrap("accuracy", [run_a], [run_b], resamples=20_000)
    assert result["diff"] == pytest.approx(100 * (a_only - b_only) / 1000)
    asymptotic = stats.chi2.sf((a_only - b_only) ** 2 / (a_only + b_only), 1)
    exact = stats.binomtest(a_only, a_only + b_only, 0.5).pvalue
    assert asymptotic - 0.01 <= result["p"] <= exact + 0.01
    if a_only == b_only:
        assert result["p"] == 1.0


def test_identical_sides_give_p_one_and_a_zero_interval():
    run = _discordant(200, 20, 0)[0]
    result = paired_bootstrap("accuracy", [run, run], [run, run], resamples=200)
    assert (result["diff"], result["ci_low"], result["ci_high"], result["p"]) == (0, 0, 0, 1)


def test_p_by_hand_from_the_same_resamples():
    """The p value and interval are the percentile bootstrap's, (1 + k) / (B + 1) per tail."""
    rng = np.random.default_rng(3)
    gold = rng.integers(0, 2, 50)
    runs = [(np.where(rng.random(50) < q, gold, 1 - gold), gold) for q in (0.8, 0.7, 0.6, 0.9)]
    result = paired_bootstrap("accuracy", runs[:2], runs[2:], resamples=300, seed=5)
    draws = np.random.default_rng(5).integers(0, 50, size=(300, 50))
    deltas = np.array(
        [
            np.mean([(p[d] == g[d]).mean() for p, g in runs[:2]])
            - np.mean([(p[d] == g[d]).mean() for p, g in runs[2:]])
            for d in draws
        ]
    )
    tail = min((deltas <= 0).sum(), (deltas >= 0).sum())
    assert result["p"] == pytest.approx(min(1.0, 2 * (1 + tail) / 301))
    assert result["ci_low"] == pytest.approx(100 * np.quantile(deltas, 0.025))


@pytest.mark.parametrize("metric", ["accuracy", "f1", "f1_macro", "mcc", "pearson", "spearman"])
def test_whole_split_scores_are_the_metrics(metric):
    rng = np.random.default_rng(1)
    if metric in {"pearson", "spearman"}:
        gold = rng.normal(size=300)
        predicted = gold + rng.normal(size=300)
        expected = METRICS[metric](predicted[:, None], gold)
    else:
        classes = 2 if metric in {"f1", "mcc"} else 3
        gold = rng.integers(0, classes, 300)
        predicted = np.where(rng.random(300) < 0.7, gold, rng.integers(0, classes, 300))
        expected = METRICS[metric](np.eye(classes)[predicted], gold)
    whole = weighted_metric(metric, np.ones((1, 300)), predicted, gold)[0]
    assert whole == pytest.approx(100 * expected)


def test_regression_bootstrap_is_near_the_normal_interval():
    """STS-B-like scores: a large Pearson gap is significant, its interval holds the difference."""
    rng = np.random.default_rng(2)
    gold = rng.normal(size=400)
    good, poor = gold + 0.5 * rng.normal(size=400), gold + 2 * rng.normal(size=400)
    result = paired_bootstrap("pearson", [(good, gold)], [(poor, gold)], resamples=500)
    assert result["p"] < 0.01 and result["ci_low"] < result["diff"] < result["ci_high"]


def test_predictions_round_trip(tmp_path: Path):
    arrays = {
        "example": np.arange(3),
        "predicted": np.array([0, 2, 1]),
        "gold": np.array([0, 1, 1]),
    }
    write_predictions(tmp_path / "p.npz", {"matched": arrays, "": arrays})
    back = read_predictions(tmp_path / "p.npz")
    assert set(back) == {"matched", ""}
    assert (back["matched"]["predicted"] == arrays["predicted"]).all()
    assert read_predictions(tmp_path / "missing.npz") is None


def _write_runs(root: Path, predictions: bool, gold: np.ndarray) -> None:
    rng = np.random.default_rng(0)
    for objective, accuracy in (("kd", 0.85), ("mse", 0.8)):
        for seed in range(3):
            folder = root / f"{objective}_{seed}"
            folder.mkdir(parents=True)
            predicted = np.where(rng.random(len(gold)) < accuracy, gold, 1 - gold)
            if (objective, seed) == ("mse", 2):
                predicted = np.zeros(len(gold), dtype=int)  # collapsed
            arrays = {"example": np.arange(len(gold)), "predicted": predicted, "gold": gold}
            write_predictions(folder / "predictions.npz", {"": arrays})
            metrics = {"accuracy": 100 * float((predicted == gold).mean())}
            metrics |= {f"predicted_class_{c}": int((predicted == c).sum()) for c in (0, 1)}
            record = {
                "schema": 1,
                "status": "completed",
                "setting": "task_specific",
                "task": "rte",
                "teacher": "t",
                "student": "s",
                "init": "random",
                "init_name": "random",
                "objective": objective,
                "seed": seed,
                "metrics": metrics,
                **({"predictions": "predictions.npz"} if predictions else {}),
                "score": metrics["accuracy"],
                "score_metric": "accuracy",
            }
            (folder / "result.json").write_text(json.dumps(record))


def test_the_report_tests_examples_and_drops_collapsed_runs(tmp_path: Path):
    gold = np.random.default_rng(9).integers(0, 2, 400)
    _write_runs(tmp_path / "runs", True, gold)
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    tests = pd.read_csv(tmp_path / "out" / "evidence.csv")
    assert list(tests["runs"]) == ["all", "without collapsed"]
    assert list(tests["n_pairs"]) == [3, 2]
    assert (tests["n_examples"] == 400).all()
    pvalues = pd.read_csv(tmp_path / "out" / "pvalues.csv")
    rte = pvalues[pvalues["task"] == "rte"].iloc[0]
    assert tests["diff"][0] == pytest.approx(rte["diff"])
    assert tests["example_diff"][0] == pytest.approx(rte["diff"])  # the same dev-set difference
    assert tests["example_p_holm"][0] < 0.05 <= tests["p_holm"][0]
    assert tests["agreement"][0] == "disagree: examples significant only"
    page = (tmp_path / "out" / "evidence.md").read_text()
    assert "6 of 6 runs keep their per-example predictions" in page
    assert "| task_specific | t | s | mse | random | rte | 1 of 3 | 33% |" in page
    assert "## Tests without collapsed runs" in page


def test_records_without_predictions_say_seed_level_only(tmp_path: Path):
    _write_runs(tmp_path / "runs", False, np.random.default_rng(9).integers(0, 2, 100))
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    tests = pd.read_csv(tmp_path / "out" / "evidence.csv")
    assert tests["example_p"].isna().all() and (tests["agreement"] == "seed-level only").all()
    assert math.isnan(tests["n_examples"][0])
    assert "seed-level evidence only" in (tmp_path / "out" / "evidence.md").read_text()


def _write_interaction(root: Path, right: dict, seeds=(1, 2)) -> pd.DataFrame:
    """Runs of objectives a and b at inits 1,2,3 and 2,4,6 on 10 dev examples of class 0, each
    cell's runs right on its first `right[(objective, init)]` examples."""
    gold = np.zeros(10, dtype=int)
    for (objective, init), k in right.items():
        for seed in seeds:
            predicted = np.where(np.arange(10) < k, 0, 1)
            name = f"{objective}-{init}-{seed}"
            write_run(
                root,
                objective=objective,
                init=init,
                seed=seed,
                name=name,
                score=10.0 * k,
                score_metric="accuracy",
                predictions="p.npz",
            )
            arrays = {"example": np.arange(10), "predicted": predicted, "gold": gold}
            write_predictions(root / name / "p.npz", {"": arrays})
    return to_frame(load_records(root).records)


@pytest.mark.parametrize("kind, expected", [(DIFFERENCE, 70.0), (MAGNITUDE, 30.0)])
def test_an_interaction_over_dev_examples_weighs_its_four_cells(tmp_path: Path, kind, expected):
    # a: 100 at 1,2,3, 50 at 2,4,6 (d_a +50); b: 40 and 60 (d_b -20)
    right = {("a", "1,2,3"): 10, ("a", "2,4,6"): 5, ("b", "1,2,3"): 4, ("b", "2,4,6"): 6}
    frame = _write_interaction(tmp_path, right)
    interaction = Interaction(kind, "a", "b", "1,2,3", "2,4,6")
    test = interaction_example_test(frame, interaction, "rte", tmp_path)
    assert test["diff"] == pytest.approx(expected)  # 50 - (-20); |50| - |-20|
    assert test["n_examples"] == 10 and test["ci_low"] <= expected <= test["ci_high"]


def test_an_interaction_without_predictions_has_no_example_level_test(tmp_path: Path):
    right = {("a", "1,2,3"): 10, ("a", "2,4,6"): 5, ("b", "1,2,3"): 4, ("b", "2,4,6"): 6}
    frame = _write_interaction(tmp_path, right)
    frame["predictions"] = None
    interaction = Interaction(DIFFERENCE, "a", "b", "1,2,3", "2,4,6")
    assert math.isnan(interaction_example_test(frame, interaction, "rte", tmp_path)["diff"])
