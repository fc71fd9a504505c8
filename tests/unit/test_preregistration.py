"""A study's pre-registered design (results/NAME/DESIGN.md) is the text fixed before its first
job, never edited since: byte for byte the text of the commit that registered it, a commit older
than every record's start; or, for a design `kdbench.advise` wrote, the text whose time and SHA-256
its ledger registered before the first job."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DESIGNS = sorted((ROOT / "results").glob("*/DESIGN.md"))
# A design first written under another path names its registration in the study's README.
REGISTERED = re.compile(r"^Pre-registered: `([0-9a-f]{7,40}):([^`]+)`$", re.M)
# A design written by kdbench.advise before its ledger registered designs names its written time.
WRITTEN = re.compile(r"^Registered: `DESIGN\.md` written at `([^`]+)`", re.M)


def git(*args: str) -> bytes | None:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def registration(design: Path) -> tuple[str, str]:
    """(commit, path) of the text the design must equal."""
    readme = design.parent / "README.md"
    match = REGISTERED.search(readme.read_text(encoding="utf-8")) if readme.is_file() else None
    if match:
        return match[1], match[2]
    path = design.relative_to(ROOT).as_posix()
    added = (git("log", "--diff-filter=A", "--format=%H", "--", path) or b"").split()
    assert added, f"{path} is not committed: commit it before the study's first job"
    return added[-1].decode(), path


def advise_registration(design: Path) -> dict | None:
    """The ledger's registration of a design kdbench.advise wrote, if any."""
    ledger = design.parent / "ledger.jsonl"
    lines = ledger.read_text(encoding="utf-8").splitlines() if ledger.is_file() else []
    entries = [json.loads(line) for line in lines if line.strip()]
    return next((entry for entry in entries if entry["step"] == "design"), None)


def written_at(design: Path) -> datetime | None:
    """When kdbench.advise wrote the design, from its ledger or, for a run older than the ledger's
    registration, from the README's Registered line; None for a design registered by a commit."""
    entry = advise_registration(design)
    if entry is not None:
        digest = hashlib.sha256(design.read_bytes()).hexdigest()
        assert digest == entry["sha256"], f"{design.name} is not the text its ledger registered"
        return datetime.fromisoformat(entry["written_at"])
    readme = design.parent / "README.md"
    match = WRITTEN.search(readme.read_text(encoding="utf-8")) if readme.is_file() else None
    return datetime.fromisoformat(match[1]) if match else None


def first_start(runs: Path) -> datetime | None:
    starts = [
        (json.loads(line).get("provenance") or {}).get("started_at")
        for line in runs.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    starts = [datetime.fromisoformat(s.replace("Z", "+00:00")) for s in starts if s]
    return min(starts) if starts else None


def test_the_committed_studies_have_a_design():
    assert "table3_power" in {design.parent.name for design in DESIGNS}


@pytest.mark.parametrize("design", DESIGNS, ids=lambda path: path.parent.name)
def test_a_design_is_its_registered_text_committed_before_the_first_job(design: Path):
    runs = design.parent / "runs.jsonl"
    start = first_start(runs) if runs.is_file() else None
    written = written_at(design)
    if written is not None:
        # a record's start is truncated to the second
        assert start is None or written < start + timedelta(seconds=1), (
            f"{design.name} was written at {written}, after the first job ({start})"
        )
        return
    if git("rev-parse", "--is-shallow-repository") != b"false\n":
        pytest.skip("needs the repository's full history")
    commit, path = registration(design)
    registered = git("show", f"{commit}:{path}")
    assert registered is not None, f"{commit}:{path} is not in the history"
    assert design.read_bytes() == registered, f"{design.name} differs from {commit}:{path}"
    committed = datetime.fromisoformat(git("show", "-s", "--format=%cI", commit).decode().strip())
    if start is not None:
        assert committed < start, f"{commit} ({committed}) is not before the first job ({start})"


@pytest.mark.parametrize("design", DESIGNS, ids=lambda path: path.parent.name)
def test_the_readme_shows_the_design_verbatim_above_the_changes(design: Path):
    readme = (design.parent / "README.md").read_text(encoding="utf-8")
    shown = re.search(r"^````text\n(.*?)^````$", readme, re.M | re.S)
    assert shown is not None, "the README shows the design in a ````text block"
    assert shown[1] == design.read_text(encoding="utf-8")
    changes = readme.find("## Changes after the run")
    assert changes > shown.end(), "the changes after the run come below the design"
    dated = re.findall(r"^- \*\*(\d{4}-\d{2}-\d{2})", readme[changes:], re.M)
    assert dated == sorted(dated), "each change is dated, in order"


def test_a_registration_line_names_a_commit_and_a_path(tmp_path: Path):
    text = "intro\n\nPre-registered: `9c2e7da:results/table3_power/README.md`\n"
    assert REGISTERED.search(text).groups() == ("9c2e7da", "results/table3_power/README.md")
