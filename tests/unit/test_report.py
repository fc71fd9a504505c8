"""The report on synthetic records with known values: summaries, paired t-tests, Holm, LaTeX, edge cases."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from kdbench.report import holm, main

SCORES = {  # objective -> task -> seed -> score
    "vanilla_kd": {"rte": {1: 60.0, 2: 62.0, 3: 61.0, 4: 59.0}, "sst2": {1: 85.0, 2: 86.5, 3: 84.0, 4: 85.5}},
    "att_kl": {"rte": {1: 63.0, 2: 64.5, 3: 62.0, 4: 63.5}, "sst2": {1: 87.0, 2: 86.0, 3: 88.0, 4: 87.5}},
    "hid_seq": {"rte": {1: 61.0, 2: 60.0, 3: 62.5, 4: 61.5}, "sst2": {1: 85.5, 2: 85.0, 3: 86.0, 4: 84.5}},
}


def write_record(root, i, **fields):
    record = {"schema": 1, "status": "completed", "setting": "task_specific", "teacher": "roberta_base",
              "student": "3x768", "init": "4,8,12", "metrics": {"accuracy": fields.get("score")}, **fields}
    folder = root / f"run{i:03d}"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps(record))


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "runs"
    i = 0
    for objective, tasks in SCORES.items():
        for task, seeds in tasks.items():
            for seed, score in seeds.items():
                write_record(root, i, objective=objective, task=task, seed=seed, score=score)
                i += 1
    write_record(root, i, objective="att_kl", task="rte", seed=9, score=None, status="failed", error="Boom: oom")
    write_record(root, i + 1, objective="att_kl", task="rte", seed=8, score=None, status="running")
    out = tmp_path / "report"
    assert main([str(root), "--out", str(out)]) == 0
    return out


def test_summary_means_and_sample_stds(results):
    summary = pd.read_csv(results / "summary.csv")
    for objective, tasks in SCORES.items():
        for task, seeds in tasks.items():
            row = summary[(summary.objective == objective) & (summary.task == task)].iloc[0]
            values = np.array(list(seeds.values()))
            assert row["mean"] == pytest.approx(values.mean())
            assert row["std"] == pytest.approx(values.std(ddof=1))
            assert row["n"] == 4


def test_paired_t_and_p_equal_scipy(results):
    pvalues = pd.read_csv(results / "pvalues.csv")
    row = pvalues[(pvalues.factor == "objective") & (pvalues.task == "rte") & (pvalues.a == "att_kl")
                  & (pvalues.b == "vanilla_kd")].iloc[0]
    a = [SCORES["att_kl"]["rte"][s] for s in (1, 2, 3, 4)]
    b = [SCORES["vanilla_kd"]["rte"][s] for s in (1, 2, 3, 4)]
    t, p = stats.ttest_rel(a, b)
    assert (row["t"], row["p"], row["n_pairs"]) == (pytest.approx(t), pytest.approx(p), 4)
    assert row["fixed"] == "4,8,12"
    family = pvalues[(pvalues.factor == "objective") & (pvalues.task == "rte")]
    assert len(family) == 3 and np.allclose(family["p_holm"], holm(family["p"].to_numpy()))


def test_pooled_test_pairs_task_and_seed(results):
    pvalues = pd.read_csv(results / "pvalues.csv")
    row = pvalues[(pvalues.task == "ALL") & (pvalues.a == "att_kl") & (pvalues.b == "hid_seq")].iloc[0]
    a = [SCORES["att_kl"][t][s] for t in ("sst2", "rte") for s in (1, 2, 3, 4)]
    b = [SCORES["hid_seq"][t][s] for t in ("sst2", "rte") for s in (1, 2, 3, 4)]
    assert row["n_pairs"] == 8 and row["p"] == pytest.approx(stats.ttest_rel(a, b).pvalue)


def test_holm_by_hand():
    assert np.allclose(holm(np.array([0.01, 0.04, 0.03])), [0.03, 0.06, 0.06])
    adjusted = holm(np.array([0.2, np.nan, 0.01]))
    assert np.isnan(adjusted[1]) and np.allclose(adjusted[[0, 2]], [0.2, 0.02])


def test_failed_and_running_runs_are_listed_not_counted(results):
    excluded = pd.read_csv(results / "excluded.csv")
    assert sorted(excluded["kind"]) == ["failed", "running"]
    assert "Boom: oom" in excluded[excluded.kind == "failed"]["reason"].iloc[0]
    assert len(pd.read_csv(results / "results.csv")) == 24


def test_markdown_bolds_the_best_mean_per_column(results):
    text = (results / "tables.md").read_text()
    att_row = next(line for line in text.splitlines() if line.startswith("| att_kl |"))
    assert att_row.count("**") == 6  # SST-2, RTE and Avg are all att_kl's
    assert "n = 4 seeds per cell" in text


def test_latex_is_valid_tabular_syntax(results):
    tex = (results / "tables.tex").read_text()
    assert tex.count("\\begin{tabular}") == tex.count("\\end{tabular}") == 1
    spec = tex.split("\\begin{tabular}{", 1)[1].split("}", 1)[0]
    body = tex.split("\\midrule", 1)[1].split("\\bottomrule", 1)[0].strip().splitlines()
    assert len(body) == 3
    for line in body:
        assert line.endswith("\\\\") and line.count("&") == len(spec) - 1
    assert "\\toprule" in tex and "\\textbf{" in tex and "$\\pm$" in tex and "att\\_kl" in tex


def test_plots_are_written(results):
    pngs = list(results.glob("*.png"))
    assert pngs and all(p.stat().st_size > 1000 for p in pngs)


def test_too_few_matched_seeds_and_unmatched_runs(tmp_path):
    root = tmp_path / "runs"
    write_record(root, 0, objective="a", task="rte", seed=1, score=60.0)
    write_record(root, 1, objective="a", task="rte", seed=2, score=61.0)
    write_record(root, 2, objective="b", task="rte", seed=1, score=62.0)
    write_record(root, 3, objective="b", task="rte", seed=3, score=63.0)
    assert main([str(root), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    pvalues = pd.read_csv(tmp_path / "out" / "pvalues.csv")
    row = pvalues[pvalues.task == "rte"].iloc[0]
    assert row["n_pairs"] == 1 and np.isnan(row["p"]) and np.isnan(row["p_holm"])
    unmatched = pd.read_csv(tmp_path / "out" / "unmatched.csv")
    assert sorted(zip(unmatched["seed"], unmatched["missing_side"])) == [(2, "b"), (3, "a")]


def test_init_rows_appear_when_init_varies(tmp_path):
    root = tmp_path / "runs"
    for i, (init, seed, score) in enumerate([("4,8,12", 1, 60.0), ("4,8,12", 2, 61.0), ("1,2,3", 1, 64.0),
                                             ("1,2,3", 2, 65.5)]):
        write_record(root, i, objective="vanilla_kd", task="rte", seed=seed, score=score, init=init)
    assert main([str(root), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    text = (tmp_path / "out" / "tables.md").read_text()
    assert "| vanilla_kd | 1,2,3 |" in text and "| vanilla_kd | 4,8,12 |" in text
    pvalues = pd.read_csv(tmp_path / "out" / "pvalues.csv")
    assert set(pvalues["factor"]) == {"init"} and set(pvalues["fixed"]) == {"vanilla_kd"}


def test_empty_directory_exits_2_with_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as info:
        main([str(tmp_path / "empty")])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kdbench.report: error: no result.json")
