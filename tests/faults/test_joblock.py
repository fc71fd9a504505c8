"""Sweeps that share a folder: a job runs in one process at a time; a killed claimant's job is taken
over."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections import Counter

import pytest

from kdbench.runtime.joblock import claim

pytestmark = pytest.mark.slow


def test_a_held_claim_is_described_and_released(tmp_path):
    with claim(tmp_path) as mine:
        assert mine is None
        with claim(
            tmp_path
        ) as other:  # a second holder (here: a second open of the lock) is turned away
            assert other["pid"] == os.getpid() and other["host"] and other["since"]
    with claim(tmp_path) as again:
        assert again is None
    assert not (tmp_path / ".kdbench-claim.0.json").exists()


def test_a_killed_holder_s_claim_is_taken_over(tmp_path, caplog):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time, pathlib; from kdbench.runtime.joblock import claim\n"
                f"with claim(pathlib.Path({str(tmp_path)!r})):\n    print('held', flush=True); "
                "time.sleep(120)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    with claim(tmp_path) as other:
        assert other["pid"] == holder.pid
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with caplog.at_level(logging.WARNING, logger="kdbench"), claim(tmp_path) as mine:
        assert mine is None
    assert f"from pid {holder.pid}" in caplog.text and "which is gone" in caplog.text


def sweep(sweep_dir, glue, *extra):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kdbench.run",
            "-m",
            "+experiment=smoke_sweep",
            "seed=1,2,3",
            f"data.glue_dir={glue}",
            f"hydra.sweep.dir={sweep_dir}",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_sweeps_on_one_folder_run_every_job_exactly_once(tiny_glue, tmp_path):
    sweep_dir = tmp_path / "sweep"
    processes = [sweep(sweep_dir, tiny_glue), sweep(sweep_dir, tiny_glue)]
    outputs = [process.communicate(timeout=600) for process in processes]
    assert [p.returncode for p in processes] == [0, 0], [err[-2000:] for _, err in outputs]
    jobs = sorted(sweep_dir.glob("*seed=*"))
    assert len(jobs) == 6
    assert all(
        json.loads((job / "result.json").read_text())["status"] == "completed" for job in jobs
    )
    stdout = "".join(out for out, _ in outputs)
    assert stdout.count("record: ") == 6  # each job completed by one process only
    for job in jobs:  # and trained once: a second run would append its steps again
        steps = Counter(
            (row["stage"], row["step"]) for row in map(json.loads, (job / "train_log.jsonl").open())
        )
        assert max(steps.values()) == 1, job


def test_a_sweep_skips_the_job_another_process_holds(tiny_glue, tmp_path):
    sweep_dir = tmp_path / "sweep"
    held = sweep_dir / "objective=att_kl,seed=2"
    with claim(held):
        process = sweep(sweep_dir, tiny_glue, "objective=att_kl")
        out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-2000:]
    assert f"skipped: {held} is being run by pid {os.getpid()}" in out
    assert not (held / "result.json").exists()
    assert all(
        (sweep_dir / f"objective=att_kl,seed={seed}" / "result.json").exists() for seed in (1, 3)
    )
