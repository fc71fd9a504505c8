"""Shared fixtures: a tiny GLUE directory and an isolated cache for every test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tests.helpers import write_tiny_glue, write_user_data


def pytest_configure():
    """Under pytest-xdist (`make test` runs one worker per core), each worker and the processes it
    starts get their share of the cores: torch's default of one thread per core in every worker
    would oversubscribe them, and oversubscribed threads run several times slower."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        threads = max(1, (os.cpu_count() or 1) // workers)
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_glue(tmp_path_factory) -> Path:
    return write_tiny_glue(tmp_path_factory.mktemp("glue"))


@pytest.fixture(autouse=True, scope="session")
def isolated_cache(tmp_path_factory):
    """Tests never touch the user's cache; wandb never goes online."""
    os.environ["KDBENCH_CACHE"] = str(tmp_path_factory.mktemp("kdbench-cache"))
    os.environ["WANDB_MODE"] = "offline"
    os.environ.setdefault(
        "HF_HUB_OFFLINE", "1"
    )  # no network here: fail fast instead of retrying the Hub
    os.environ.setdefault("WANDB_SILENT", "true")
    yield


@pytest.fixture(scope="session")
def user_data(tmp_path_factory) -> dict[str, Path]:
    return write_user_data(tmp_path_factory.mktemp("user-data"))
