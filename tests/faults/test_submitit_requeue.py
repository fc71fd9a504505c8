"""Faults: a submitit job pre-empted mid-run (its USR2) checkpoints, is requeued by submitit, and
resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kdbench.job import run
from tests.helpers import agnostic_overrides, compose_config, tiny_overrides, write_tiny_corpus

pytestmark = pytest.mark.slow


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
    """submitit's pre-emption signal (USR2): kdbench checkpoints, submitit requeues, the requeued
    job resumes."""
    long = (
        "objective=att_kl",
        "stages.intermediate.epochs=8",
        "trainer.checkpoint_every=1000",
        "seed=1",
    )
    reference = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "ref", *long)))
    sweep_dir = tmp_path / "sweep"
    args = [
        "hydra/launcher=submitit_local",
        "teacher=tiny",
        "student=tiny",
        "trainer=smoke",
        *long,
        f"data.glue_dir={tiny_glue}",
        f"hydra.sweep.dir={sweep_dir}",
        "hydra.launcher.timeout_min=30",
    ]
    env = dict(os.environ, HYDRA_FULL_ERROR="0")
    sweep_proc = subprocess.Popen(
        [sys.executable, "-m", "kdbench.run", "-m", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    deadline = time.time() + 300
    log = next(iter(sweep_dir.glob("*/train_log.jsonl")), None)
    while time.time() < deadline and not (log and '"intermediate"' in log.read_text()):
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


def test_a_preempted_two_task_job_stops_together_and_resumes(tmp_path):
    """A data-parallel submitit job of two tasks: both stop at the same step, rank 0 checkpoints,
    submitit requeues the job, and both tasks resume from that checkpoint to the uninterrupted run's
    result."""
    corpus = write_tiny_corpus(tmp_path / "corpus")
    extra = [
        "objective=att_kl",
        "trainer.student_dropout=0.0",
        "stages.distillation.steps=300",
        "stages.distillation.eval_every=0",
        "trainer.checkpoint_every=100000",
    ]
    reference = run(compose_config(agnostic_overrides(corpus, tmp_path / "ref", *extra)))
    sweep_dir, job = tmp_path / "sweep", tmp_path / "job"
    args = [
        "hydra/launcher=submitit_local",
        "hydra.launcher.tasks_per_node=2",
        "hydra.launcher.timeout_min=30",
        f"hydra.sweep.dir={sweep_dir}",
        *agnostic_overrides(corpus, job, *extra),
    ]
    env = dict(os.environ, HYDRA_FULL_ERROR="0", OMP_NUM_THREADS="1")
    sweep_proc = subprocess.Popen(
        [sys.executable, "-m", "kdbench.run", "-m", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    log, deadline = job / "train_log.jsonl", time.time() + 300
    while time.time() < deadline and not (
        log.exists() and log.read_text().count('"distillation"') >= 5
    ):
        time.sleep(0.1)
    assert log.exists(), "the job never started distilling"
    pids = submitit_job_pids(sweep_dir)
    assert len(pids) == 2
    for pid in pids:
        os.kill(pid, signal.SIGUSR2)
    _, stderr = sweep_proc.communicate(timeout=600)
    assert sweep_proc.returncode == 0, stderr[-3000:]
    job_logs = "".join(p.read_text() for p in sweep_dir.rglob("*_log.*"))
    assert "Requeued job" in job_logs
    assert "resuming from" in job_logs + stderr
    record = json.loads((job / "result.json").read_text())
    assert record["status"] == "completed" and record["world_size"] == 2
    for name, value in reference["metrics"].items():
        assert record["metrics"][name] == pytest.approx(value, rel=1e-4, abs=1e-6), name
