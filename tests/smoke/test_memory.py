"""The step's memory bound (`kdbench.measure.memory.step_memory`) against what autograd keeps for
the backward in each task-agnostic objective's real step, fp32 and bf16, and what it allows at the
paper's shapes."""

from __future__ import annotations

import pytest
import torch

from kdbench.measure import memory, synthetic
from kdbench.planning.specs import ShapeSpec
from tests.helpers import agnostic_objectives

MICRO = 8
SHAPES = [(64, 2, 32), (32, 4, 64), (128, 2, 16)]  # width, heads, length: either term may dominate


def shapes_of(width: int, heads: int, length: int) -> synthetic.Shapes:
    return synthetic.Shapes(
        teacher=ShapeSpec("teacher", 4, width, heads, 4 * width),
        student=ShapeSpec("student", 2, width, heads, 4 * width),
        vocab=2048,
        length=length,
        micro_batch=MICRO,
        accumulation=1,
    )


def kept_and_bound(objective: str, precision: str, shapes: synthetic.Shapes) -> tuple[int, int]:
    """Bytes autograd keeps for the backward of one micro-batch (parameters aside), and the bound
    of the student's side for it: what it keeps per sequence and autocast's copies of its weights.
    Without dropout the CPU runs SDPA's flash kernel, which keeps no attention map, as a GPU's
    fused kernels do."""
    cpu = torch.device("cpu")
    with synthetic.distillation(objective, shapes, cpu, precision, 1, dropout=0.0) as stage:
        kept = {}

        def keep(tensor):
            kept[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
            stage.step(next(iter(stage.loader)))
        student, objective_module = stage.modules
        parameters = {
            p.untyped_storage().data_ptr() for module in stage.modules for p in module.parameters()
        }
        teacher_conf = synthetic.teacher_config(shapes)
        bound = memory.step_memory(
            objective_module, student.config, teacher_conf, shapes.length, precision
        )
        weights = memory.cast_weights(objective_module, student.config, precision)
    return sum(
        n for key, n in kept.items() if key not in parameters
    ), MICRO * bound.student + weights


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("objective", agnostic_objectives())
def test_the_bound_holds_what_the_backward_keeps_within_a_factor_of_1_5(objective, precision):
    for shape in SHAPES:
        kept, bound = kept_and_bound(objective, precision, shapes_of(*shape))
        assert kept <= bound <= 1.5 * kept, (shape, kept, bound, round(bound / kept, 2))


def test_auto_gives_an_80_gib_gpu_at_least_256_paper_sequences_per_micro_batch():
    for name in agnostic_objectives():
        bound = synthetic.step_memory(name, synthetic.Shapes(), "bf16")
        assert memory.fitting_micro_batch(1024, bound, 80 * 2**30) >= 256, name
