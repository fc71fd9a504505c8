"""Sweeps: Hydra multirun with the submitit_local launcher, job folders, skipping finished jobs, the
report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def sweep(*args, cwd: Path):
    env = dict(os.environ, HYDRA_FULL_ERROR="0")
    return subprocess.run(
        [sys.executable, "-m", "kdbench.run", "-m", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )


def test_submitit_local_sweep_writes_records_per_job_and_skips_finished_ones(tiny_glue, tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = [
        "hydra/launcher=submitit_local",
        "+experiment=smoke_sweep",
        "objective=att_kl",
        f"data.glue_dir={tiny_glue}",
        f"hydra.sweep.dir={sweep_dir}",
        "hydra.launcher.timeout_min=10",
    ]
    result = sweep(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    records = sorted(sweep_dir.glob("*/result.json"))
    assert [p.parent.name for p in records] == [
        "objective=att_kl,seed=1",
        "objective=att_kl,seed=2",
    ]
    first = [json.loads(p.read_text()) for p in records]
    assert all(r["status"] == "completed" and r["objective"] == "att_kl" for r in first)
    assert [r["seed"] for r in first] == [1, 2]

    again = sweep(*args, cwd=tmp_path)  # same sweep again: both jobs are already done
    assert again.returncode == 0, again.stderr[-3000:]
    assert [json.loads(p.read_text())["wall_s"] for p in records] == [r["wall_s"] for r in first]

    from kdbench.report.cli import main as report_main

    report_main([str(sweep_dir), "--out", str(tmp_path / "report")])
    rows = (tmp_path / "report" / "results.csv").read_text().splitlines()
    assert len(rows) == 3  # header + two runs


def test_a_failed_job_is_recorded_and_the_sweep_goes_on(tiny_glue, tmp_path):
    sweep_dir = tmp_path / "sweep"
    result = sweep(
        "+experiment=smoke_sweep",
        "seed=1",
        "task=sst2,stsb",
        "objective=hid_cls_contrast,att_kl",
        f"data.glue_dir={tiny_glue}",
        f"hydra.sweep.dir={sweep_dir}",
        cwd=tmp_path,
    )
    assert result.returncode != 0  # the sweep reports its failure at the end, in its line...
    assert "needs a classification task" in result.stderr.rsplit("Error executing job", 1)[1]
    assert "Traceback" not in result.stderr
    statuses = {
        p.parent.name: json.loads(p.read_text())["status"] for p in sweep_dir.glob("*/result.json")
    }
    # ...but every other job ran, and the refused one is on record as failed
    assert statuses == {
        "objective=att_kl,task=sst2,seed=1": "completed",
        "objective=att_kl,task=stsb,seed=1": "completed",
        "objective=hid_cls_contrast,task=sst2,seed=1": "completed",
        "objective=hid_cls_contrast,task=stsb,seed=1": "failed",
    }
