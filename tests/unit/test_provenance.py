"""Which code a record came from: the hash of kdbench's source always, the git commit only from a
checkout that tracks kdbench's own files (not from another repository that encloses a copy)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kdbench.records.record import PACKAGE, git_state, source_sha256
from kdbench.report.load import parse_record
from tests.unit.report_helpers import write_run


def git(folder: Path, *args: str) -> str:
    identity = ("-c", "user.name=kdbench", "-c", "user.email=kdbench@example.invalid")
    done = subprocess.run(
        ["git", *identity, *args], cwd=folder, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.fixture
def copied(tmp_path, monkeypatch) -> Path:
    """A copy of the package in tmp_path/repo/src/kdbench; git looks no higher than tmp_path."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    package = tmp_path / "repo" / "src" / "kdbench"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    return package


def test_a_copy_outside_any_repository_has_no_commit(copied):
    assert git_state(copied) == (None, None)


def test_a_repository_that_does_not_track_the_package_gives_no_commit(copied):
    repo = copied.parents[1]
    git(repo, "init", "-q")
    (repo / "README").write_text("another project\n")
    git(repo, "add", "README")
    git(repo, "commit", "-qm", "another project")
    assert git_state(copied) == (None, None)


def test_a_checkout_that_tracks_the_package_gives_its_commit(copied):
    repo = copied.parents[1]
    git(repo, "init", "-q")
    git(repo, "add", "src")
    git(repo, "commit", "-qm", "kdbench")
    assert git_state(copied) == (git(repo, "rev-parse", "HEAD"), False)
    (copied / "records" / "record.py").write_text("# changed\n")
    assert git_state(copied) == (git(repo, "rev-parse", "HEAD"), True)


def test_the_source_hash_is_the_codes_wherever_it_lies(copied):
    assert source_sha256(copied) == source_sha256(PACKAGE)
    (copied / "__pycache__").mkdir(exist_ok=True)
    (copied / "__pycache__" / "record.cpython-311.pyc").write_bytes(b"compiled")
    (copied / "notes.txt").write_text("not source\n")
    assert source_sha256(copied) == source_sha256(PACKAGE)
    for changed in ("records/record.py", "conf/config.yaml", "paper/wang2023_tables.csv"):
        before = source_sha256(copied)
        with (copied / changed).open("a") as handle:
            handle.write("\n")
        assert source_sha256(copied) != before, changed


def test_the_source_hash_covers_the_paths_as_well_as_the_bytes(copied):
    before = source_sha256(copied)
    (copied / "records" / "record.py").rename(copied / "records" / "record_moved.py")
    assert source_sha256(copied) != before


@pytest.mark.parametrize(
    "provenance",
    [
        {"git_commit": "0123456789abcdef", "git_dirty": False},  # written before the hash
        {"git_commit": None, "git_dirty": None, "source_sha256": "0" * 64},
    ],
)
def test_the_report_loads_records_with_or_without_the_source_hash(tmp_path, provenance):
    path = write_run(tmp_path, provenance=provenance, kdbench_version="0.1.0")
    row, excluded = parse_record(path, tmp_path)
    assert excluded is None
    assert row["commit"] == (provenance["git_commit"] or "0.1.0")[:10]
