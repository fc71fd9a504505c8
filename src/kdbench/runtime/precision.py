"""The precision a run computes in: `trainer.precision` and `trainer.tf32` resolved for its device
and its student, and applied; the region every forward runs in (`computing`).

`auto` takes bf16 autocast where the device computes bf16 natively (a CUDA GPU of compute capability
8.0 or later: A100, H100, RTX 30xx on; an AMD GPU under ROCm) and the matrix products dominate a
step: a student at least `BF16_MIN_WIDTH` wide (the paper's 6x768). A narrower student's step is
bound by kernel launches, where autocast's casts cost more than bf16 saves: on an H200, a 3x384
student at GLUE batches of 32 and 256 ran at 2,476 and 19,296 examples/s in fp32 (TF32) against
1,542 and 11,293 in bf16 with cuDNN attention off (`benchmarks/RESULTS_GPU.md`), so auto takes fp32
there. Elsewhere fp32: on an older GPU (V100, T4, which would emulate bf16) and on the CPU. TF32
matmuls are used by fp32 runs on a GPU that has them, when `trainer.tf32` allows them.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from kdbench.errors import ConfigError

NATIVE_BF16_CAPABILITY = (8, 0)  # Ampere: bf16 and TF32 tensor cores


def native_bf16(device: torch.device) -> bool:
    """Whether `device` computes bf16 matmuls in hardware (emulation on an older GPU does not
    count)."""
    if device.type != "cuda":
        return False
    capability = torch.cuda.get_device_capability(device)
    return bool(torch.version.hip) or capability >= NATIVE_BF16_CAPABILITY


BF16_MIN_WIDTH = 768  # auto takes bf16 for a student at least this wide (see the module doc)


def resolve_precision(requested: str, device: torch.device, width: int) -> tuple[str, str]:
    """fp32 or bf16 for a student `width` wide, and why: `auto` is bf16 where the device has it
    natively and the student is at least `BF16_MIN_WIDTH` wide, fp32 elsewhere."""
    if requested == "auto":
        if not native_bf16(device):
            return "fp32", f"auto: {device.type} has no native bf16"
        if width < BF16_MIN_WIDTH:
            return "fp32", (
                f"auto: a student {width} wide (< {BF16_MIN_WIDTH}) is launch-bound, "
                "where fp32 measured faster than bf16"
            )
        return "bf16", f"auto: native bf16 and a student {width} wide (>= {BF16_MIN_WIDTH})"
    if requested == "bf16" and device.type == "cpu" and not torch.backends.mkldnn.is_available():
        raise ConfigError(
            "trainer.precision=bf16 needs a GPU or a CPU with bf16 support: "
            "use trainer.precision=fp32"
        )
    return requested, f"trainer.precision={requested}"


def resolve_tf32(requested: bool, device: torch.device, precision: str) -> bool:
    """Whether fp32 matmuls run in TF32: asked for, on a CUDA GPU that has TF32, in an fp32 run.
    A bf16 run keeps its float32 computations (the losses) in full fp32."""
    return requested and precision == "fp32" and native_bf16(device)


def apply_matmul_precision(device: torch.device, tf32: bool) -> None:
    """Set this process's fp32 matmul precision for a run on `device` (a CPU run leaves it)."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        torch.backends.cudnn.allow_tf32 = tf32


# SDPA's kernels for every forward kdbench runs. cuDNN's attention is left out: it builds an
# execution plan for each new (batch, length) shape (8-15 ms of host time per call on an H200), and
# length-grouped GLUE batches, evaluation and the teacher's tables give a new shape almost every
# batch. At the paper's length of 128 attention is about 3 % of a step's FLOPs, so the choice among
# the fused kernels that remain (flash, memory-efficient) costs little where shapes are fixed.
ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def holds_bf16_weights(model: nn.Module | None) -> bool:
    """Whether `model`'s weights are bf16 already (a frozen teacher in a bf16 run)."""
    first = next(model.parameters(), None) if model is not None else None
    return first is not None and first.dtype == torch.bfloat16


@contextmanager
def computing(device: torch.device, precision: str, model: nn.Module | None = None):
    """The region a forward of `model` runs in: SDPA among `ATTENTION_BACKENDS`, and bf16 autocast
    in a bf16 run when the model's weights are float32 (the student). A model whose weights are
    bf16 already runs without autocast: autocast would add a cast around each of its LayerNorms and
    matmul inputs and keep its residual stream in float32, for a frozen model that trains nothing.
    The losses cast their inputs to float32 themselves."""
    bf16_autocast = precision == "bf16" and not holds_bf16_weights(model)
    with (
        sdpa_kernel(ATTENTION_BACKENDS),
        torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16_autocast),
    ):
        yield
