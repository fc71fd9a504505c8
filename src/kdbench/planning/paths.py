"""Configured paths: read as the user wrote them, and the folders a run writes into checked before
it writes (light: the command line checks `paths.run_dir` before torch loads)."""

from __future__ import annotations

from pathlib import Path

from kdbench.errors import ConfigError
from kdbench.runtime.storage import folder_problem


def local_path(value) -> Path:
    """A configured path (an override's digits, `data.glue_dir=2024`, arrive as a number)."""
    return Path(str(value)).expanduser()


def writable_folder(value, key: str, where: str = "") -> Path:
    """A folder the run writes into (`key` names its setting, `where` where else it is set),
    refused in one line when it cannot be one."""
    path = local_path(value)
    problem = folder_problem(path.absolute())
    if problem is not None:
        raise ConfigError(f"{key}={value} {problem}: give a folder this user can write{where}")
    return path
