"""Where and how a run computes: the trainer's `device`, `precision`, `tf32` and `num_workers`
resolved for this process's machine and student (`compute_on`)."""

from __future__ import annotations

import os

import torch

from kdbench.errors import ConfigError
from kdbench.planning.specs import LoadingSpec
from kdbench.planning.trainer_specs import ComputeSpec
from kdbench.runtime import distributed
from kdbench.runtime.precision import resolve_precision, resolve_tf32


def compute_on(trainer: ComputeSpec, student_width: int) -> dict:
    """The plan's device (this process's), precision (for a student `student_width` wide) and why,
    tf32 and DataLoader loading."""
    device = distributed.device_for(distributed.current(), resolve_device(trainer.device))
    precision, reason = resolve_precision(trainer.precision, device, student_width)
    return {
        "device": device,
        "precision": precision,
        "precision_reason": reason,
        "tf32": resolve_tf32(trainer.tf32, device, precision),
        "loading": loading_spec(trainer.num_workers, device),
    }


def resolve_device(requested: str) -> torch.device:
    """`trainer.device`: auto is a CUDA GPU where there is one, else the CPU."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(requested)
    except RuntimeError:
        raise ConfigError(
            f"trainer.device={requested!r} is not a device: use auto, cpu, cuda or cuda:N"
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"trainer.device={requested} but no CUDA GPU is available: "
            "use trainer.device=auto or cpu"
        )
    return device


AUTO_WORKERS = 4  # trainer.num_workers=auto on a GPU: at most this many, a core left to the main


def loading_spec(num_workers: int | str, device: torch.device) -> LoadingSpec:
    """`trainer.num_workers` for the device: auto is min(4, CPU cores - 1) workers on a GPU, 0 on
    the CPU (where workers would take the cores the step computes on); pinned memory on a GPU."""
    if num_workers == "auto":
        num_workers = max(0, min(AUTO_WORKERS, cpu_cores() - 1)) if device.type == "cuda" else 0
    return LoadingSpec(num_workers, pin_memory=device.type == "cuda")


def cpu_cores() -> int:
    """The CPU cores this process may run on (a cluster's binding of the task included)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
