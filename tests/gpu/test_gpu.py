"""The GPU path where there is a GPU: CUDA against the CPU for every objective, no host
synchronisation between log steps, a fused attention kernel (not cuDNN's) for bf16 batches, a
profile's accounting of kernels, resume on the GPU, two-GPU NCCL DDP against one process. Models
and steps are built by `kdbench.measure.synthetic` (no Hydra)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import replace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import BertForSequenceClassification

from kdbench.data.batches import PADDED
from kdbench.measure import synthetic
from kdbench.measure.flops import attention_kernels
from kdbench.measure.timing import PerStep, device_time_by_op, synchronisations
from kdbench.models.student import build_student
from kdbench.objectives.features import FeatureRecorder
from kdbench.objectives.terms import Objective
from kdbench.records.steplog import StepLog
from kdbench.runtime.distributed import World
from kdbench.teacher.frozen import freeze
from kdbench.training import loop
from kdbench.training.hooks import Hook, LogLosses
from kdbench.training.steps import (
    StudentSide,
    distillation_step,
    output_logits,
    teacher_records_now,
    to_device,
)
from tests.helpers import (
    agnostic_objectives,
    assert_same_losses_and_grads,
    free_port,
    small_shapes,
    verdict_reads,
)

SMALL = small_shapes(2)
CPU, CUDA = torch.device("cpu"), torch.device("cuda")
AGNOSTIC = agnostic_objectives()
FUSED = ("flash", "efficient")  # SDPA's fused kernels kdbench allows (cuDNN's is left out)
STAGE1 = [
    "hid_cls",
    "hid_seq",
    "hid_cls_contrast",
    "att_mse",
    "att_kl",
    "val_kl",
    "att_mse+hid_seq",
    "att_kl+hid_seq",
    "att_kl+val_kl",
    "minilm_v2",
    "tinybert",
    "distilbert",
]


@contextmanager
def exact_fp32():
    """fp32 matmuls without TF32, to compare with the CPU."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def losses_and_grads(step, batch, modules) -> tuple[dict, dict]:
    losses = step(batch)
    losses["total"].backward()
    grads = {
        f"{i}.{name}": p.grad.cpu()
        for i, module in enumerate(modules)
        for name, p in module.named_parameters()
        if p.grad is not None
    }
    return {k: v.detach().cpu() for k, v in losses.items()}, grads


def agnostic_step(objective: str, device: torch.device) -> tuple[dict, dict]:
    with synthetic.distillation(objective, SMALL, device, "fp32", steps=1, dropout=0.0) as stage:
        return losses_and_grads(
            stage.step, to_device(next(iter(stage.loader)), device), stage.modules
        )


def stage1_step(objective_name: str, device: torch.device) -> tuple[dict, dict]:
    """One stage-1 step of a random classifier teacher and student, wired as the task-specific
    recipe does."""
    conf = synthetic.teacher_config(SMALL)
    torch.manual_seed(0)
    teacher = freeze(BertForSequenceClassification(conf)).to(device)
    student = build_student(conf, SMALL.student, 2, 1, dropout=0.0).to(device)
    terms = synthetic.objective_terms(objective_name, student.config, conf, agnostic=False)
    objective = Objective(terms, student.config, conf, torch.arange(16) % 2, 0).to(device)
    logits = output_logits if objective.uses_logits else None
    sequences = synthetic.random_sequences(8, SMALL)
    ids = torch.stack([s["input_ids"] for s in sequences])
    batch = to_device(
        {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "labels": torch.arange(8) % 2,
            "example": torch.arange(8),
        },
        device,
    )
    with (
        FeatureRecorder(
            student, objective.needs("student"), objective.last_layer("student")
        ) as student_side,
        FeatureRecorder(
            teacher, objective.needs("teacher"), objective.last_layer("teacher")
        ) as teacher_side,
    ):
        step = distillation_step(
            StudentSide(student_side, objective, logits),
            teacher_records_now(teacher_side, logits, device, "fp32"),
            device,
            "fp32",
        )
        return losses_and_grads(step, batch, [student, objective])


def assert_same(expected: tuple[dict, dict], actual: tuple[dict, dict]) -> None:
    assert_same_losses_and_grads(expected, actual, rtol=1e-4)


@pytest.mark.parametrize("objective", AGNOSTIC)
def test_a_task_agnostic_step_on_cuda_equals_the_cpu(objective):
    with exact_fp32():
        assert_same(agnostic_step(objective, CPU), agnostic_step(objective, CUDA))


@pytest.mark.parametrize("objective", STAGE1)
def test_a_stage1_step_on_cuda_equals_the_cpu(objective):
    with exact_fp32():
        assert_same(stage1_step(objective, CPU), stage1_step(objective, CUDA))


LOG_EVERY, LOGGED_STEPS = 2, 5


