"""The FLOP and MFU model: a step's FLOPs, counted and analytic, and the peak rate they are measured
against.

Counted: `torch.utils.flop_counter.FlopCounterMode` over the real step (matmuls and attention,
forward and backward). Analytic, per sequence of `length` tokens (a matmul [m, k] @ [k, n] is 2mkn
FLOPs):

- a transformer block of width D and feed-forward width F: 2L(4D^2 + 2DF) for its linears + 4L^2 D
  for attention; a last layer read at its projections only runs those (2LD^2 each, in query, key,
  value order);
- the heads: pooler and classifier (2D^2 + 2DC) when a task-specific step reads logits, the MLM head
  at the masked positions only (M(2D^2 + 2DV)) when a task-agnostic one does;
- the losses: a score map (q k^T, or a relation x x^T) is 2L^2 D per side, its gradient two more on
  the student's; a width projection W_h is 2 L D_S D_T (one token for [CLS]), 3x with its backward;
- the student runs forward and backward (3x its forward: each matmul's backward is two of the same
  size; less the backward of projections that run but are not read), the frozen teacher forward
  only.

Model FLOPs utilisation (MFU) = FLOPs per second / the device's dense peak for the precision used.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from kdbench.objectives.features import PROJECTION_NAMES
from kdbench.objectives.losses import LOSSES
from kdbench.objectives.tensors import LOGITS

# Dense (not sparse: a datasheet's sparse figure halved) peak TFLOP/s from the vendors'
# datasheets: bf16 tensor cores, TF32 tensor cores, fp32 (no tensor cores). V100 and T4 have no
# bf16 or TF32: their fp16 tensor-core rate is not used for bf16.
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H200": {"bf16": 989.0, "tf32": 494.0, "fp32": 67.0},  # NVIDIA H200 datasheet (SXM)
    "H200 NVL": {"bf16": 835.0, "tf32": 418.0, "fp32": 60.0},  # H200 datasheet (NVL)
    "H100 NVL": {"bf16": 835.0, "tf32": 418.0, "fp32": 60.0},  # H100 datasheet (NVL)
    "H100 SXM": {"bf16": 989.0, "tf32": 494.0, "fp32": 67.0},  # NVIDIA H100 datasheet (SXM5)
    "H100 PCIe": {"bf16": 756.0, "tf32": 378.0, "fp32": 51.0},  # NVIDIA H100 datasheet (PCIe)
    "A100": {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5},  # NVIDIA A100 datasheet (SXM and PCIe)
    "L4": {"bf16": 121.0, "tf32": 60.0, "fp32": 30.3},  # NVIDIA L4 datasheet
    "A10": {"bf16": 125.0, "tf32": 62.5, "fp32": 31.2},  # NVIDIA A10 datasheet
    "RTX 4090": {"bf16": 165.2, "tf32": 82.6, "fp32": 82.6},  # Ada whitepaper (fp32 accumulate)
    "RTX 3090": {
        "bf16": 71.0,
        "tf32": 35.6,
        "fp32": 35.6,
    },  # Ampere GA102 whitepaper (fp32 accumulate)
    "V100": {"fp32": 15.7},  # NVIDIA V100 datasheet (SXM2)
    "T4": {"fp32": 8.1},  # NVIDIA T4 datasheet
}


# The words of a CUDA device name that pick its row, most specific first ("NVIDIA H100 80GB HBM3" ->
# H100 SXM).
DEVICE_WORDS = (
    ("H200 NVL", {"H200", "NVL"}),
    ("H200", {"H200"}),
    ("H100 NVL", {"H100", "NVL"}),
    ("H100 PCIe", {"H100", "PCIE"}),
    ("H100 SXM", {"H100"}),
    ("A100", {"A100"}),
    ("L4", {"L4"}),
    ("A10", {"A10"}),
    ("RTX 4090", {"4090"}),
    ("RTX 3090", {"3090"}),
    ("V100", {"V100"}),
    ("T4", {"T4"}),
)


def datasheet_peak(device_name: str, precision: str) -> float | None:
    """The table's dense peak in FLOP/s for a CUDA device name and precision (bf16, tf32, fp32);
    None if unknown."""
    words = set(re.split(r"[\s_-]+", device_name.upper()))
    for row, needed in DEVICE_WORDS:
        if needed <= words:
            rate = PEAK_TFLOPS[row].get(precision)
            return None if rate is None else rate * 1e12
    return None


def measured_matmul_peak(
    device: torch.device,
    dtype: torch.dtype,
    size: int = 1024,
    seconds: float = 1.0,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """The best FLOP/s of square `size` matmuls on `device` in `dtype` over about `seconds` (after a
    warm-up), timed by `clock` (`time.process_time`: FLOPs per CPU-second, which other processes on
    the cores do not lower)."""
    a, b = (torch.randn(size, size, device=device).to(dtype) for _ in range(2))
    best = 0.0
    deadline = time.perf_counter() + seconds
    a @ b  # warm-up
    while time.perf_counter() < deadline:
        _synchronize(device)
        start = clock()
        for _ in range(4):
            a @ b
        _synchronize(device)
        elapsed = clock() - start
        best = max(best, 4 * 2 * size**3 / elapsed) if elapsed > 0 else best
    return best


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _cpu_flash_attention(query_shape, key_shape, value_shape, *args, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_flash_attention_backward(grad_shape, query_shape, key_shape, value_shape, *args, **kw):
    return sdpa_backward_flop_count(grad_shape, query_shape, key_shape, value_shape)


@contextmanager
def flop_counter() -> Iterator[FlopCounterMode]:
    """FlopCounterMode, counting the CPU's fused attention kernel too, forward and backward (torch
    has no formula for either), over eager code: compiled regions run eagerly inside it, since a
    compiled region first called under the counter runs eagerly ever after (and a compiled graph's
    fused kernels dispatch no operators to count)."""
    cpu_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    cpu_flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
    mapping = {cpu_flash: _cpu_flash_attention, cpu_flash_backward: _cpu_flash_attention_backward}
    with (
        torch.compiler.set_stance("force_eager"),
        FlopCounterMode(display=False, custom_mapping=mapping) as counter,
    ):
        yield counter


def counted_flops(run: Callable[[], object]) -> int:
    """The FLOPs `run()` performs, forward and backward, as FlopCounterMode counts them."""
    with flop_counter() as counter:
        run()
    return counter.get_total_flops()


@dataclass(frozen=True)
class Shape:
    """An encoder's dimensions, from a transformers config."""

    hidden: int
    ffn: int
    vocab: int
    labels: int

    @classmethod
    def of(cls, config) -> Shape:
        return cls(
            config.hidden_size, config.intermediate_size, config.vocab_size, config.num_labels
        )


