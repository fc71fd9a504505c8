"""The job lock: two processes given the same job folder (two terminals, two machines on a shared
file system, a re-run started while the first still runs) never run that job at the same time; the
process holding the lock has claimed the job.

The claim is an operating-system lock (`flock`; NFS clients emulate it with byte-range locks) on a
file in the job's folder, held while the job runs. The system releases it when its holder exits or
is killed, so the claim of a killed process is free for the next one, which resumes the job from its
checkpoint. A second file says who holds the claim (host, pid, since); it is removed when the holder
lets go (done, failed or stopped), so finding it with the lock free means the holder was killed.
Each process of a data-parallel job claims its own rank's lock: a second launch of the same job
finds every rank's claim held and skips it on every rank.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock, Timeout

from kdbench.records.record import read_json, write_json

log = logging.getLogger("kdbench")
CLAIM = ".kdbench-claim."  # how a claim's files begin: its lock and its holder, per rank


def describe(holder: dict) -> str:
    return (
        f"pid {holder.get('pid', '?')} on "
        f"{holder.get('host', '?')} since {holder.get('since', '?')}"
    )


def lock_of(run_dir: Path, rank: int) -> tuple[FileLock, Path]:
    """The claim's lock and the file naming its holder."""
    return FileLock(run_dir / f"{CLAIM}{rank}.lock"), run_dir / f"{CLAIM}{rank}.json"


def held_by(run_dir: Path) -> dict | None:
    """Who runs the job in `run_dir` now (None: nobody), without claiming it."""
    lock, holder_file = lock_of(run_dir, 0)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return read_json(holder_file) or {}
    lock.release()
    return None


def busy_jobs(sweep_dir: Path) -> list[Path]:
    """The job folders under a sweep folder that another process is running now."""
    return [
        lock.parent for lock in sorted(sweep_dir.rglob(f"{CLAIM}0.lock")) if held_by(lock.parent)
    ]


@contextmanager
def claim(run_dir: Path, rank: int = 0) -> Iterator[dict | None]:
    """Holds the job's claim for the block and yields None; yields the holder (host, pid, since)
    instead, without waiting, when another process holds it."""
    run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock, holder_file = lock_of(run_dir, rank)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        yield read_json(holder_file) or {}
        return
    try:
        if (gone := read_json(holder_file)) is not None:
            log.warning("taking over %s from %s, which is gone", run_dir, describe(gone))
        write_json(
            holder_file,
            {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "since": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        )
        yield None
    finally:
        holder_file.unlink(missing_ok=True)
        lock.release()
