"""Sweeps: Hydra multirun with the submitit_local launcher, job folders, skipping finished jobs, the report."""

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
    return subprocess.run([sys.executable, "-m", "kdbench.run", "-m", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


def test_submitit_local_sweep_writes_records_per_job_and_skips_finished_ones(tiny_glue, tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = ["hydra/launcher=submitit_local", "+experiment=smoke_sweep", "objective=att_kl", f"data.glue_dir={tiny_glue}",
            f"hydra.sweep.dir={sweep_dir}", "hydra.launcher.timeout_min=10"]
    result = sweep(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    records = sorted(sweep_dir.glob("*/result.json"))
    assert [p.parent.name for p in records] == ["objective=att_kl,seed=1", "objective=att_kl,seed=2"]
    first = [json.loads(p.read_text()) for p in records]
    assert all(r["status"] == "completed" and r["objective"] == "att_kl" for r in first)
    assert [r["seed"] for r in first] == [1, 2]

    again = sweep(*args, cwd=tmp_path)  # same sweep again: both jobs are already done
    assert again.returncode == 0, again.stderr[-3000:]
    assert [json.loads(p.read_text())["wall_s"] for p in records] == [r["wall_s"] for r in first]

    from kdbench.report import main as report_main

    report_main([str(sweep_dir), "--out", str(tmp_path / "report")])
    rows = (tmp_path / "report" / "results.csv").read_text().splitlines()
    assert len(rows) == 3  # header + two runs


def test_a_failed_job_is_recorded_and_the_sweep_goes_on(tiny_glue, tmp_path):
    sweep_dir = tmp_path / "sweep"
    result = sweep("+experiment=smoke_sweep", "seed=1", "task=sst2,stsb", "objective=hid_cls_contrast,att_kl",
                   f"data.glue_dir={tiny_glue}", f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path)
    assert result.returncode != 0  # the sweep reports its failure at the end...
    assert "needs a classification task" in result.stderr
    statuses = {p.parent.name: json.loads(p.read_text())["status"] for p in sweep_dir.glob("*/result.json")}
    # ...but every other job ran, and the refused one is on record as failed
    assert statuses == {"objective=att_kl,task=sst2,seed=1": "completed", "objective=att_kl,task=stsb,seed=1": "completed",
                        "objective=hid_cls_contrast,task=sst2,seed=1": "completed",
                        "objective=hid_cls_contrast,task=stsb,seed=1": "failed"}


def submitit_job_pids(folder: Path) -> list[int]:
    """The submitit_local job processes working for the sweep in `folder`."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "submitit.core._submit" in cmdline and str(folder) in cmdline:
            pids.append(int(proc.name))
    return pids


def test_a_preempted_submitit_job_checkpoints_is_requeued_and_resumes(tiny_glue, tmp_path):
    """submitit's pre-emption signal (USR2): kdbench checkpoints, submitit requeues, the requeued job resumes."""
    import signal
    import time

    from kdbench.run import run
    from tests.helpers import compose_config, tiny_overrides

    long = ("objective=att_kl", "trainer.stage1_epochs=8", "trainer.checkpoint_every=1000", "seed=1")
    reference = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "ref", *long)))
    sweep_dir = tmp_path / "sweep"
    args = ["hydra/launcher=submitit_local", "teacher=tiny", "student=tiny", "trainer=smoke", *long,
            f"data.glue_dir={tiny_glue}", f"hydra.sweep.dir={sweep_dir}", "hydra.launcher.timeout_min=30"]
    env = dict(os.environ, HYDRA_FULL_ERROR="0")
    sweep_proc = subprocess.Popen([sys.executable, "-m", "kdbench.run", "-m", *args], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    deadline = time.time() + 300
    log = next(iter(sweep_dir.glob("*/train_log.jsonl")), None)
    while time.time() < deadline and not (log and '"stage1"' in log.read_text()):
        time.sleep(0.1)
        log = next(iter(sweep_dir.glob("*/train_log.jsonl")), None)
    assert log is not None, "the job never reached stage 1"
    for pid in submitit_job_pids(sweep_dir):
        os.kill(pid, signal.SIGUSR2)
    _, stderr = sweep_proc.communicate(timeout=600)
    assert sweep_proc.returncode == 0, stderr[-3000:]
    job_logs = "".join(p.read_text() for p in sweep_dir.rglob("*_log.*"))
    assert "Requeued job" in job_logs  # submitit requeued it...
    assert "resuming from" in job_logs + (log.parent / "train_log.jsonl").read_text() + stderr
    record = json.loads((log.parent / "result.json").read_text())
    assert record["status"] == "completed"  # ...and the requeued job resumed and finished
    assert record["metrics"] == reference["metrics"]
