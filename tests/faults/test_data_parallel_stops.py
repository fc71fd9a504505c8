"""Faults: a stop signal in a data-parallel run (two gloo processes started as srun starts a job's
tasks) ends every process at the same point, with the record saying stopped, wherever each one was
when its signal came."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from kdbench.training.signals import TEST_DELAY_ENV
from tests.helpers import agnostic_overrides, free_port, write_tiny_corpus

ENDED_WITHIN_S = 60


@pytest.mark.parametrize("phase", ["loaders", "heldout"])  # the held-out: at step 0
def test_a_stop_while_one_process_is_still_in_a_phase_stops_both(tmp_path, phase):
    """Rank 0 is through the phase (building its loaders, its share of a held-out evaluation: at
    its next collective operation) while rank 1 is still in it; SIGTERM reaches both, as SLURM
    sends it: both stop, exit 0, and the record says stopped (not a failure of rank 0's collective
    operation with a process that left)."""
    overrides = agnostic_overrides(write_tiny_corpus(tmp_path / "corpus"), tmp_path / "run")
    env = dict(
        os.environ,
        WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        KDBENCH_CACHE=str(tmp_path / "cache"),
        OMP_NUM_THREADS="1",
    )
    marker = tmp_path / f"rank1-in-{phase}"
    delays = (f"{phase}:0:{tmp_path / f'rank0-in-{phase}'}", f"{phase}:3:{marker}")
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "kdbench.run", *overrides],
            env=env | {"RANK": str(rank), "LOCAL_RANK": str(rank), TEST_DELAY_ENV: delay},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank, delay in enumerate(delays)
    ]
    try:
        deadline = time.time() + 120
        while not marker.exists() and processes[1].poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert marker.exists(), processes[1].communicate()[1][-2000:]
        time.sleep(0.5)  # rank 0, without a delay, is at its first collective operation
        for process in processes:
            process.send_signal(signal.SIGTERM)
        ended = [process.communicate(timeout=ENDED_WITHIN_S) for process in processes]
    finally:
        for process in processes:
            process.kill()
    assert [process.returncode for process in processes] == [0, 0], [e[1][-2000:] for e in ended]
    assert f"stopped by a signal in {phase}" in ended[1][1]
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    assert record["status"] == "stopped", record.get("error")