def block_flops(shape: Shape, length: int) -> int:
    d = shape.hidden
    return 2 * length * (4 * d * d + 2 * d * shape.ffn) + 4 * length * length * d


def forward_flops(
    shape: Shape,
    layers: int,
    length: int,
    needs: Mapping[int, set[str]],
    stop_after: int | None,
    head: float,
) -> tuple[float, float]:
    """One sequence's forward through `layers` blocks, or up to `stop_after`, plus `head` FLOPs; and
    the part of it no loss reads (projections that run before the last needed one: no backward goes
    through them)."""
    if stop_after is None:
        return layers * block_flops(shape, length) + head, 0.0
    flops = (stop_after - 1) * block_flops(shape, length) + head
    wanted = needs.get(stop_after, set())
    read = wanted & set(PROJECTION_NAMES)
    if "hidden" in wanted or not read:
        return flops + block_flops(shape, length), 0.0
    projection = 2 * length * shape.hidden**2
    ran = 1 + max(list(PROJECTION_NAMES).index(name) for name in read)
    return flops + ran * projection, (ran - len(read)) * projection


def classifier_flops(shape: Shape) -> int:
    """Pooler and classifier on the [CLS] token."""
    return 2 * shape.hidden**2 + 2 * shape.hidden * shape.labels


def mlm_head_flops(shape: Shape, masked: float) -> float:
    """The MLM head (transform and decoder) at `masked` positions."""
    return masked * (2 * shape.hidden**2 + 2 * shape.hidden * shape.vocab)


def loss_flops(terms, student: Shape, teacher: Shape, length: int) -> tuple[int, int]:
    """The losses' matmuls per sequence: (student side, forward and backward; teacher side)."""
    student_flops = teacher_flops = 0
    for term in terms:
        if term.feature == LOGITS:
            continue
        entry, pairs = LOSSES[term.loss], len(term.pairs)
        if entry.fused is not None:  # a score map per side, the student's gradient two more
            student_flops += pairs * 3 * 2 * length * length * student.hidden
            teacher_flops += pairs * 2 * length * length * teacher.hidden
        if term.projected:
            tokens = 1 if term.feature == "cls" else length
            student_flops += pairs * 3 * 2 * tokens * student.hidden * teacher.hidden
    return student_flops, teacher_flops


