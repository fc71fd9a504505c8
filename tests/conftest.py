"""Shared fixtures: a tiny GLUE directory and an isolated cache for every test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import write_tiny_glue, write_user_data


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
