"""kdbench.report inputs and CLI: exclusions, exit codes, output folder, plots, ``python -m``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kdbench.report.cli import main
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

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def three_objectives(tmp_path: Path) -> Path:
    return write_three_objectives(tmp_path / "results")


# ------------------------------------------------------------------------------------------- bad
# input / CLI


def test_failed_running_and_malformed_are_listed_not_counted(tmp_path: Path, capsys):
    results = tmp_path / "results"
    write_scores(results, {("rte", "att_kl", "4,8,12"): A, ("rte", "hid_mse", "4,8,12"): B})
    failed = write_run(
        results, name="f", status="failed", error="Traceback\n...\nRuntimeError: CUDA OOM"
    )
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
    assert (
        "missing key" in reasons["nokeys/result.json"] and "seed" in reasons["nokeys/result.json"]
    )

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


def test_a_study_s_sweep_dir_reports_its_jobs_and_lists_other_records_and_missing_jobs(
    tmp_path: Path, capsys
):
    """In the sweep dir of a study (its study_jobs.txt), a record of none of its jobs (an earlier
    run of other overrides) is listed as not_in_study, a job without a record as missing."""
    results = tmp_path / "results"
    for seed, score in ((1, 70.0), (2, 71.0)):
        write_run(results, name=f"objective=att_kl,seed={seed}", seed=seed, score=score)
    write_run(results, name="objective=att_kl,trainer.max_length=64,seed=1", score=10.0)
    jobs = "".join(f"objective=att_kl,seed={seed}\n" for seed in (1, 2, 3))
    (results / "study_jobs.txt").write_text(jobs)
    out = run_main(results)
    assert sorted(read_csv(out / "results.csv").score) == [70.0, 71.0]
    excluded = read_csv(out / "excluded.csv")
    assert dict(zip(excluded.path, excluded.kind, strict=True)) == {
        "objective=att_kl,trainer.max_length=64,seed=1/result.json": "not_in_study",
        "objective=att_kl,seed=3/result.json": "missing",
    }
    assert "1 missing, 1 not_in_study" in capsys.readouterr().out


@pytest.mark.parametrize("make", ["empty", "missing", "only_other_files"])
def test_main_exits_2_without_results(tmp_path: Path, capsys, make: str):
    target = tmp_path / "results"
    if make != "missing":
        target.mkdir()
    if make == "only_other_files":
        (target / "notes.txt").write_text("hi")
    with pytest.raises(SystemExit) as exc:
        main([str(target)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kdbench.report: error: ")
    expected = "does not exist" if make == "missing" else "no result.json found"
    assert expected in err[0]


@pytest.mark.parametrize("out", ["file", "file/report"])
def test_an_out_folder_that_cannot_be_one_is_one_line(
    three_objectives: Path, tmp_path: Path, capsys, out: str
):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as exc:
        main([str(three_objectives), "--out", str(tmp_path / out), "--no-plots"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1
    assert ("is a file, not a folder" if out == "file" else "a file; pass a folder") in err[0]


def test_main_exits_2_when_nothing_completed(tmp_path: Path, capsys):
    results = tmp_path / "results"
    write_run(results, status="running")
    with pytest.raises(SystemExit) as exc:
        main([str(results)])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert "running" in captured.out
    assert captured.err.startswith("kdbench.report: error: no completed run")


def test_default_out_is_inside_results_and_rerun_is_stable(three_objectives: Path):
    assert main([str(three_objectives), "--no-plots"]) == 0
    first = (three_objectives / "report" / "pvalues.csv").read_text()
    assert main([str(three_objectives), "--no-plots"]) == 0
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
    assert (
        "differences_task_specific_roberta_base_3x768.png" in pngs
    )  # every compared family in one figure
    assert len(pngs) == 2
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
