"""Configured paths: read as the user wrote them, the folders a run writes into checked before it
writes (light: the command line checks `paths.run_dir` before torch loads), and the saved models the
config names, by the hash of their manifests."""

from __future__ import annotations

from pathlib import Path

from kdbench.errors import ConfigError
from kdbench.runtime.storage import MANIFEST, folder_problem, sha256_of


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


# The config keys that name a distilled student a run reads (a study's next step names each saved
# student by one of them: `study_config.STUDENT_AS`).
MODEL_KEYS = ("setting.student_path", "init.path", "teacher.name_or_path")


def saved_models(resolved: dict) -> dict | None:
    """The saved models kdbench sealed (`storage.MANIFEST`) that the config names, by key: the
    SHA-256 of each one's manifest, which holds the hash of each of its files (the record's
    `provenance.inputs`). A completed record stands for its config while these are the same: a
    student distilled again in place is a new input to the jobs that read it."""
    found = {}
    for key in MODEL_KEYS:
        value = resolved
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        manifest = Path(value).expanduser() / MANIFEST if isinstance(value, str) else None
        if manifest is not None and manifest.is_file():
            found[key] = sha256_of(manifest)
    return found or None
