"""Data-parallel plumbing on torch.distributed: `torchrun --nproc_per_node=N -m kdbench.run ...`.

Under torchrun (WORLD_SIZE > 1) each process joins the group (nccl on GPUs, gloo on CPU) and trains a
DistributedDataParallel replica on its own shard of every global batch; only rank 0 writes logs, checkpoints
and results. Without torchrun everything here is a no-op for a single process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


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


def current() -> World:
    """The process's place in a torchrun launch (rank 0 of 1 otherwise); reads the environment only."""
    return World(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0)))


def init(device: torch.device) -> World:
    """Join the process group when launched by torchrun; returns the world."""
    world = current()
    if world.distributed and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(world.local_rank)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return world


def device_for(world: World, device: torch.device) -> torch.device:
    """Each process drives its own GPU (cuda:LOCAL_RANK); CPU processes share the CPU."""
    if device.type == "cuda" and world.distributed:
        return torch.device("cuda", world.local_rank)
    return device


def wrap(module: torch.nn.Module, world: World, device: torch.device) -> torch.nn.Module:
    """A DistributedDataParallel replica in a multi-process run; the module itself otherwise.

    Parameters a step does not use (a pooler, an MLM head an objective does not read) are allowed.
    """
    if not world.distributed:
        return module
    ids = [device.index] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(module, device_ids=ids, find_unused_parameters=True)


def mean_over_ranks(values: dict[str, float], world: World, device: torch.device) -> dict[str, float]:
    """Average scalar metrics over processes (held-out losses computed on each rank's shard)."""
    if not world.distributed:
        return values
    names = sorted(values)
    tensor = torch.tensor([values[n] for n in names], dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return {n: float(v) / world.size for n, v in zip(names, tensor.tolist())}


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
