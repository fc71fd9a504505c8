"""How kdbench times a step, the one home for it: `kdbench.bench` and `benchmarks/` time with these.

`Timer` times optimizer steps of the real loop (`kdbench.training.loop.train`, a hook);
`train_steps` is the bare loop of a step (forward, backward, optimizer) over `TimedBatches`, which
stamp the clock around the timed batches; `synchronisations` collects the host-device
synchronisations of CUDA steps, and `PerStep` tells them apart by optimizer step; `OpCounts`
counts the casts and other ops a step dispatches (a GPU launches a kernel for each).
"""

from __future__ import annotations

import resource
import time
import warnings
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kdbench.training.hooks import Hook

# What CUDA's sync debug mode warns at every synchronising call (c10/cuda/CUDAFunctions.cpp,
# `warn_or_error_on_sync`); Python's warning adds where it was triggered.
SYNC_WARNING = "called a synchronizing CUDA operation"


def is_synchronisation(message) -> bool:
    """Whether a warning reports one synchronisation (not, e.g., the mode's own notice that it is
    a prototype)."""
    return str(message).startswith(SYNC_WARNING)


@contextmanager
def reported_synchronisations():
    """Yields a list that gets, as they come, the synchronisation reports warned while inside,
    every one of them; other warnings pass on as they would."""
    seen: list[str] = []
    with warnings.catch_warnings():
        warnings.filterwarnings("always", message=SYNC_WARNING)  # not once per line of code
        passed_on = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if is_synchronisation(message):
                seen.append(str(message))
            else:
                passed_on(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield seen


@contextmanager
def synchronisations(device: torch.device):
    """The host-device synchronisations CUDA's sync debug mode reports while inside: a list, one
    message each, filled as they happen (none off CUDA)."""
    with reported_synchronisations() as seen:
        if device.type != "cuda":
            yield seen
            return
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield seen
        finally:
            torch.cuda.set_sync_debug_mode("default")


class PerStep(Hook):
    """How many entries `seen` (a list that grows, e.g. `synchronisations`') gains at each
    optimizer step, the step's own and those of the hooks before this one (`counts`), and after
    the last step up to this hook's `on_end` (`at_end`: the stage's closing read of its verdict)."""

    def __init__(self, seen: list):
        self.seen, self.counts, self.at_end, self.mark = seen, [], 0, 0

    def _since_last(self) -> int:
        new, self.mark = len(self.seen) - self.mark, len(self.seen)
        return new

    def on_start(self, progress) -> None:
        self._since_last()

    def on_step(self, progress) -> None:
        self.counts.append(self._since_last())

    def on_end(self, progress) -> None:
        self.at_end = self._since_last()


class Timer(Hook):
    """Times the optimizer steps after `warmup` of them (the device synchronised at both ends), and
    each of them on `clock` (`laps`)."""

    def __init__(self, device: torch.device, warmup: int, clock=time.perf_counter):
        self.device, self.warmup, self.clock, self.start, self.seconds = (
            device,
            warmup,
            clock,
            None,
            0.0,
        )
        self.cpu_start, self.cpu_seconds = None, 0.0  # the process's CPU time over the same steps
        self.laps: list[float] = []

    def _now(self) -> float:
        if self.device.type == "cuda":
            mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode(
                "default"
            )  # the timer's own synchronisation is not the step's
            torch.cuda.synchronize(self.device)
            torch.cuda.set_sync_debug_mode(mode)
        return self.clock()

    def on_start(self, progress) -> None:
        if self.warmup == 0:
            self.start, self.cpu_start = self._now(), time.process_time()
        self.lap_start = self.clock()

    def on_step(self, progress) -> None:
        if progress.step > self.warmup:
            self.laps.append(self.clock() - self.lap_start)
        if progress.step == self.warmup:
            self.start, self.cpu_start = self._now(), time.process_time()
        self.lap_start = self.clock()

    def on_end(self, progress) -> None:
        self.seconds, self.cpu_seconds = (
            self._now() - self.start,
            time.process_time() - self.cpu_start,
        )


def device_name(device: torch.device) -> str:
    """The device a timing ran on, as the bench reports it: the GPU's model, or "cpu"."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def profiler_activities(device: torch.device) -> list:
    """What torch.profiler records of work on `device`: the host's operators, and on CUDA the
    GPU's kernels and copies."""
    cuda = [torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else []
    return [torch.profiler.ProfilerActivity.CPU, *cuda]


def gpu_events(profiler) -> list:
    """A finished profile's GPU events (kernels and copies), not the GPU-side ranges of the
    `record_function` labels, which span the kernels inside them."""
    return [
        e
        for e in profiler.events()
        if e.device_type == torch.autograd.DeviceType.CUDA and not e.is_user_annotation
    ]


def device_time_by_op(run, device: torch.device, repeats: int, top: int = 12) -> dict:
    """What `repeats` calls of `run()` keep the device busy, in ms per call: in all (`busy_ms`: on
    CUDA every kernel and copy, on the CPU the operators' own time) and by aten operator, the `top`
    longest (`by_op`: [name, ms]); on CUDA also the kernels no aten operator launched
    (`outside_aten_ms`: a compiled graph's fused kernels)."""
    with torch.profiler.profile(activities=profiler_activities(device)) as profiler:
        for _ in range(repeats):
            run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return busy_time_by_op(profiler, device, repeats, top)


def busy_time_by_op(profiler, device: torch.device, repeats: int, top: int = 12) -> dict:
    """`device_time_by_op`'s figures from a finished profile of `repeats` calls."""
    own = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    ops = [(e.key, getattr(e, own) / 1e3 / repeats) for e in profiler.key_averages()]
    ops = sorted((op for op in ops if op[0].startswith("aten::")), key=lambda op: -op[1])
    by_op = {"by_op": [[name, ms] for name, ms in ops[:top]]}
    if device.type != "cuda":
        return {"busy_ms": sum(ms for _, ms in ops)} | by_op
    busy = sum(e.time_range.elapsed_us() for e in gpu_events(profiler)) / 1e3 / repeats
    return {"busy_ms": busy, "outside_aten_ms": busy - sum(ms for _, ms in ops)} | by_op


def peak_memory_gib(device: torch.device) -> dict:
    if device.type == "cuda":
        return {"peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30}
    return {"peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def optimizer_for(modules, lr: float = 1e-5) -> torch.optim.Optimizer:
    """The optimizer of a timed step: fused AdamW (the Hugging Face Trainer's default, and the
    loop's)."""
    return torch.optim.AdamW(
        [p for m in modules for p in m.parameters() if p.requires_grad], lr=lr, fused=True
    )


def train_steps(step, modules, batches, lr: float = 1e-5) -> None:
    """The bare loop a timed step runs in, one optimizer step per batch: the step (its losses, or a
    dict of them with the sum under "total"), backward, the optimizer. `batches` stamps the
    clock."""
    optimizer = optimizer_for(modules, lr)
    for batch in batches:
        loss = step(batch)
        loss = loss["total"] if isinstance(loss, dict) else loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def read_peak_rss() -> float:
    """The process's peak resident set since the last reset, MiB (Linux VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    else:
        Path("/proc/self/clear_refs").write_text("5")


def peak_mib(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) / 2**20
    return read_peak_rss()


class TimedBatches:
    """Warm-up batches, timed batches, tail batches; stamps the clock (wall and process CPU time)
    and the peak memory around the timed ones: the clock starts when the first timed batch is
    fetched and stops when the loop asks for the one after the last (the device synchronised)."""

    def __init__(self, warmup: list, timed: list, tail: list, device: torch.device):
        self.parts, self.device = (warmup, timed, tail), device
        self.seconds = self.cpu_seconds = self.peak = self.warmup_seconds = None

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def __iter__(self):
        warmup, timed, tail = self.parts
        warmup_start = time.perf_counter()
        yield from warmup
        reset_peak(self.device)
        start, cpu_start = time.perf_counter(), time.process_time()
        self.warmup_seconds = start - warmup_start
        yield from timed
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.seconds, self.cpu_seconds = (
            time.perf_counter() - start,
            time.process_time() - cpu_start,
        )
        self.peak = peak_mib(self.device)
        yield from tail


class OpCounts(TorchDispatchMode):
    """Counts the ops dispatched inside it that compute (views excluded) as `kernels`, and of
    those the casts (`_to_copy`) as `casts`."""

    def __init__(self):
        super().__init__()
        self.counts: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.counts["kernels"] += 1
            self.counts["casts"] += func.overloadpacket is torch.ops.aten._to_copy
        return func(*args, **(kwargs or {}))
