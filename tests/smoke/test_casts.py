"""What a bf16 step launches: the casts autocast adds and the kernel-level ops, per student block
and per teacher block, counted on the CPU at the dispatcher (a GPU launches a kernel for each)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kdbench.measure import synthetic
from kdbench.measure.timing import OpCounts
from kdbench.training.steps import to_device
from tests.helpers import small_shapes

CPU = torch.device("cpu")
LINEARS_PER_BLOCK = 6  # query, key, value, attention output, intermediate, output
# Forward: each linear's weight and bias cast to bf16, the block's input cast once for its three
# projections and the attention's LayerNorm output once for the feed-forward. Backward: the same
# casts' gradients back to float32, and the two outputs that join the float32 residual stream.
CASTS_PER_STUDENT_BLOCK = 2 * (2 * LINEARS_PER_BLOCK + 2) + 2
KERNELS_PER_STUDENT_BLOCK = 68  # casts included, at dropout 0 (the CPU's fused attention)


def step_counts(objective: str, student_layers: int, teacher_layers: int) -> dict:
    """The op counts of one bf16 task-agnostic step (forward and backward)."""
    base = small_shapes(1)
    shapes = replace(
        base,
        student=replace(base.student, num_layers=student_layers),
        teacher=replace(base.teacher, num_layers=teacher_layers),
    )
    with synthetic.distillation(objective, shapes, CPU, "bf16", steps=1, dropout=0.0) as stage:
        batch = to_device(next(iter(stage.loader)), CPU)
        with OpCounts() as ops:
            stage.step(batch)["total"].backward()
    return ops.counts


@pytest.mark.parametrize("objective", ["hid_seq", "att_kl+val_kl", "vanilla_kd"])
def test_a_bf16_student_block_launches_only_the_casts_autocast_needs(objective):
    one, two = step_counts(objective, 1, 4), step_counts(objective, 2, 4)
    assert two["casts"] - one["casts"] == CASTS_PER_STUDENT_BLOCK
    assert two["kernels"] - one["kernels"] <= KERNELS_PER_STUDENT_BLOCK


def test_the_frozen_bf16_teacher_adds_no_cast():
    assert step_counts("hid_seq", 1, 4)["casts"] == step_counts("hid_seq", 1, 2)["casts"]
