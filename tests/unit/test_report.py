"""Unit tests for kdbench.report: synthetic result.json files with known values."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from kdbench import report

SRC = Path(__file__).resolve().parents[2] / "src"


def write_run(
    root: Path,
    *,
    task: str = "rte",
    objective: str = "att_kl",
    init: str = "4,8,12",
    seed: int = 1,
    score: float = 70.0,
    status: str = "completed",
    setting: str = "task_specific",
    teacher: str = "roberta_base",
    student: str = "3x768",
    name: str | None = None,
    **extra,
) -> Path:
    """Write one result.json (nested a few levels deep, like real runs) and return its path."""
    folder = root / name if name is not None else root / setting / f"{teacher}-{student}" / task
    if name is None:
        folder = folder / objective / init.replace(",", "-") / f"seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "schema": 1,
        "status": status,
        "setting": setting,
        "task": task,
        "teacher": teacher,
        "student": student,
        "init": init,
        "objective": objective,
        "seed": seed,
        "metrics": {"accuracy": score, "f1": None if score is None else score - 1.0},
        "score": score,
        "teacher_metrics": {"accuracy": 80.0},
        "timing": {"train_s": 1.0},
        "config": {},
    }
    record.update(extra)
    path = folder / "result.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    return path


def write_scores(root: Path, scores: dict[tuple[str, str, str], list[float | None]], **common) -> None:
    """scores[(task, objective, init)] = per-seed scores (seed = position + 1; None = no run)."""
    for (task, objective, init), values in scores.items():
        for i, value in enumerate(values):
            if value is not None:
                write_run(root, task=task, objective=objective, init=init, seed=i + 1, score=value, **common)


def run_main(results: Path, *extra: str, plots: bool = False) -> Path:
    out = results.parent / "out"
    args = [str(results), "--out", str(out), *extra] + ([] if plots else ["--no-plots"])
    assert report.main(args) == 0
    return out


def read_csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=True, dtype={"init": str, "fixed": str})


A = [70.0, 71.5, 73.0, 69.0]
B = [68.0, 70.0, 70.5, 69.5]
C = [65.0, 66.0, 64.0, 66.5]


@pytest.fixture
def three_objectives(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    write_scores(
        results,
        {
            ("rte", "att_kl", "4,8,12"): A,
            ("rte", "hid_mse", "4,8,12"): B,
            ("rte", "logit_kl", "4,8,12"): C,
            ("mrpc", "att_kl", "4,8,12"): [80.0, 81.0, 79.5, 82.0],
            ("mrpc", "hid_mse", "4,8,12"): [79.0, 80.5, 80.0, 80.0],
            ("mrpc", "logit_kl", "4,8,12"): [75.0, 76.0, 74.0, 75.5],
        },
    )
    return results


# ------------------------------------------------------------------------------------------------ summary


def test_summary_mean_and_std_equal_numpy(three_objectives: Path):
    out = run_main(three_objectives)
    summary = read_csv(out / "summary.csv")
    row = summary[(summary.task == "rte") & (summary.objective == "att_kl")].iloc[0]
    assert row["mean"] == pytest.approx(np.mean(A))
    assert row["std"] == pytest.approx(np.std(A, ddof=1))
    assert row["n"] == 4
    avg = summary[(summary.task == "Avg") & (summary.objective == "att_kl")].iloc[0]
    assert avg["mean"] == pytest.approx((np.mean(A) + np.mean([80.0, 81.0, 79.5, 82.0])) / 2)
    assert math.isnan(avg["std"])


def test_results_csv_has_one_row_per_run_and_metric_columns(three_objectives: Path):
    out = run_main(three_objectives)
    results = read_csv(out / "results.csv")
    assert len(results) == 24
    expected = set(report.KEY_COLS) | {"score", "accuracy", "f1", "path"}
    assert expected <= set(results.columns)
    assert (results["f1"] == results["score"] - 1.0).all()


def test_single_seed_cell_shows_mean_only(tmp_path: Path):
    results = tmp_path / "results"
    write_scores(results, {("rte", "att_kl", "4,8,12"): [70.0], ("rte", "hid_mse", "4,8,12"): [60.0]})
    out = run_main(results)
    summary = read_csv(out / "summary.csv")
    assert summary.loc[summary.task == "rte", "std"].isna().all()
    md = (out / "tables.md").read_text()
    assert "| att_kl | **70.0** | **70.0** |" in md
    assert "±" not in md.split("## ")[1].split("\n\n")[1]
    assert "n = 1 seed per cell" in md


def test_n_footnote_uniform_and_marked(tmp_path: Path, three_objectives: Path):
    md = (run_main(three_objectives) / "tables.md").read_text()
    assert "n = 4 seeds per cell." in md
    assert "(n=" not in md

    results = tmp_path / "uneven"
    write_scores(results, {("rte", "att_kl", "4,8,12"): A, ("rte", "hid_mse", "4,8,12"): B[:3]})
    md = (run_main(results) / "tables.md").read_text()
    assert "unless marked (n=k)" in md
    hid_row = next(line for line in md.splitlines() if line.startswith("| hid_mse"))
    assert "(n=3)" in hid_row


def test_avg_blank_when_row_misses_a_task(tmp_path: Path):
    results = tmp_path / "results"
    write_scores(
        results,
        {
            ("rte", "att_kl", "4,8,12"): A,
            ("mrpc", "att_kl", "4,8,12"): B,
            ("rte", "hid_mse", "4,8,12"): C,
        },
    )
    out = run_main(results)
    summary = read_csv(out / "summary.csv")
    avg = summary[summary.task == "Avg"]
    assert list(avg.objective) == ["att_kl"]
    md = (out / "tables.md").read_text()
    hid_row = next(line for line in md.splitlines() if line.startswith("| hid_mse"))
    cells = [c.strip() for c in hid_row.split("|")[1:-1]]
    assert cells == ["hid_mse", "", f"{np.mean(C):.1f} ± {np.std(C, ddof=1):.1f}", ""]  # MRPC and Avg blank


def test_task_columns_follow_paper_order_then_alphabetical(tmp_path: Path):
    results = tmp_path / "results"
    tasks = ["rte", "boolq", "cola", "mnli", "sst2", "axb"]
    write_scores(results, {(t, "att_kl", "4,8,12"): [70.0, 71.0] for t in tasks})
    md = (run_main(results) / "tables.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| Objective"))
    assert header == "| Objective | CoLA | SST-2 | MNLI | RTE | axb | boolq | Avg |"


def test_markdown_bolds_best_per_column(three_objectives: Path):
    md = (run_main(three_objectives) / "tables.md").read_text()
    lines = [line for line in md.splitlines() if line.startswith("| ") and "---" not in line]
    rows = {line.split(" | ")[0][2:]: line for line in lines}
    # columns: Objective | MRPC | RTE | Avg ; att_kl is best everywhere
    assert rows["att_kl"].count("**") == 6
    assert "**" not in rows["hid_mse"] and "**" not in rows["logit_kl"]
    best_rte = f"**{np.mean(A):.1f} ± {np.std(A, ddof=1):.1f}**"
    assert best_rte in rows["att_kl"]


def test_init_rows_appear_when_init_varies(tmp_path: Path, three_objectives: Path):
    md = (run_main(three_objectives) / "tables.md").read_text()
    assert "| Objective | MRPC | RTE | Avg |" in md
    assert "init 4,8,12" in md  # the single init is named in the title instead

    results = tmp_path / "inits"
    write_scores(
        results,
        {
            ("rte", "att_kl", "4,8,12"): A,
            ("rte", "att_kl", "random"): C,
            ("rte", "hid_mse", "4,8,12"): B,
        },
    )
    md = (run_main(results) / "tables.md").read_text()
    assert "| Objective | Init | RTE | Avg |" in md
    assert "| att_kl | 4,8,12 |" in md and "| att_kl | random |" in md and "| hid_mse | 4,8,12 |" in md


# -------------------------------------------------------------------------------------------------- LaTeX


def _tex_rows(tex: str) -> list[str]:
    rows, inside = [], False
    for line in tex.splitlines():
        if line.startswith("\\begin{tabular}"):
            inside = True
        elif line.startswith("\\end{tabular}"):
            inside = False
        elif inside and line not in ("\\toprule", "\\midrule", "\\bottomrule"):
            rows.append(line)
    return rows


def test_latex_table_is_well_formed(tmp_path: Path):
    results = tmp_path / "results"
    write_scores(
        results,
        {
            ("rte", "att_kl+50%&x", "4,8,12"): A,
            ("rte", "att_kl+50%&x", "random"): B,
            ("mrpc", "att_kl+50%&x", "4,8,12"): C,
            ("rte", "hid_mse", "4,8,12"): C,
        },
        teacher="bert_base",
    )
    tex = (run_main(results) / "tables.tex").read_text()
    assert tex.count("\\begin{tabular}") == tex.count("\\end{tabular}") == 1
    assert "\\toprule" in tex and "\\midrule" in tex and "\\bottomrule" in tex
    spec = re.search(r"\\begin\{tabular\}\{([a-z]+)\}", tex).group(1)
    rows = _tex_rows(tex)
    assert len(rows) == 1 + 3  # header + (objective, init) rows
    for row in rows:
        assert len(re.findall(r"(?<!\\)&", row)) == len(spec) - 1, row
        assert row.endswith("\\\\")
    assert "att\\_kl+50\\%\\&x" in tex
    assert "bert\\_base" in tex
    assert "$\\pm$" in tex and "±" not in tex
    assert "\\textbf{" in tex


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not on PATH")
def test_latex_compiles(three_objectives: Path, tmp_path: Path):
    out = run_main(three_objectives)
    doc = tmp_path / "doc.tex"
    doc.write_text(
        "\\documentclass{article}\\usepackage{booktabs}\\begin{document}"
        f"\\input{{{(out / 'tables.tex').as_posix()}}}\\end{{document}}\n"
    )
    proc = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]


# --------------------------------------------------------------------------------------------- statistics


def test_holm_by_hand():
    assert report.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert report.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1, monotone
    adjusted = report.holm([0.01, float("nan"), 0.04])  # NaN does not count in m
    assert adjusted[0] == pytest.approx(0.02) and adjusted[2] == pytest.approx(0.04)
    assert math.isnan(adjusted[1])
    assert np.isnan(report.holm([float("nan")])).all()


def test_paired_t_and_p_equal_scipy(three_objectives: Path):
    out = run_main(three_objectives)
    pv = read_csv(out / "pvalues.csv")
    assert list(pv.columns) == report.PVALUE_COLS
    rte = pv[(pv.task == "rte") & (pv.factor == "objective")]
    assert len(rte) == 3
    cases = [("att_kl", "hid_mse", A, B), ("att_kl", "logit_kl", A, C), ("hid_mse", "logit_kl", B, C)]
    for a, b, xs, ys in cases:
        row = rte[(rte.a == a) & (rte.b == b)].iloc[0]
        expected = stats.ttest_rel(xs, ys)
        assert row.t == pytest.approx(expected.statistic)
        assert row.p == pytest.approx(expected.pvalue)
        assert row.n_pairs == 4
        assert row.mean_a == pytest.approx(np.mean(xs)) and row.mean_b == pytest.approx(np.mean(ys))
        assert row.fixed == "4,8,12"
    expected_holm = report.holm(rte.p.to_numpy())
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
        results, {("rte", "att_kl", "4,8,12"): [70.0, 71.0], ("rte", "hid_mse", "4,8,12"): [None, 69.0, 68.0]}
    )
    out = run_main(results)
    pv = read_csv(out / "pvalues.csv")
    rte = pv[pv.task == "rte"].iloc[0]
    assert rte.n_pairs == 1
    assert math.isnan(rte.t) and math.isnan(rte.p) and math.isnan(rte.p_holm)
    assert rte.mean_a == 71.0 and rte.mean_b == 69.0
    raw = (out / "pvalues.csv").read_text().splitlines()
    assert any(line.endswith(",1,71.0,69.0,,,") for line in raw)

    unmatched = read_csv(out / "unmatched.csv")
    assert list(unmatched.columns) == report.UNMATCHED_COLS
    got = set(unmatched[["task", "a", "b", "missing_side", "seed"]].itertuples(index=False, name=None))
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
    assert math.isnan(rte.loc[("att_kl", "copy"), "p"]) and math.isnan(rte.loc[("att_kl", "copy"), "p_holm"])
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
    assert set(objective_rows.fixed) == {"4,8,12"}  # 'random' has one objective only: nothing to compare


def test_significance_lists_non_significant_pairs(three_objectives: Path):
    text = (run_main(three_objectives) / "significance.md").read_text()
    pv = report.paired_tests(report.to_frame(report.load_records(three_objectives).records))
    rte = pv[(pv.task == "rte")].set_index(["a", "b"])
    assert rte.loc[("att_kl", "hid_mse"), "p_holm"] >= 0.05  # sanity of the fixture
    rte_line = next(line for line in text.splitlines() if line.startswith("- rte:"))
    assert "att_kl vs hid_mse" in rte_line
    assert "| | att_kl | hid_mse | logit_kl |" in text  # the ALL matrix


# ------------------------------------------------------------------------------------------- bad input / CLI


def test_failed_running_and_malformed_are_listed_not_counted(tmp_path: Path, capsys):
    results = tmp_path / "results"
    write_scores(results, {("rte", "att_kl", "4,8,12"): A, ("rte", "hid_mse", "4,8,12"): B})
    failed = write_run(results, name="f", status="failed", error="Traceback\n...\nRuntimeError: CUDA OOM")
    running = write_run(results, name="r", status="running", objective="hid_mse", seed=9, score=1.0)
    (results / "bad").mkdir()
    (results / "bad" / "result.json").write_text("{not json")
    (results / "nokeys").mkdir()
    nokeys = {"schema": 1, "status": "completed", "task": "rte"}
    (results / "nokeys" / "result.json").write_text(json.dumps(nokeys))
    capsys.readouterr()
    out = run_main(results)
    printed = capsys.readouterr().out
    assert "12 result.json file(s)" in printed and "8 completed" in printed
    for rel in ["f/result.json", "r/result.json", "bad/result.json", "nokeys/result.json"]:
        assert rel in printed
    assert failed.exists() and running.exists()
    assert "RuntimeError: CUDA OOM" in printed

    excluded = read_csv(out / "excluded.csv")
    kinds = dict(zip(excluded.path, excluded.kind, strict=True))
    assert kinds == {
        "f/result.json": "failed",
        "r/result.json": "running",
        "bad/result.json": "skipped",
        "nokeys/result.json": "skipped",
    }
    reasons = dict(zip(excluded.path, excluded.reason, strict=True))
    assert "invalid JSON" in reasons["bad/result.json"]
    assert "missing key" in reasons["nokeys/result.json"] and "seed" in reasons["nokeys/result.json"]

    assert len(read_csv(out / "results.csv")) == 8
    summary = read_csv(out / "summary.csv")
    assert summary[(summary.task == "rte") & (summary.objective == "hid_mse")].n.iloc[0] == 4
    assert "r/result.json" in (out / "tables.md").read_text()


def test_duplicate_runs_use_the_first(tmp_path: Path):
    results = tmp_path / "results"
    write_scores(results, {("rte", "att_kl", "4,8,12"): A})
    write_run(results, name="zz_again", seed=1, score=0.0)
    out = run_main(results)
    assert len(read_csv(out / "results.csv")) == 4
    excluded = read_csv(out / "excluded.csv")
    assert list(excluded.kind) == ["duplicate"]


@pytest.mark.parametrize("make", ["empty", "missing", "only_other_files"])
def test_main_exits_2_without_results(tmp_path: Path, capsys, make: str):
    target = tmp_path / "results"
    if make != "missing":
        target.mkdir()
    if make == "only_other_files":
        (target / "notes.txt").write_text("hi")
    with pytest.raises(SystemExit) as exc:
        report.main([str(target)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kdbench.report: error: ")
    expected = "does not exist" if make == "missing" else "no result.json found"
    assert expected in err[0]


def test_main_exits_2_when_nothing_completed(tmp_path: Path, capsys):
    results = tmp_path / "results"
    write_run(results, status="running")
    with pytest.raises(SystemExit) as exc:
        report.main([str(results)])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert "running" in captured.out
    assert captured.err.startswith("kdbench.report: error: no completed run")


def test_default_out_is_inside_results_and_rerun_is_stable(three_objectives: Path):
    assert report.main([str(three_objectives), "--no-plots"]) == 0
    first = (three_objectives / "report" / "pvalues.csv").read_text()
    assert report.main([str(three_objectives), "--no-plots"]) == 0
    assert (three_objectives / "report" / "pvalues.csv").read_text() == first
    assert not list((three_objectives / "report").glob("*.png"))


def test_plots_are_non_empty_png(tmp_path: Path):
    results = tmp_path / "results"
    write_scores(
        results,
        {
            ("rte", "att_kl", "4,8,12"): A,
            ("rte", "att_kl", "random"): C,
            ("rte", "hid/mse", "4,8,12"): B,
            ("mrpc", "att_kl", "4,8,12"): B,
        },
    )
    out = run_main(results, plots=True)
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert "scores_task_specific_roberta_base_3x768.png" in pngs
    assert "pvalues_task_specific_roberta_base_3x768_objective_4-8-12.png" in pngs
    assert "pvalues_task_specific_roberta_base_3x768_init_att_kl.png" in pngs
    for name in pngs:
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000
        assert re.fullmatch(r"[A-Za-z0-9._+-]+", name)


def test_python_dash_m_entry_point(three_objectives: Path, tmp_path: Path):
    args = [str(three_objectives), "--out", str(tmp_path / "o"), "--no-plots"]
    proc = subprocess.run(
        [sys.executable, "-m", "kdbench.report", *args],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "24 completed" in proc.stdout
    assert (tmp_path / "o" / "tables.tex").exists()


def test_task_agnostic_distillation_records_are_listed_not_scored(tmp_path: Path):
    results = tmp_path / "results"
    write_scores(results, {("rte", "att_kl", "4,8,12"): A, ("rte", "hid_mse", "4,8,12"): B})
    distil = {"setting": "task_agnostic", "task": None, "score": None}
    write_run(results, name="distil", metrics={"heldout_loss": 2.5}, **distil)
    write_run(results, name="distil_bad", metrics=None, **distil)
    out = run_main(results)
    excluded = read_csv(out / "excluded.csv")
    assert sorted(excluded.kind) == ["distillation", "distillation"]
    assert "held-out loss 2.5" in excluded[excluded.path == "distil/result.json"].reason.iloc[0]
    assert len(read_csv(out / "results.csv")) == 8


def test_fine_tuning_grid_keeps_the_best_point(tmp_path: Path):
    results = tmp_path / "results"
    for i, (lr, score) in enumerate([(1e-5, 60.0), (3e-5, 66.0), (5e-5, 63.0)]):
        write_run(results, name=f"grid{i}", seed=1, score=score, grid={"lr": lr, "batch_size": 32})
    write_run(results, name="other_seed", seed=2, score=64.0, grid={"lr": 1e-5, "batch_size": 32})
    out = run_main(results)
    runs = read_csv(out / "results.csv")
    assert sorted(zip(runs.seed, runs.score)) == [(1, 66.0), (2, 64.0)]
    assert runs[runs.seed == 1].grid.iloc[0] == "lr=3e-05,batch_size=32"
    excluded = read_csv(out / "excluded.csv")
    assert list(excluded.kind) == ["grid", "grid"]
    assert set(excluded.path) == {"grid0/result.json", "grid2/result.json"}
