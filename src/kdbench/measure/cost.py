"""What a model costs to run, measured on this machine: parameters, FLOPs per example (counted by
`torch.utils.flop_counter.FlopCounterMode`, the CPU's fused attention too: `flops.flop_counter`),
latency at batch 1 and throughput at batch 32; and how busy the machine was, which decides whether
its timings are fair to publish."""

from __future__ import annotations

import copy
import os
import statistics
import time

import torch

from kdbench.measure.flops import flop_counter
from kdbench.records.record import device_name
from kdbench.runtime.precision import computing

LATENCY_BATCH = 1
THROUGHPUT_BATCH = 32
# each timing repeats its forward pass for at least this long, and at least MIN_REPEATS times
MIN_SECONDS = 0.5
MIN_REPEATS = 3


def dummy_batch(model, batch: int, length: int, device) -> dict[str, torch.Tensor]:
    """`batch` sequences of `length` token ids above the special ones, all attended."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(10, model.config.vocab_size, (batch, length), generator=generator)
    return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device)}


def flops_per_example(model, length: int, device) -> int:
    """The FLOPs of one forward pass over one sequence of `length` tokens."""
    with (
        torch.inference_mode(),
        computing(device, "fp32", model),
        flop_counter() as counter,
    ):
        model(**dummy_batch(model, 1, length, device))
    return int(counter.get_total_flops())


def seconds_per_pass(model, inputs: dict, device, precision: str) -> float:
    """The median wall time of one forward pass (after MIN_REPEATS untimed warm-up passes)."""
    times: list[float] = []
    with torch.inference_mode(), computing(device, precision, model):
        for _ in range(MIN_REPEATS):
            model(**inputs)
        while len(times) < MIN_REPEATS or sum(times) < MIN_SECONDS:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            model(**inputs)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def model_cost(model, length: int, device, precision: str) -> dict[str, float]:
    """Parameters, FLOPs per example at `length` tokens, latency (ms, batch 1), throughput
    (examples/s, batch 32)."""
    model.eval()
    single = dummy_batch(model, LATENCY_BATCH, length, device)
    latency = seconds_per_pass(model, single, device, precision)
    batch = dummy_batch(model, THROUGHPUT_BATCH, length, device)
    batch_time = seconds_per_pass(model, batch, device, precision)
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "flops_per_example": flops_per_example(model, length, device),
        "latency_ms": 1000 * latency,
        "throughput_per_s": THROUGHPUT_BATCH / batch_time,
    }


def compare_costs(teacher, student, lengths, device, precision: str) -> dict:
    """Both models' costs at the median of the task's token `lengths`, and the student's gains over
    its teacher (the baseline of every ratio): its speed-up at batch 1 and at batch 32, and its size
    and FLOPs fractions."""
    length = max(1, int(statistics.median(int(n) for n in lengths)))
    mine = model_cost(as_timed(student, precision), length, device, precision)
    theirs = model_cost(as_timed(teacher, precision), length, device, precision)
    return {
        "length": length,
        "device": device_name(device),
        **machine_load(),
        "teacher": theirs,
        "student": mine,
        "speedup_latency": theirs["latency_ms"] / mine["latency_ms"],
        "speedup_throughput": mine["throughput_per_s"] / theirs["throughput_per_s"],
        "params_fraction": mine["params"] / theirs["params"],
        "flops_fraction": mine["flops_per_example"] / theirs["flops_per_example"],
    }


def as_timed(model, precision: str):
    """The model as a run of `precision` times it: in a bf16 run a copy with bf16 weights where
    they are float32 (the frozen teacher's already are: both then run without autocast, in the
    same form), else the model itself."""
    if precision == "bf16" and next(model.parameters()).dtype == torch.float32:
        return copy.deepcopy(model).to(torch.bfloat16)
    return model


def machine_load() -> dict[str, float]:
    """How busy the machine was while the timings ran: its 1-minute load average (the runnable
    threads of every process, this one's included) and its CPU count."""
    return {"load_1min": round(os.getloadavg()[0], 2), "cpu_count": os.cpu_count() or 1}
