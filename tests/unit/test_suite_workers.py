"""`make test` runs the suite in pytest-xdist workers (tests/conftest.py gives each its share of
the cores)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch


def test_a_test_worker_and_the_processes_it_starts_do_not_oversubscribe_the_cores():
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers == 1:
        pytest.skip("the suite runs in one process here: no cores are shared")
    child = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        capture_output=True,
        text=True,
        check=True,
    )
    cores = max(os.cpu_count() or 1, workers)
    for threads in (torch.get_num_threads(), int(child.stdout)):
        assert 1 <= threads and threads * workers <= cores, (threads, workers, cores)
