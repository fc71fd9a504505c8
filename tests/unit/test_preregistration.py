"""A study's pre-registered design (results/NAME/DESIGN.md) is the text committed before its first
job, never edited since: byte for byte the text of the commit that registered it, a commit older
than every record's start."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DESIGNS = sorted((ROOT / "results").glob("*/DESIGN.md"))
# A design first written under another path names its registration in the study's README.
REGISTERED = re.compile(r"^Pre-registered: `([0-9a-f]{7,40}):([^`]+)`$", re.M)


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
    if git("rev-parse", "--is-shallow-repository") != b"false\n":
        pytest.skip("needs the repository's full history")
    commit, path = registration(design)
    registered = git("show", f"{commit}:{path}")
    assert registered is not None, f"{commit}:{path} is not in the history"
    assert design.read_bytes() == registered, f"{design.name} differs from {commit}:{path}"
    committed = datetime.fromisoformat(git("show", "-s", "--format=%cI", commit).decode().strip())
    runs = design.parent / "runs.jsonl"
    start = first_start(runs) if runs.is_file() else None
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
