"""A sweep dir's jobs: the sweep dir of a `kdbench.study` holds the job folders of all its steps
(`study_jobs.txt`, one a line, relative to the sweep dir), and its report reads the records of those
jobs alone. Another record under the folder (a run of other overrides) is listed as
``not_in_study``, a listed job without a record as ``missing``. A plain Hydra sweep's dir names its
jobs in its ``multirun.yaml``: each of them without a record is ``missing`` too (never started, or
ended before its first record). A record that says ``running`` is checked against its job's claim
(`kdbench.runtime.joblock`): a free claim means the process that wrote it was killed (``killed``). A
job of the study or sweep that did not finish keeps its place in the design: its exclusion names its
job (``job``) and its cell's key fields (`of_design`), and the tables show what each cell lacks."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from omegaconf import OmegaConf

from kdbench.planning.study_config import job_folders
from kdbench.records.record import GRID_AT, JOBS_FILE, KEY_FIELDS, RESULT_FILE, read_json
from kdbench.report.frames import exclusion, key_text
from kdbench.runtime.joblock import describe, held_by, lock_of

MULTIRUN_FILE = "multirun.yaml"  # Hydra's, in a sweep dir: the sweep's config and overrides
KILLED = (
    "ended without a last record: killed (a time limit, the OOM killer, a node failure); "
    "re-run the sweep to resume it from its checkpoint"
)
UNFINISHED = ("failed", "killed", "missing", "running")  # a job's kinds of exclusion: no score yet
JOB_NAME = re.compile(r"(?:(?P<cell>.*),)?seed=(?P<seed>[^,]+)")  # `job_dir_name`'s folders
# a fine-tuning grid point's keys in its folder's name (the sweep's overrides)
GRID_KEYS = re.compile(
    "|".join(rf"(?:^|,){re.escape(at + key)}=[^,]*" for key, at in GRID_AT.items())
)


def study_jobs(results_dir: Path) -> list[str] | None:
    """The job folders the study that ran in `results_dir` lists (None: no study did)."""
    path = results_dir / JOBS_FILE
    if not path.is_file():
        return None
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def multirun_jobs(results_dir: Path) -> list[str]:
    """The job folders, relative to `results_dir`, of the Hydra sweep that last ran in each sweep
    dir under it (its multirun.yaml)."""
    jobs = []
    for path in sorted(results_dir.rglob(MULTIRUN_FILE)):
        folder = path.parent.relative_to(results_dir)
        jobs += [(folder / job).as_posix() for job in sweep_jobs(path)]
    return jobs


def sweep_jobs(path: Path) -> list[str]:
    """The job folders a multirun.yaml's sweep names: Hydra's basic sweeper naming its jobs
    kdbench's way (`hydra.sweep.subdir`); none for another sweeper or naming."""
    cfg = OmegaConf.load(path)
    sweeper = OmegaConf.select(cfg, "hydra.sweeper._target_", default="")
    subdir = OmegaConf.to_container(cfg.hydra.sweep, resolve=False).get("subdir", "")
    if not sweeper.endswith(".BasicSweeper") or "kdbench_job_dir" not in str(subdir):
        return []
    return job_folders(cfg, list(cfg.hydra.overrides.task))


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
    return kept, others + unrecorded(files, results_dir, jobs)


def unrecorded(files: list[Path], results_dir: Path, jobs: list[str]) -> list[dict]:
    """A ``missing`` exclusion per listed job without a record file, saying whether it started."""
    found = {path.parent.relative_to(results_dir).as_posix() for path in files}
    return [
        exclusion(
            f"{job}/{RESULT_FILE}",
            "missing",
            "a job of the sweep that wrote no record: "
            + (
                "it started but failed or was killed before its first record (its launcher's log "
                "says why)"
                if (results_dir / job).is_dir()
                else "it never started (no job folder)"
            ),
        )
        for job in jobs
        if job not in found
    ]


def claim_state(row: dict, folder: Path) -> dict:
    """A ``running`` record's exclusion as its job's claim tells it: the process running it, or
    ``killed`` when nobody holds the claim (the holder's file left behind names the process)."""
    lock, holder_file = lock_of(folder, 0)
    if row["kind"] != "running" or not Path(lock.lock_file).is_file():
        return row  # a folder without its claim (copied elsewhere): nothing to tell
    try:
        holder = held_by(folder)
    except OSError:  # a folder this user cannot lock: nothing to tell
        return row
    if holder is not None:
        return row | {"reason": f"status 'running': being run by {describe(holder)}"}
    gone = read_json(holder_file)
    who = describe(gone) if gone else "the process that wrote it"
    return row | {"kind": "killed", "reason": f"status 'running', but {who} {KILLED}"}


def of_design(excluded: list[dict], records: list[dict], jobs: list[str]) -> list[dict]:
    """The exclusions, each of a listed job that did not finish (`UNFINISHED`) naming its job
    (``job``), a fine-tuning grid point's saying so (``grid_point``); a ``missing`` one takes its
    key fields from a record (completed or not) of a job of its cell, the job of its folder less
    the seed and the grid point, and its seed from its folder, a grid point's from that record (a
    fine-tuning record's seed is its distillation's; none: it keeps them empty)."""
    listed = set(jobs)
    known = {}
    for row in records + excluded:
        job, _ = job_cell(row["path"])
        if job is not None and row.get("objective") is not None:
            known.setdefault(job, row)
    out = []
    for row in excluded:
        folder = PurePosixPath(row["path"]).parent.as_posix()
        if row["kind"] not in UNFINISHED or folder not in listed:
            out.append(row)
            continue
        cell, seed = job_cell(row["path"])
        in_grid = GRID_KEYS.search(PurePosixPath(folder).name) is not None
        if row["kind"] == "missing" and cell in known:
            own_seed = {} if in_grid else {"seed": seed}
            row = row | {key: key_text(known[cell][key]) for key in KEY_FIELDS} | own_seed
        out.append(row | {"job": folder, "grid_point": in_grid})
    return out


def job_cell(path: str) -> tuple[str | None, str | None]:
    """(the folder of a job's cell: its folder less the seed and a fine-tuning grid point, the
    seed) of a record's path; (None, None) for a folder not named as a sweep names its jobs."""
    folder = PurePosixPath(path).parent
    match = JOB_NAME.fullmatch(folder.name)
    if match is None:
        return None, None
    cell = GRID_KEYS.sub("", match["cell"] or "").lstrip(",")
    return (folder.parent / cell).as_posix(), match["seed"]
