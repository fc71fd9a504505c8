"""The precision a run computes in: `trainer.precision` and `trainer.tf32` resolved for its device,
and applied.

`auto` takes bf16 autocast only where the device computes bf16 natively (a CUDA GPU of compute
capability 8.0 or later: A100, H100, RTX 30xx on; an AMD GPU under ROCm); elsewhere fp32: on an
older GPU (V100, T4, which would emulate bf16) and on the CPU. TF32 matmuls are used by fp32 runs on
a GPU that has them, when `trainer.tf32` allows them.
"""

from __future__ import annotations

import torch

from kdbench.errors import ConfigError

NATIVE_BF16_CAPABILITY = (8, 0)  # Ampere: bf16 and TF32 tensor cores


def native_bf16(device: torch.device) -> bool:
    """Whether `device` computes bf16 matmuls in hardware (emulation on an older GPU does not
    count)."""
    if device.type != "cuda":
        return False
    capability = torch.cuda.get_device_capability(device)
    return bool(torch.version.hip) or capability >= NATIVE_BF16_CAPABILITY


def resolve_precision(requested: str, device: torch.device) -> str:
    """fp32 or bf16: `auto` is bf16 where the device has it natively, fp32 elsewhere."""
    if requested == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    if requested == "bf16" and device.type == "cpu" and not torch.backends.mkldnn.is_available():
        raise ConfigError(
            "trainer.precision=bf16 needs a GPU or a CPU with bf16 support: "
            "use trainer.precision=fp32"
        )
    return requested


def resolve_tf32(requested: bool, device: torch.device, precision: str) -> bool:
    """Whether fp32 matmuls run in TF32: asked for, on a CUDA GPU that has TF32, in an fp32 run.
    A bf16 run keeps its float32 computations (the losses) in full fp32."""
    return requested and precision == "fp32" and native_bf16(device)


def apply_matmul_precision(device: torch.device, tf32: bool) -> None:
    """Set this process's fp32 matmul precision for a run on `device` (a CPU run leaves it)."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        torch.backends.cudnn.allow_tf32 = tf32
