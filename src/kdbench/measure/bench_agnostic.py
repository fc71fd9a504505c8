"""The bench's `agnostic` mode (`python -m kdbench.bench --mode agnostic`): the task-agnostic
recipe's real loop on random sequences, timed, its FLOPs counted and, on request, its micro-step
profiled."""

from __future__ import annotations

import torch

from kdbench.measure import flops, synthetic
from kdbench.measure.timing import (
    PerStep,
    Timer,
    device_name,
    device_time_by_op,
    peak_memory_gib,
    synchronisations,
)
from kdbench.training import loop
from kdbench.training.steps import to_device

PROFILED = 2  # micro-steps in a `Timing.profile`


def measure_agnostic(
    objective: str,
    shapes: synthetic.Shapes,
    device: torch.device,
    precision: str,
    timing: synthetic.Timing,
) -> dict:
    """The task-agnostic distillation through `loop.train`, run as `timing` says."""
    with synthetic.timed_distillation(objective, shapes, device, precision, timing) as stage:
        batch = to_device(next(iter(stage.loader)), device)
        per_example, kernels = flops.flops_per_example(stage.step, batch, stage.modules)
        analytic = analytic_flops(stage, batch, shapes)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        timer = Timer(device, timing.warmup)
        with synchronisations(device) as syncs:
            per_step = PerStep(syncs)
            loop.train(stage, [timer, per_step])
        profiled = micro_step_profile(stage, batch, device) if timing.profile else {}
    examples = timing.steps * shapes.micro_batch * shapes.accumulation
    bound = synthetic.step_memory(objective, shapes, precision).total(shapes.micro_batch)
    result = {
        "mode": "agnostic",
        "objective": objective,
        **shape_fields(shapes),
        "device": device_name(device),
        "precision": precision,
        "compile_backend": timing.compile_backend,
        "workers": timing.loading.workers,
        "steps": timing.steps,
        "seconds": timer.seconds,
        "cpu_seconds": timer.cpu_seconds,
        "examples_per_s": examples / timer.seconds,
        "tokens_per_s": examples * shapes.length / timer.seconds,
        "flops_per_example": per_example,
        "analytic_flops_per_example": analytic,
        "attention_kernels": kernels,
        **peak_memory_gib(device),
        "memory_bound_gib": bound / 2**30,
        **profiled,
    }
    if device.type == "cuda":  # the steps' own: the stage's closing read comes after the last
        result["syncs_per_step"] = sum(per_step.counts) / len(per_step.counts)
    return result | flops.utilisation(result, device, precision)


def micro_step_profile(stage: loop.Stage, batch: dict, device: torch.device) -> dict:
    """`device_time_by_op` of the stage's micro-step (forward and backward) on `batch`."""

    def run():
        stage.step(batch)["total"].backward()

    profiled = device_time_by_op(run, device, PROFILED)
    for module in stage.modules:
        module.zero_grad(set_to_none=True)
    return {"profile": profiled}


def shape_fields(shapes: synthetic.Shapes) -> dict:
    """A result's fields for the models' and batches' shapes."""
    return {
        "teacher": shapes.teacher.name,
        "student": shapes.student.name,
        "length": shapes.length,
        "micro_batch": shapes.micro_batch,
        "accumulation": shapes.accumulation,
    }


def analytic_flops(stage: loop.Stage, batch: dict, shapes: synthetic.Shapes) -> float:
    """The analytic count per example of the stage's step (`flops.step_flops`) on this batch."""
    student, objective = stage.modules
    where = "attended_positions" if objective.logit_positions == "attended" else "mlm_positions"
    masked = batch[where].numel() / shapes.micro_batch if where in batch else 0.0  # the head's rows
    teacher_conf = synthetic.teacher_config(shapes)
    return flops.step_flops(
        objective, student.config, teacher_conf, shapes.length, agnostic=True, masked=masked
    ).total
