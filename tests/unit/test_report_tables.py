"""kdbench.report tables: the summary, results.csv, and the markdown and LaTeX tables."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kdbench.records.record import KEY_FIELDS, RunRecord
from kdbench.report.load import load_records
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


# ------------------------------------------------------------------------------------------------
# summary


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
    expected = set(KEY_FIELDS) | {"score", "accuracy", "f1", "path"}
    assert expected <= set(results.columns)
    assert (results["f1"] == results["score"] - 1.0).all()


def test_single_seed_cell_shows_mean_only(tmp_path: Path):
    results = tmp_path / "results"
    write_scores(
        results, {("rte", "att_kl", "4,8,12"): [70.0], ("rte", "hid_mse", "4,8,12"): [60.0]}
    )
    out = run_main(results)
    summary = read_csv(out / "summary.csv")
    assert summary.loc[summary.task == "rte", "std"].isna().all()
    md = (out / "tables.md").read_text()
    assert (
        "| att_kl | **70.0** |\n" in md and "| Objective | RTE |\n" in md
    )  # one task: no Avg column
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
    assert cells == [
        "hid_mse",
        "",
        f"{np.mean(C):.1f} ± {np.std(C, ddof=1):.1f}",
        "",
    ]  # MRPC and Avg blank


def test_task_columns_follow_paper_order_then_alphabetical(tmp_path: Path):
    results = tmp_path / "results"
    tasks = ["rte", "boolq", "cola", "mnli", "sst2", "axb"]
    write_scores(results, {(t, "att_kl", "4,8,12"): [70.0, 71.0] for t in tasks})
    md = (run_main(results) / "tables.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| Objective"))
    assert header == "| Objective | SST-2 | MNLI | RTE | CoLA | axb | boolq | Avg |"


def test_markdown_bolds_best_per_column(three_objectives: Path):
    md = (
        (run_main(three_objectives) / "tables.md").read_text().split("Cost (")[0]
    )  # the measured table
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
    assert "| Objective | Init | RTE |\n" in md
    assert (
        "| att_kl | 4,8,12 |" in md and "| att_kl | random |" in md and "| hid_mse | 4,8,12 |" in md
    )


# --------------------------------------------------------------------------------------------------
# LaTeX


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


def test_cost_beside_the_scores(tmp_path: Path):
    results = tmp_path / "results"
    for seed, (stage1, params) in enumerate([(10.0, 1000), (20.0, 1000), (30.0, 1000)], start=1):
        write_run(
            results,
            seed=seed,
            timing={
                "teacher_finetune_s": 0.0,
                "features_table_s": 2.0,
                "stage1_s": stage1,
                "eval_s": 1.0,
            },
            student_parameters=params,
        )
    write_run(results, objective="hid_cls", seed=1, timing={"stage1_s": 5.0})
    md = (run_main(results) / "tables.md").read_text()
    assert (
        "| Objective | Init | Student parameters | Jobs | Wall s per job | teacher_finetune s | "
        "features_table s | stage1 s | eval s |" in md
    )
    assert "| att_kl | 4,8,12 | 1,000 | 3 | 23.0 | 0.0 | 2.0 | 20.0 | 1.0 |" in md
    assert "| hid_cls | 4,8,12 |  | 1 | 5.0 |  |  | 5.0 |  |" in md


def test_wall_time_sums_durations_and_never_rates(tmp_path: Path):
    """A record that keeps durations and rates in one ``timing``: its wall time is the sum of its
    seconds, its rates are shown as rates."""
    results = tmp_path / "results"
    mixed = {"stage1_s": 10.0, "stage1_examples_per_s": 400.0, "eval_s": 2.0}
    write_run(results, seed=1, timing=mixed)
    write_run(results, seed=2, timing=mixed, wall_s=15.0)  # the record's own wall time wins
    write_run(results, seed=3, timing={"stage1_s": 10.0}, throughput={"stage1_examples_per_s": 5.0})
    records = {r["seed"]: r for r in load_records(results).records}
    assert [records[seed]["wall_s"] for seed in (1, 2, 3)] == [12.0, 15.0, 10.0]
    assert records[1]["timing"] == {"stage1_s": 10.0, "eval_s": 2.0}
    assert records[1]["throughput"] == records[2]["throughput"] == {"stage1_examples_per_s": 400.0}
    md = (run_main(results) / "tables.md").read_text()
    assert "| Wall s per job | stage1 s | eval s | stage1 examples/s |" in md
    assert "| att_kl | 4,8,12 |  | 3 | 12.0 | 10.0 | 2.0 | 400.0 |" in md
    assert "examples_per" not in md


def test_a_completed_record_keeps_rates_apart_from_seconds():
    outcome = {
        "metrics": {"accuracy": 80.0},
        "timing": {"stage1_s": 3.0, "stage1_examples_per_s": 90.0, "eval_s": 1.0},
        "student_parameters": 7,
    }
    record = RunRecord("task_specific", "sst2", "t", "s", "2,4", "every_kth", "att_kl", 1)
    written = record.completed(outcome, 5.0, {}).as_json()
    assert written["timing"] == {"stage1_s": 3.0, "eval_s": 1.0}
    assert written["throughput"] == {"stage1_examples_per_s": 90.0}
    assert list(written).index("throughput") == list(written).index("timing") + 1
    again = RunRecord.from_json(written)
    assert again.durations == {"stage1_s": 3.0, "eval_s": 1.0}
    assert again.throughputs == {"stage1_examples_per_s": 90.0}
