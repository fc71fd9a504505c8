"""A study's jobs: the sweep dir of a `kdbench.study` holds the job folders of all its steps
(`study_jobs.txt`, one a line, relative to the sweep dir), and its report reads the records of
those jobs alone. Another record under the folder (a run of other overrides) is listed as
``not_in_study``, a listed job without a record as ``missing``."""

from __future__ import annotations

from pathlib import Path

from kdbench.records.record import JOBS_FILE, RESULT_FILE
from kdbench.report.frames import exclusion


def study_jobs(results_dir: Path) -> list[str] | None:
    """The job folders the study that ran in `results_dir` lists (None: no study did)."""
    path = results_dir / JOBS_FILE
    if not path.is_file():
        return None
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def of_jobs(files: list[Path], results_dir: Path, jobs: list[str]) -> tuple[list[Path], list]:
    """The record files (under `results_dir`) of the listed jobs, and the exclusions: the other
    records (``not_in_study``) and the listed jobs without one (``missing``)."""
    folders = {path: path.parent.relative_to(results_dir).as_posix() for path in files}
    listed = set(jobs)
    kept = [path for path in files if folders[path] in listed]
    others = [
        exclusion(
            path.relative_to(results_dir).as_posix(),
            "not_in_study",
            f"not a job of the study's sweeps ({JOBS_FILE}): a run of other overrides",
        )
        for path in files
        if folders[path] not in listed
    ]
    found = {folders[path] for path in kept}
    missing = [
        exclusion(f"{job}/{RESULT_FILE}", "missing", "a job of the study without a record")
        for job in jobs
        if job not in found
    ]
    return kept, others + missing
