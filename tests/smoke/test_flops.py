"""The FLOP model: FlopCounterMode over the real steps equals the analytic count (student forward
and backward, 3x its forward; teacher forward only), and the peak table reads device names."""

from __future__ import annotations

import pytest
import torch

from kdbench.measure import flops, synthetic
from kdbench.measure.bench_agnostic import analytic_flops
from kdbench.objectives.terms import Objective
from kdbench.planning.plan import make_plan
from kdbench.recipes.task_specific import stage_step
from tests.helpers import (
    agnostic_objectives,
    compose_config,
    small_shapes,
    tiny_models,
    tiny_overrides,
)

# Every matmul the models and losses run is in the analytic count; only the order of float sums
# differs.
MARGIN = 0.02
SMALL = small_shapes()
AGNOSTIC = agnostic_objectives()
STAGE1 = [
    "hid_cls",
    "hid_seq",
    "att_mse",
    "att_kl",
    "val_kl",
    "att_kl+val_kl",
    "att_kl+hid_seq",
    "minilm_v2",
    "tinybert",
    "distilbert",
]


def _counted_per_sequence(step, batch) -> float:
    return (
        flops.counted_flops(lambda: step(batch)["total"].backward()) / batch["input_ids"].shape[0]
    )


@pytest.mark.parametrize("objective", AGNOSTIC)
def test_a_task_agnostic_step_counts_its_analytic_flops(objective):
    with synthetic.distillation(objective, SMALL, torch.device("cpu"), "fp32", steps=1) as stage:
        batch = next(iter(stage.loader))
        counted = _counted_per_sequence(stage.step, batch)
        analytic = analytic_flops(stage, batch, SMALL)
    assert analytic == pytest.approx(counted, rel=MARGIN)


@pytest.mark.parametrize("objective", STAGE1)
def test_a_stage1_step_counts_its_analytic_flops(tiny_glue, tmp_path, objective):
    plan = make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path, f"objective={objective}")))
    teacher, student = tiny_models(compose_config(tiny_overrides(tiny_glue, tmp_path)))
    ids = torch.randint(5, 30, (3, 11))
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
        "labels": torch.tensor([0, 1, 0]),
        "example": torch.tensor([0, 1, 2]),
    }
    labels = torch.tensor([0, 1, 0, 1])
    with stage_step(plan, plan.stages["intermediate"], student.train(), teacher.eval(), labels) as (
        step,
        _,
    ):
        counted = _counted_per_sequence(step, batch)
    objective_model = Objective(plan.terms, plan.student_conf, plan.teacher_conf, labels)
    analytic = flops.step_flops(
        objective_model, plan.student_conf, plan.teacher_conf, 11, agnostic=False
    )
    assert analytic.total == pytest.approx(counted, rel=MARGIN)


def test_stopping_at_the_projections_is_in_the_count():
    """att_kl reads q and k of the last layer: its value projection, attention and feed-forward are
    not run."""
    conf = synthetic.teacher_config(SMALL)
    objective = Objective(synthetic.objective_terms("att_kl", conf, conf), conf, conf)
    shape = flops.Shape.of(conf)
    full, _ = flops.forward_flops(shape, 4, 32, {4: {"hidden"}}, 4, 0)
    assert flops.step_flops(objective, conf, conf, 32, agnostic=True).teacher_forward == (
        full - flops.block_flops(shape, 32) + 2 * 2 * 32 * 64 * 64
    )


@pytest.mark.parametrize(
    ("name", "row"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA H100 NVL", "H100 NVL"),
    ],
)
def test_datasheet_peaks_are_read_from_the_device_name(name, row):
    assert flops.datasheet_peak(name, "bf16") == flops.PEAK_TFLOPS[row]["bf16"] * 1e12


def test_devices_without_a_row_or_a_precision_have_no_datasheet_peak():
    assert flops.datasheet_peak("NVIDIA L40S", "bf16") is None
    assert flops.datasheet_peak("Tesla V100-SXM2-16GB", "bf16") is None  # no native bf16
    assert flops.datasheet_peak("Tesla T4", "fp32") == 8.1e12


def test_the_measured_matmul_peak_is_a_rate():
    assert (
        flops.measured_matmul_peak(torch.device("cpu"), torch.float32, size=128, seconds=0.05) > 1e6
    )


def test_a_models_cost_counts_its_attention_on_a_cpu():
    """The record's and the card's FLOPs per example: the CPU's fused attention kernel (an unpadded
    batch takes it) counted with the blocks, classifier and pooler, as the analytic count."""
    from kdbench.measure.cost import flops_per_example
    from tests.helpers import bert_classifier

    model = bert_classifier(2, hidden=64, ffn=128)
    shape, length = flops.Shape.of(model.config), 16
    analytic, _ = flops.forward_flops(shape, 2, length, {}, None, flops.classifier_flops(shape))
    assert flops_per_example(model, length, torch.device("cpu")) == analytic


def test_the_cpus_fused_attention_is_counted_backward_too():
    query = torch.randn(1, 2, 16, 32, requires_grad=True)
    attention = torch.nn.functional.scaled_dot_product_attention
    counted = flops.counted_flops(lambda: attention(query, query, query).sum().backward())
    forward = 2 * (2 * 16 * 16 * 32) * 2  # per head Q K^T and P V, [16, 32] x [32, 16]; 2 heads
    # backward: the scores recomputed, then the four gradient products (torch's formula)
    assert counted == forward + 5 * forward // 2


def _compiled_regions(run) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        run()
    return sum(e.name.startswith("Torch-Compiled Region") for e in profiler.events())


def test_counting_a_compiled_steps_flops_leaves_it_compiled():
    """The bench counts a step's FLOPs before timing it: the count is the eager one, and the step
    still runs its compiled regions afterwards (a compiled region first called under
    FlopCounterMode otherwise runs eagerly ever after)."""
    device = torch.device("cpu")
    with synthetic.distillation(
        "vanilla_kd", SMALL, device, "fp32", steps=1, compile_backend="aot_eager"
    ) as stage:
        batch = next(iter(stage.loader))
        counted = _counted_per_sequence(stage.step, batch)
        regions = _compiled_regions(lambda: stage.step(batch)["total"].backward())
        analytic = analytic_flops(stage, batch, SMALL)
    assert regions > 0
    assert analytic == pytest.approx(counted, rel=MARGIN)
