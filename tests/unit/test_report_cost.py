"""The report's cost: the records' measured cost per point (task, teacher, student, objective,
init) beside the score over seeds, in cost.csv, the Cost section of tables.md and an
accuracy-vs-cost plot per task."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.report_helpers import read_csv, run_main, write_run


def cost(student_ms: float, teacher_ms: float = 8.0, params: int = 20_000_000) -> dict:
    return {
        "length": 24,
        "device": "cpu: test",
        "teacher": {
            "params": 110_000_000,
            "flops_per_example": 4.0e9,
            "latency_ms": teacher_ms,
            "throughput_per_s": 100.0,
        },
        "student": {
            "params": params,
            "flops_per_example": 1.0e9,
            "latency_ms": student_ms,
            "throughput_per_s": 400.0,
        },
        "speedup_latency": teacher_ms / student_ms,
        "speedup_throughput": 4.0,
    }


@pytest.fixture
def costed(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    for seed, (score, ms) in enumerate([(80.0, 2.0), (82.0, 4.0)], start=1):
        write_run(
            results,
            task="custom",
            objective="vanilla_kd",
            init="1,2,3",
            seed=seed,
            score=score,
            score_metric="accuracy",
            cost=cost(ms),
        )
        write_run(
            results,
            task="custom",
            objective="att_kl",
            init="1,2,3",
            seed=seed,
            score=score - 5,
            score_metric="accuracy",
            cost=cost(ms * 2),
        )
    write_run(
        results, task="custom", objective="hid_seq", init="1,2,3", seed=1, score=60.0
    )  # no cost
    return results


def test_cost_csv_has_one_row_per_point_with_seeds_as_spread(costed: Path):
    out = run_main(costed)
    table = read_csv(out / "cost.csv").set_index("objective")
    assert sorted(table.index) == ["att_kl", "vanilla_kd"]  # hid_seq measured no cost
    assert table.at["vanilla_kd", "mean"] == pytest.approx(81.0)
    assert table.at["vanilla_kd", "n"] == 2
    assert table.at["vanilla_kd", "std"] == pytest.approx(2**0.5)
    assert table.at["vanilla_kd", "student_latency_ms"] == pytest.approx(3.0)
    assert table.at["att_kl", "speedup_latency"] == pytest.approx((8 / 4 + 8 / 8) / 2)
    assert table.at["vanilla_kd", "teacher_score"] == pytest.approx(80.0)
    results = read_csv(out / "results.csv")
    assert {"student_params", "teacher_latency_ms", "speedup_throughput"} <= set(results.columns)


def test_tables_md_shows_the_cost_and_links_the_plot(costed: Path, tmp_path: Path):
    from kdbench.report.cli import main

    out = tmp_path / "report"
    assert main([str(costed), "--out", str(out)]) == 0
    text = (out / "tables.md").read_text()
    assert "## Cost" in text
    assert "| 20.00M / 110.00M | 1.000 / 4.000 | 3.00 / 8.00 | 3.00x | 4.00x |" in text
    assert "![accuracy vs cost](cost_custom.png)" in text
    assert (out / "cost_custom.png").stat().st_size > 0


def test_no_cost_section_without_measured_cost(tmp_path: Path):
    write_run(tmp_path / "results", seed=1)
    out = run_main(tmp_path / "results")
    assert "## Cost" not in (out / "tables.md").read_text() and not (out / "cost.csv").exists()
