"""A task of a multi-task SLURM or submitit job takes its ranks and rendezvous from the job (as
torchrun's)."""

from __future__ import annotations

import os
import socket
import sys

import pytest

from kdbench.runtime import distributed

TORCHRUN = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")


@pytest.fixture
def clean_env(monkeypatch):
    """No job or torchrun variables during the test; afterwards the environment is as before, also
    for the variables `adopt_job_environment` writes (each is registered with monkeypatch first, so
    its undo removes it)."""
    for key in [k for k in os.environ if k.startswith(("SLURM_", "SUBMITIT_"))] + list(TORCHRUN):
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    return monkeypatch


def slurm_task(
    env, nodelist: str, nodes: int, procid: int, ntasks: int, localid: int, job_id: str = "4242"
):
    env.setenv("SLURM_JOB_ID", job_id)
    env.setenv("SLURM_JOB_NODELIST", nodelist)
    env.setenv("SLURM_JOB_NUM_NODES", str(nodes))
    env.setenv("SLURM_NODEID", str(procid // (ntasks // nodes)))
    env.setenv("SLURM_PROCID", str(procid))
    env.setenv("SLURM_NTASKS", str(ntasks))
    env.setenv("SLURM_LOCALID", str(localid))


@pytest.mark.parametrize(
    ("nodelist", "nodes", "master"),
    [
        ("gpu[01-04]", 4, "gpu01"),
        ("gpu01,gpu07", 2, "gpu01"),
        ("node[7,9-10]", 3, "node7"),
        ("a100-3", 1, "a100-3"),
    ],
)
def test_a_slurm_task_adopts_its_job(clean_env, nodelist, nodes, master):
    slurm_task(clean_env, nodelist, nodes, procid=5, ntasks=8 * nodes, localid=1)
    distributed.adopt_job_environment()
    assert (os.environ["MASTER_ADDR"], os.environ["RANK"], os.environ["LOCAL_RANK"]) == (
        master,
        "5",
        "1",
    )
    assert distributed.current() == distributed.World(rank=5, size=8 * nodes, local_rank=1)


def test_every_task_of_a_job_finds_the_same_master(clean_env):
    seen = set()
    for procid in range(4):
        for key in TORCHRUN:
            clean_env.delenv(key, raising=False)
        slurm_task(clean_env, "gpu[01-02]", 2, procid=procid, ntasks=4, localid=procid % 2)
        distributed.adopt_job_environment()
        seen.add((os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]))
    assert len(seen) == 1 and 20000 <= int(next(iter(seen))[1]) <= 60000


def test_the_port_is_the_users_when_given(clean_env):
    clean_env.setenv("MASTER_PORT", "29555")
    slurm_task(clean_env, "gpu01", 1, procid=0, ntasks=2, localid=0)
    distributed.adopt_job_environment()
    assert os.environ["MASTER_PORT"] == "29555"


def test_a_submitit_local_task_adopts_its_job(clean_env):
    for key, value in {
        "SUBMITIT_EXECUTOR": "local",
        "SUBMITIT_LOCAL_JOB_ID": "77",
        "SUBMITIT_LOCAL_NTASKS": "2",
        "SUBMITIT_LOCAL_JOB_NUM_NODES": "1",
        "SUBMITIT_LOCAL_NODEID": "0",
        "SUBMITIT_LOCAL_GLOBALID": "1",
        "SUBMITIT_LOCAL_LOCALID": "1",
    }.items():
        clean_env.setenv(key, value)
    distributed.adopt_job_environment()
    assert distributed.current() == distributed.World(rank=1, size=2, local_rank=1)
    assert os.environ["MASTER_ADDR"] == socket.gethostname()


def test_single_tasks_and_torchrun_are_left_alone(clean_env):
    slurm_task(clean_env, "gpu01", 1, procid=0, ntasks=1, localid=0)  # a one-task job: no group
    distributed.adopt_job_environment()
    assert "WORLD_SIZE" not in os.environ and distributed.current() == distributed.World()
    clean_env.setenv("WORLD_SIZE", "3")  # torchrun's own variables win
    clean_env.setenv("RANK", "2")
    slurm_task(clean_env, "gpu01", 1, procid=0, ntasks=8, localid=0)
    distributed.adopt_job_environment()
    assert distributed.current().rank == 2 and distributed.current().size == 3


def test_a_single_process_never_imports_submitit(clean_env):
    """Outside a job, and in a one-task job, the environment alone decides: importing submitit (not
    installed, here) is never tried."""
    clean_env.setitem(sys.modules, "submitit", None)
    distributed.adopt_job_environment()
    slurm_task(clean_env, "gpu01", 1, procid=0, ntasks=1, localid=0)
    distributed.adopt_job_environment()
    clean_env.setenv("SUBMITIT_EXECUTOR", "local")
    clean_env.setenv("SUBMITIT_LOCAL_NTASKS", "1")
    distributed.adopt_job_environment()
    assert distributed.current() == distributed.World()
    clean_env.setenv("SUBMITIT_LOCAL_NTASKS", "2")
    with pytest.raises(ModuleNotFoundError, match="submitit"):
        distributed.adopt_job_environment()