@dataclass(frozen=True)
class StepFlops:
    """Analytic FLOPs of one sequence in a distillation step."""

    student_forward: float
    student_unread: float  # forward work of the student no loss reads: it has no backward
    teacher_forward: float
    student_losses: float
    teacher_losses: float

    @property
    def total(self) -> float:
        student = 3 * self.student_forward - 2 * self.student_unread
        return student + self.teacher_forward + self.student_losses + self.teacher_losses


def step_flops(
    objective, student_conf, teacher_conf, length: int, *, agnostic: bool, masked: float = 0.0
) -> StepFlops:
    """The analytic count of one sequence of `length` tokens in a stage-1 (`agnostic=False`) or
    task-agnostic step with `objective` (an `Objective`); `masked`: the MLM head's rows per sequence
    in a task-agnostic step (its masked positions, or every attended token for soft targets
    there)."""
    sides = {}
    for side, conf in (("student", student_conf), ("teacher", teacher_conf)):
        shape, needs = Shape.of(conf), objective.needs(side)
        layers = conf.num_hidden_layers
        if (
            agnostic
        ):  # the recipe's recorder: the MLM head on the last layer's output when logits are read
            if objective.uses_logits:
                needs.setdefault(layers, set()).add("hidden")
            head = mlm_head_flops(shape, masked) if objective.uses_logits else 0
            sides[side] = forward_flops(shape, layers, length, needs, max(needs), head)
        else:
            head = classifier_flops(shape) if objective.uses_logits else 0
            sides[side] = forward_flops(
                shape, layers, length, needs, objective.last_layer(side), head
            )
    losses = loss_flops(objective.terms, Shape.of(student_conf), Shape.of(teacher_conf), length)
    return StepFlops(*sides["student"], sides["teacher"][0], *losses)


@functools.cache
def peak_flops(device: torch.device, precision: str) -> tuple[float, str]:
    """The dense peak FLOP/s for the precision used, and where it comes from (datasheet or measured
    once)."""
    if device.type == "cuda":
        tf32 = torch.backends.cuda.matmul.allow_tf32
        kind = precision if precision == "bf16" else ("tf32" if tf32 else "fp32")
        name = torch.cuda.get_device_name(device)
        if (peak := datasheet_peak(name, kind)) is not None:
            return peak, f"datasheet {name} {kind}"
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    if device.type == "cpu":  # per CPU-second: the cores may be shared
        peak = measured_matmul_peak(device, dtype, seconds=3.0, clock=time.process_time)
        return peak, f"measured cpu {dtype} matmul per CPU-second"
    return measured_matmul_peak(device, dtype), f"measured {device.type} {dtype} matmul"


def utilisation(result: dict, device: torch.device, precision: str) -> dict:
    """Achieved FLOP/s and MFU; on the CPU per CPU-second (the examples over the steps' CPU time),
    as its peak."""
    peak, source = peak_flops(device, precision)
    rate = result["examples_per_s"]
    if device.type == "cpu":
        rate *= result["seconds"] / result["cpu_seconds"]
    achieved = result["flops_per_example"] * rate
    return {
        "achieved_tflops": achieved / 1e12,
        "peak_tflops": peak / 1e12,
        "peak_source": source,
        "mfu": achieved / peak,
    }


def attention_kernels(run) -> list[str]:
    """The scaled-dot-product attention kernels `run()` dispatches to (aten op names)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        run()
    names = {event.name for event in profiler.events()}
    return sorted(
        n.removeprefix("aten::")
        for n in names
        if "scaled_dot_product" in n or "flash_attention" in n or "efficient_attention" in n
    )


def flops_per_example(step, batch: dict, modules) -> tuple[float, list[str]]:
    """FLOPs per example of one micro-step (forward and backward) and the attention kernels it
    used."""

    def run():
        step(batch)["total"].backward()

    counted = counted_flops(run) / batch["input_ids"].shape[0]
    kernels = attention_kernels(run)
    for module in modules:
        module.zero_grad(set_to_none=True)
    return counted, kernels
