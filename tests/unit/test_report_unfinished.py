"""kdbench.report on a sweep whose jobs did not all finish: each job a Hydra sweep names without a
record (never started, or ended before its first), and each record left `running` by a killed
process, is an exclusion that says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kdbench.report.cli import main
from kdbench.runtime.joblock import claim
from tests.unit.report_helpers import read_csv, run_main, write_run

# Hydra's multirun.yaml as a sweep of `kdbench.run -m` leaves it (the keys the report reads)
MULTIRUN = """\
hydra:
  sweep:
    dir: {sweep_dir}
    subdir: ${{kdbench_job_dir:${{hydra.job.override_dirname}},${{seed}}}}
  sweeper:
    _target_: hydra._internal.core_plugins.basic_sweeper.BasicSweeper
    params:
      objective: att_kl,hid_mse
      seed: 1,2
  overrides:
    task:
    - data.glue_dir=/data/glue
  job:
    config:
      override_dirname:
        kv_sep: '='
        item_sep: ','
        exclude_keys: [seed, data.glue_dir]
seed: 1
"""


def kinds_and_reasons(out: Path) -> dict[str, tuple[str, str]]:
    excluded = read_csv(out / "excluded.csv")
    return {
        path: (kind, reason) for path, kind, reason in excluded[["path", "kind", "reason"]].values
    }


def test_a_sweep_s_jobs_without_a_record_are_missing_and_say_whether_they_started(
    tmp_path: Path, capsys
):
    sweep = tmp_path / "sweep"
    for objective, seed in (("att_kl", 1), ("att_kl", 2), ("hid_mse", 1)):
        write_run(sweep, name=f"objective={objective},seed={seed}", objective=objective, seed=seed)
    (sweep / "objective=att_kl,seed=2" / "result.json").unlink()  # died before its first record
    (sweep / "objective=att_kl,seed=2" / ".hydra").mkdir()
    (sweep / "multirun.yaml").write_text(MULTIRUN.format(sweep_dir=sweep))
    out = run_main(sweep)
    assert len(read_csv(out / "results.csv")) == 2
    excluded = kinds_and_reasons(out)
    assert excluded.keys() == {
        "objective=att_kl,seed=2/result.json",
        "objective=hid_mse,seed=2/result.json",
    }
    kind, reason = excluded["objective=att_kl,seed=2/result.json"]
    assert kind == "missing" and "started but failed or was killed" in reason
    kind, reason = excluded["objective=hid_mse,seed=2/result.json"]
    assert kind == "missing" and "never started" in reason
    assert "2 missing" in capsys.readouterr().out


def running_job(sweep: Path, holder: dict | None) -> Path:
    """A job whose record says running, its claim's lock free, its holder's file as `holder`
    left it."""
    record = write_run(sweep, name="objective=att_kl,seed=2", seed=2, status="running")
    (record.parent / ".kdbench-claim.0.lock").touch()
    if holder is not None:
        (record.parent / ".kdbench-claim.0.json").write_text(json.dumps(holder))
    return record.parent


def test_a_running_record_whose_claim_is_free_is_killed_and_names_its_process(tmp_path: Path):
    sweep = tmp_path / "sweep"
    write_run(sweep, name="objective=att_kl,seed=1")
    running_job(sweep, {"host": "node07", "pid": 4242, "since": "2025-01-01T00:00:00Z"})
    kind, reason = kinds_and_reasons(run_main(sweep))["objective=att_kl,seed=2/result.json"]
    assert kind == "killed"
    assert "pid 4242 on node07" in reason and "re-run the sweep to resume it" in reason


def test_a_running_record_whose_claim_is_held_names_the_process_running_it(tmp_path: Path):
    sweep = tmp_path / "sweep"
    write_run(sweep, name="objective=att_kl,seed=1")
    job = running_job(sweep, None)
    with claim(job) as taken:
        assert taken is None
        kind, reason = kinds_and_reasons(run_main(sweep))["objective=att_kl,seed=2/result.json"]
    assert kind == "running" and "being run by pid" in reason


def test_a_sweep_without_any_record_lists_its_jobs_and_exits_2(tmp_path: Path, capsys):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text(MULTIRUN.format(sweep_dir=sweep))
    with pytest.raises(SystemExit) as exc:
        main([str(sweep), "--out", str(tmp_path / "out"), "--no-plots"])
    assert exc.value.code == 2
    assert "4 missing" in capsys.readouterr().out
    assert len(read_csv(tmp_path / "out" / "excluded.csv")) == 4


def sweep_of(tmp_path: Path, runs: dict[tuple[str, int], str]) -> Path:
    """The MULTIRUN sweep with a record of status `runs[(objective, seed)]` for each listed job
    (the others wrote none)."""
    sweep = tmp_path / "sweep"
    for (objective, seed), status in runs.items():
        name = f"objective={objective},seed={seed}"
        write_run(sweep, name=name, objective=objective, seed=seed, status=status)
    (sweep / "multirun.yaml").write_text(MULTIRUN.format(sweep_dir=sweep))
    return sweep


def test_a_missing_job_s_row_has_its_cell_s_key_fields_and_its_folder_s_seed(tmp_path: Path):
    done, failed = "completed", "failed"
    sweep = sweep_of(tmp_path, {("att_kl", 1): done, ("att_kl", 2): done, ("hid_mse", 1): failed})
    excluded = read_csv(run_main(sweep) / "excluded.csv").set_index("path")
    row = excluded.loc["objective=hid_mse,seed=2/result.json"]
    assert row["kind"] == "missing"
    assert (row["setting"], row["task"], row["objective"], row["init"], row["seed"]) == (
        "task_specific",
        "rte",
        "hid_mse",
        "4,8,12",
        2,
    )


def test_a_cell_of_the_design_without_a_score_shows_a_dash_and_what_its_jobs_lack(
    tmp_path: Path,
):
    done, failed = "completed", "failed"
    sweep = sweep_of(tmp_path, {("att_kl", 1): done, ("att_kl", 2): done, ("hid_mse", 1): failed})
    out = run_main(sweep)
    tables = (out / "tables.md").read_text()
    assert "| hid_mse | — |" in tables
    assert "hid_mse on RTE lacks 2 of 2 (1 failed, 1 missing); —: no completed run." in tables
    assert "hid\\_mse & --- \\\\" in (out / "tables.tex").read_text()


def test_the_page_says_what_a_cell_without_a_score_lacks_as_tables_md_does(tmp_path: Path):
    done, failed = "completed", "failed"
    sweep = sweep_of(tmp_path, {("att_kl", 1): done, ("att_kl", 2): done, ("hid_mse", 1): failed})
    out = run_main(sweep)
    note = "hid_mse on RTE lacks 2 of 2 (1 failed, 1 missing); —: no completed run."
    assert note in (out / "tables.md").read_text()
    page = (out / "report.html").read_text(encoding="utf-8")
    assert (
        "<td>—</td>" in page
        and f"Seeds of the design without a score (Excluded runs): {note}" in page
    )


def test_a_cell_short_of_the_design_s_seeds_says_how_many_it_lacks_and_why(tmp_path: Path):
    done = "completed"
    sweep = sweep_of(tmp_path, {("att_kl", 1): done, ("hid_mse", 1): done, ("hid_mse", 2): done})
    tables = (run_main(sweep) / "tables.md").read_text()
    assert "| att_kl | **70.0** (n=1) |" in tables
    note = "n = 2 seeds per cell unless marked (n=k). Seeds of the design without a score"
    assert note + " (Excluded runs): att_kl on RTE lacks 1 of 2 (1 missing)._" in tables


def test_a_failed_record_of_no_sweep_adds_no_cell_to_the_tables(tmp_path: Path):
    results = tmp_path / "runs"
    write_run(results, objective="att_kl", seed=1)
    write_run(results, objective="hid_mse", seed=1, status="failed")
    tables = (run_main(results) / "tables.md").read_text()
    assert "| hid_mse |" not in tables and "without a score" not in tables


def test_a_group_of_the_design_without_a_completed_run_has_a_table_of_dashes(tmp_path: Path):
    sweep = tmp_path / "sweep"
    for student, status in (("3x768", "completed"), ("6x768", "failed")):
        for seed in (1, 2):
            name = f"model.student={student},seed={seed}"
            write_run(sweep, name=name, student=student, seed=seed, status=status)
    multirun = MULTIRUN.format(sweep_dir=sweep)
    (sweep / "multirun.yaml").write_text(
        multirun.replace("objective: att_kl,hid_mse", "model.student: 3x768,6x768")
    )
    out = run_main(sweep, "--paper", plots=True)
    title = "setting task_specific, teacher roberta_base, student 6x768, init 4,8,12"
    note = "att_kl on RTE lacks 2 of 2 (2 failed); —: no completed run."
    tables = (out / "tables.md").read_text()
    assert f"## {title}\n\n| Objective | RTE |\n|---|---:|\n| att_kl | — |\n\n_Seeds" in tables
    assert note in tables
    page = (out / "report.html").read_text(encoding="utf-8")
    assert f'<h2>{title}</h2>\n<p class="meta">0 runs.</p>' in page and note in page
    assert not list(out.glob("scores_*6x768*.png"))