@pytest.mark.parametrize("objective", ["att_kl+val_kl", "hid_seq", "vanilla_kd"])
def test_a_stage_synchronises_only_at_its_log_steps_and_its_end(objective, monkeypatch):
    """Between log steps nothing waits for the GPU; each log step reads its losses and verdict once,
    and the stage its closing verdict once: one synchronisation each."""
    reads = verdict_reads(monkeypatch)
    with synthetic.distillation(objective, SMALL, CUDA, "bf16", steps=LOGGED_STEPS) as stage:
        with synchronisations(CUDA) as syncs:
            read_per_step, syncs_per_step = PerStep(reads), PerStep(syncs)
            log = LogLosses(StepLog(None), LOG_EVERY)
            loop.train(stage, [log, read_per_step, syncs_per_step])
    steps = range(1, LOGGED_STEPS + 1)
    logged = [int(step % LOG_EVERY == 0 or step == LOGGED_STEPS) for step in steps]
    assert (read_per_step.counts, read_per_step.at_end) == (logged, 1)
    assert (syncs_per_step.counts, syncs_per_step.at_end) == (logged, 1), syncs


def padded(batch: dict) -> dict:
    """The batch with the last positions of all rows but the first padding, as the collator says."""
    mask = batch["attention_mask"].clone()
    mask[1:, -5:] = 0
    return batch | {"attention_mask": mask, PADDED: True}


@pytest.mark.parametrize("padding", [False, True])
def test_bf16_batches_run_a_fused_attention_kernel_not_cudnns(padding):
    """An unpadded batch has no mask (the flash kernel); a padded one SDPA's boolean mask, which
    rules flash out (the memory-efficient kernel). Never cuDNN's, nor the unfused math one."""
    with synthetic.distillation("hid_seq", SMALL, CUDA, "bf16", steps=1) as stage:
        batch = next(iter(stage.loader))
        batch = to_device(padded(batch) if padding else batch, CUDA)
        kernels = attention_kernels(lambda: stage.step(batch)["total"].backward())
    assert {f"_scaled_dot_product_{fused}_attention" for fused in FUSED} & set(kernels), kernels
    assert not any("cudnn" in k or "math" in k for k in kernels), kernels


def test_an_eager_profile_finds_every_kernel_under_an_aten_operator():
    """`outside_aten_ms` holds a compiled graph's kernels: eagerly (a product, an activation, a
    reduction) it is next to nothing of the busy time."""
    x = torch.randn(1024, 1024, device=CUDA)
    profile = device_time_by_op(lambda: torch.relu(x @ x).sum(), CUDA, 3)
    assert profile["busy_ms"] > 0, profile
    assert abs(profile["outside_aten_ms"]) < 0.05 * profile["busy_ms"], profile


class Interrupt(Exception):
    pass


class SaveAndStop(Hook):
    def __init__(self, at_step: int, path):
        self.at_step, self.path = at_step, path

    def on_step(self, progress) -> None:
        if progress.step == self.at_step:
            torch.save(progress.state(), self.path)
            raise Interrupt


def trained_student(hooks=(), resume: dict | None = None) -> dict:
    with synthetic.distillation(
        "att_kl+val_kl", SMALL, CUDA, "fp32", steps=4
    ) as stage:  # dropout on
        loop.train(stage, hooks, resume)
        return {name: p.detach().cpu().clone() for name, p in stage.modules[0].named_parameters()}


def test_a_run_resumed_on_the_gpu_ends_where_an_uninterrupted_one_does(tmp_path):
    straight = trained_student()
    with pytest.raises(Interrupt):
        trained_student([SaveAndStop(2, tmp_path / "state.pt")])
    resumed = trained_student(resume=torch.load(tmp_path / "state.pt", weights_only=False))
    for name in straight:
        torch.testing.assert_close(resumed[name], straight[name], rtol=1e-4, atol=1e-6)


def ddp_rank(rank: int, backend: str, port: int, out: str) -> None:
    """One of two processes: half of each global batch, gradients all-reduced; rank 0 saves the
    student."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=rank, world_size=2)
    device = torch.device("cuda", rank) if backend == "nccl" else CPU
    if backend == "nccl":
        torch.cuda.set_device(device)
    try:
        shapes = replace(SMALL, accumulation=1)
        with synthetic.distillation(
            "att_kl+val_kl",
            shapes,
            device,
            "fp32",
            steps=3,
            world=World(rank, 2, rank),
            dropout=0.0,
        ) as stage:
            loop.train(stage, [])
            if rank == 0:
                torch.save(
                    {n: p.detach().cpu() for n, p in stage.modules[0].named_parameters()}, out
                )
    finally:
        dist.destroy_process_group()


def two_processes_and_one(backend: str, device: torch.device, out) -> tuple[dict, dict]:
    """The student after 3 steps of two data-parallel processes, and of one with 2 micro-batches per
    step."""
    mp.spawn(ddp_rank, args=(backend, free_port(), str(out)), nprocs=2)
    with synthetic.distillation(
        "att_kl+val_kl", SMALL, device, "fp32", steps=3, dropout=0.0
    ) as stage:
        loop.train(stage, [])
        single = {n: p.detach().cpu() for n, p in stage.modules[0].named_parameters()}
    return torch.load(out), single


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_gpus_with_nccl_equal_one_process_with_accumulation(tmp_path):
    with exact_fp32():
        parallel, single = two_processes_and_one("nccl", CUDA, tmp_path / "rank0.pt")
    for name in single:
        torch.testing.assert_close(parallel[name], single[name], rtol=1e-4, atol=1e-6)
