"""Data-parallel plumbing on torch.distributed: `torchrun --nproc_per_node=N -m kdbench.run ...`, or
the tasks of one SLURM / submitit job (`hydra/launcher=slurm_ddp`, `srun -n N python -m kdbench.run
...`).

With WORLD_SIZE > 1 each process of a task-agnostic run joins the group (nccl on GPUs, gloo on
CPU) and trains a DistributedDataParallel replica on its own shard of every global batch; only
rank 0 writes logs, checkpoints and results. The other settings train in one process and refuse
several (`check_launch`). A task of a multi-task job without torchrun's variables first takes them
from its job (:func:`adopt_job_environment`). For a single process everything here is a no-op.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

import torch
import torch.distributed as dist

from kdbench.errors import ConfigError
from kdbench.runtime.processes import job_tasks


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def job_environment():
    """submitit's view of this task's job (SLURM through submitit or srun, or submitit's local
    executor) when the job has several tasks; None otherwise, without importing submitit."""
    if job_tasks() < 2:
        return None
    from submitit import JobEnvironment
    from submitit.slurm.slurm import SlurmJobEnvironment

    job = JobEnvironment() if "SUBMITIT_EXECUTOR" in os.environ else SlurmJobEnvironment()
    return job if job.num_tasks > 1 else None


def adopt_job_environment() -> None:
    """In a multi-task job without torchrun's variables, export the job's as torchrun's: RANK,
    WORLD_SIZE, LOCAL_RANK and the rendezvous, the first host of the job's node list (SLURM's forms:
    gpu[01-04], gpu01,gpu07) with a port drawn from the job id unless MASTER_PORT is set, so every
    task of the job joins one data-parallel group and finds the same master."""
    if "WORLD_SIZE" in os.environ:
        return
    job = job_environment()
    if job is None:
        return
    port = os.environ.get("MASTER_PORT") or str(
        random.Random(str(job.job_id)).randint(20000, 60000)
    )
    os.environ.update(
        MASTER_ADDR=job.hostnames[0],
        MASTER_PORT=port,
        RANK=str(job.global_rank),
        WORLD_SIZE=str(job.num_tasks),
        LOCAL_RANK=str(job.local_rank),
    )


def current() -> World:
    """The process's place in a data-parallel launch (rank 0 of 1 otherwise); reads the environment
    only."""
    return World(
        int(os.environ.get("RANK", 0)),
        int(os.environ.get("WORLD_SIZE", 1)),
        int(os.environ.get("LOCAL_RANK", 0)),
    )


# The settings that train one model over several processes; the others train in one.
DATA_PARALLEL = ("task_agnostic",)


def check_launch(setting: str) -> None:
    """Refuses several processes (torchrun, srun -n N, hydra/launcher=slurm_ddp) for a setting that
    trains in one: each of them would run the whole job, into the same folder."""
    size = current().size
    if size > 1 and setting not in DATA_PARALLEL:
        raise ConfigError(
            f"setting={setting} trains in one process, and this launch started {size} "
            f"(WORLD_SIZE={size}): start it as one process (no torchrun or srun -n; "
            "hydra/launcher=slurm, not slurm_ddp); setting=task_agnostic alone is data-parallel"
        )


def init(device: torch.device) -> World:
    """Join the process group of a data-parallel launch; returns the world."""
    world = current()
    if world.distributed and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return world


def device_for(world: World, device: torch.device) -> torch.device:
    """Each process drives its own GPU: cuda:LOCAL_RANK where it sees every GPU of its node,
    cuda:0 where the cluster binds one GPU to each task (its CUDA_VISIBLE_DEVICES names that one
    alone); CPU processes share the CPU."""
    if device.type != "cuda" or not world.distributed:
        return device
    visible = torch.cuda.device_count()
    if visible == 1:
        return torch.device("cuda", 0)
    if world.local_rank >= visible:
        raise ConfigError(
            f"the process of LOCAL_RANK={world.local_rank} sees {visible} GPUs: "
            f"start at most {visible} processes per node, or bind one GPU to each "
            "(CUDA_VISIBLE_DEVICES)"
        )
    return torch.device("cuda", world.local_rank)


def wrap(module: torch.nn.Module, world: World, device: torch.device) -> torch.nn.Module:
    """A DistributedDataParallel replica in a multi-process run; the module itself otherwise.

    Every trainable parameter of `module` must get a gradient in every step: freeze those the loss
    never reaches first (`kdbench.training.reach.freeze_unreached`), so DDP need not search the
    autograd graph at every step (find_unused_parameters). Gradients live in DDP's all-reduce
    buckets (no copy in and out of them).
    """
    if not world.distributed:
        return module
    ids = [device.index] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(
        module, device_ids=ids, gradient_as_bucket_view=True
    )


def summed_over_ranks(
    sums: dict[str, float], count: int, world: World
) -> tuple[dict[str, float], int]:
    """Scalar sums and the number of items they add up, totalled over processes (each adds its own
    items, some none): per name the sum of every process's, in rank order, and the items' number."""
    if not world.distributed:
        return sums, count
    parts: list = [None] * world.size
    dist.all_gather_object(parts, (sums, count))
    totals: dict[str, float] = {}
    for part, _ in parts:
        for name, value in part.items():
            totals[name] = totals.get(name, 0.0) + value
    return totals, sum(number for _, number in parts)


def is_distributed() -> bool:
    """Whether this process is one of a data-parallel run's (its process group is up)."""
    return dist.is_available() and dist.is_initialized()


def any_rank(flag: bool, device: torch.device) -> bool:
    """Whether `flag` is set on any process (every process must call this at the same point); `flag`
    alone outside a data-parallel run."""
    if not is_distributed():
        return flag
    value = torch.tensor([int(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
