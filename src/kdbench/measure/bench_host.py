"""The bench's `host` mode (`python -m kdbench.bench --mode host`): the host's time per micro-step
of the task-agnostic loop with tiny widths and vocabulary (the paper's depths), the time of
collating one paper micro-batch on the main thread, and the target they are held to."""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial

import torch

from kdbench.data.batches import CorpusCollator
from kdbench.measure import flops, memory, synthetic
from kdbench.measure.timing import Timer, device_name
from kdbench.training import loop

TINY_WIDTH = dict(hidden_size=16, num_heads=2, ffn_size=32)  # the compute is negligible
TINY_VOCAB = 1024  # no vocabulary-sized tensors (embedding gradients, MLM logits) either
# the host target: half the GPU time of a micro-batch at this MFU on this device, of this memory
TARGET_MFU, TARGET_DEVICE, TARGET_MEMORY = 0.4, "H100 SXM", 80 * 2**30


def auto_micro_batch(
    objective: str,
    shapes: synthetic.Shapes,
    batch: int,
    device: torch.device,
    precision: str,
    *,
    host: bool,
) -> int:
    """`--micro-batch auto`: what `stages.distillation.device_batch_size=auto` chooses for a step of
    `shapes` on `device`; with `host` (the host mode), on TARGET_DEVICE (bf16)."""
    if host:
        bound = synthetic.step_memory(objective, shapes, "bf16")
        return memory.fitting_micro_batch(batch, bound, TARGET_MEMORY)
    bound = partial(synthetic.step_memory, objective, shapes, precision)
    return memory.device_batch("auto", batch, device, bound)


def host_target_ms(objective: str, micro_batch: int) -> dict:
    """Half the GPU time of one paper micro-batch (64 sequences, and `micro_batch`) at TARGET_MFU
    on TARGET_DEVICE, from the analytic count."""
    paper = synthetic.Shapes()
    model, student, teacher = synthetic.meta_objective(objective, paper)
    masked = 0.15 * paper.length if model.uses_logits else 0.0
    per_example = flops.step_flops(
        model, student, teacher, paper.length, agnostic=True, masked=masked
    ).total
    sequence_ms = 1e3 * per_example / (TARGET_MFU * flops.PEAK_TFLOPS[TARGET_DEVICE]["bf16"] * 1e12)
    return {
        "paper_flops_per_example": per_example,
        "paper_micro_batch_gpu_ms": paper.micro_batch * sequence_ms,
        "target_host_ms": paper.micro_batch * sequence_ms / 2,
        "target_host_ms_at_micro_batch": micro_batch * sequence_ms / 2,
    }


def tiny_shapes(shapes: synthetic.Shapes) -> synthetic.Shapes:
    """`shapes` with tiny widths and vocabulary, 2 sequences of 16 tokens: the same depths and
    accumulation."""
    return replace(
        shapes,
        teacher=replace(shapes.teacher, name="tiny teacher", **TINY_WIDTH),
        student=replace(shapes.student, name="tiny student", **TINY_WIDTH),
        micro_batch=2,
        length=16,
        vocab=TINY_VOCAB,
    )


def collate_ms(masking, shapes: synthetic.Shapes) -> float:
    """The main thread's CPU time, in ms, of collating one micro-batch of `shapes` (the stage's
    `masking` at the vocabulary of `shapes`)."""
    collate = CorpusCollator(masking and replace(masking, vocab_size=shapes.vocab), 0)
    sequences = [
        {**s, "epoch": 0, "example": i}
        for i, s in enumerate(synthetic.random_sequences(shapes.micro_batch, shapes))
    ]
    start = time.thread_time()
    collate(sequences)
    return 1e3 * (time.thread_time() - start)


def measure_host(
    objective: str,
    shapes: synthetic.Shapes,
    device: torch.device,
    timing: synthetic.Timing,
    precision: str = "bf16",
) -> dict:
    """Host time per micro-step with `tiny_shapes(shapes)` (the host's work does not grow with the
    widths and lengths), and the time of collating one micro-batch of `shapes` on the main thread
    (none where `timing.loading` has DataLoader workers: they collate), at `precision` (bf16
    autocast, as on the target GPU: its casts are host work too), eager or compiled by
    `timing.compile_backend` (a compiled call's guards and launches are host work too).

    The time is the main thread's CPU time (`time.thread_time`) with one intra-op thread, the
    fastest optimizer step's over its micro-steps: a host that feeds a GPU runs no kernels of size,
    the work of worker processes and of other processes sharing the cores is not counted, and the
    minimum drops steps slowed by them (caches, memory bandwidth)."""
    tiny = tiny_shapes(shapes)
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if device.type == "cpu" else threads)
    try:
        with synthetic.timed_distillation(objective, tiny, device, precision, timing) as stage:
            timer = Timer(device, timing.warmup, time.thread_time)
            loop.train(stage, [timer])
        collating = collate_ms(stage.loader.collate_fn.masking, shapes)
    finally:
        torch.set_num_threads(threads)
    collate = collating if timing.loading.workers == 0 else 0.0  # the workers collate
    step_ms = 1e3 * min(timer.laps) / tiny.accumulation
    return {
        "mode": "host",
        "objective": objective,
        "device": device_name(device),
        "clock": "thread_time, fastest step",
        "precision": precision,
        "compile_backend": timing.compile_backend,
        "workers": timing.loading.workers,
        "layers": [tiny.teacher.num_layers, tiny.student.num_layers],
        "width": TINY_WIDTH["hidden_size"],
        "vocab": TINY_VOCAB,
        "micro_steps": timing.steps * tiny.accumulation,
        "micro_step_ms": step_ms,
        f"collate_ms_{shapes.micro_batch}x{shapes.length}": collate,
        "host_ms": step_ms + collate,
        "micro_batch": shapes.micro_batch,
        **host_target_ms(objective, shapes.micro_batch),
    }
