"""How many processes a launch started, from the environment alone (light: the command line checks
it before torch loads): torchrun's WORLD_SIZE, or the tasks of a SLURM or submitit job."""

from __future__ import annotations

import os

# The variable that holds a job's number of tasks: its own for submitit's local executor,
# SLURM's otherwise (under submitit's SLURM executor too).
TASK_COUNTS = {"local": "SUBMITIT_LOCAL_NTASKS"}


def job_tasks() -> int:
    """How many tasks this process's SLURM or submitit job has, as its environment says (1 outside
    a job)."""
    executor = os.environ.get("SUBMITIT_EXECUTOR")
    if executor is None and "SLURM_PROCID" not in os.environ:
        return 1
    return int(os.environ.get(TASK_COUNTS.get(executor, "SLURM_NTASKS")) or 1)


def launched() -> int:
    """The number of processes that run this command: torchrun's WORLD_SIZE, else the job's
    tasks (each of them runs it: `srun -n N`)."""
    return int(os.environ.get("WORLD_SIZE") or job_tasks())
