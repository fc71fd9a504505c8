"""Where a stage-1 step's time goes: `python benchmarks/step_profile.py '<json spec>'` prints one
JSON line per implementation (kdbench and the tuned loop) and a table of phases.

The spec is `measure.py`'s (objective, task, seq_len, student_layers, batch_size, steps, warmup,
seed, threads); both implementations run the same batches (kdbench's length-grouped ones) from the
same weights, so the work is equal, each in a fresh process. torch.profiler records the timed steps,
each phase under its own label: the teacher's forward, the student's forward, the losses (the rest
of the step function), backward and the optimizer step; `other` is what the loop itself spends
outside them. The aten operators with the most self time on the device are listed too.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent))

import measure  # noqa: E402
import peers  # noqa: E402

from kdbench.measure.timing import (  # noqa: E402
    busy_time_by_op,
    gpu_events,
    optimizer_for,
    profiler_activities,
)
from kdbench.models.attention import prepare_for_training  # noqa: E402
from kdbench.recipes.task_specific import stage_step  # noqa: E402

PHASES = ("teacher forward", "student forward", "step", "backward", "optimizer")
TOP_OPS = 15  # aten operators listed by their self time on the device
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def labelled(module: torch.nn.Module, label: str) -> None:
    """Every call of `module`'s forward runs under a profiler label (also when a hook ends it
    early)."""
    forward = module.forward

    @functools.wraps(forward)
    def labelled_forward(*args, **kwargs):
        with record_function(label):
            return forward(*args, **kwargs)

    module.forward = labelled_forward


def train_step(step, optimizer, batch: dict) -> None:
    with record_function("step"):
        loss = step(batch)
        loss = loss["total"] if isinstance(loss, dict) else loss
    optimizer.zero_grad(set_to_none=True)
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer"):
        optimizer.step()


def profiled_steps(step, modules, batches: list[dict], warmup: int) -> profile:
    """The warm-up steps, then the others under the profiler (the GPU's queue drained inside it,
    so every kernel of the timed steps is counted)."""
    optimizer = optimizer_for(modules)
    for batch in batches[:warmup]:
        train_step(step, optimizer, batch)
    with profile(activities=profiler_activities(DEVICE)) as prof:
        for batch in batches[warmup:]:
            with record_function("timed step"):
                train_step(step, optimizer, batch)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    return prof


def kernel_ms(prof: profile, steps: int) -> dict[str, float]:
    """The GPU's busy time (kernels, copies) and its operations per step (nothing on the CPU):
    against the host's time per step, whether the step waits on the GPU or the GPU on the host."""
    if not torch.cuda.is_available():
        return {}
    events = gpu_events(prof)
    busy = sum(e.time_range.elapsed_us() for e in events) / 1000
    return {"gpu busy": busy / steps, "gpu ops per step": len(events) / steps}


def phase_ms(prof: profile, steps: int) -> dict[str, float]:
    """Milliseconds per step of each phase ('step' less the two forwards is the losses; 'other' is
    the loop's)."""
    totals = {
        e.key: e.cpu_time_total / 1000
        for e in prof.key_averages()
        if e.key in (*PHASES, "timed step") and e.device_type == DeviceType.CPU
    }
    result = {label: totals.get(label, 0.0) for label in PHASES}
    result["losses"] = result.pop("step") - result["teacher forward"] - result["student forward"]
    result["other"] = totals["timed step"] - sum(result.values())
    result["total"] = totals["timed step"]
    return {k: v / steps for k, v in result.items()}


def run(impl: str, spec: dict) -> dict:
    setup = measure.Setup(spec)
    tokens_only = impl == "tuned"  # the tuned loop's stage 1 has no label term
    batches = setup.batches(setup.other_set, padded=False, tokens_only=tokens_only)[
        : spec["warmup"]
    ]
    batches += setup.batches(setup.timed_set, padded=False, tokens_only=tokens_only)
    labelled(setup.teacher, "teacher forward")
    labelled(setup.student, "student forward")
    if impl == "kdbench":
        plan = setup.plan
        prepare_for_training(setup.student, plan.trainer.recompute_attention)
        stage, labels = plan.stages["intermediate"], setup.train["labels"]
        with stage_step(plan, stage, setup.student, setup.teacher, labels) as (step, modules):
            prof = profiled_steps(step, modules, batches, spec["warmup"])
    else:
        step, modules = peers.tuned_stage1(setup)
        prof = profiled_steps(step, modules, batches, spec["warmup"])
    steps = spec["steps"]
    return {
        "impl": impl,
        "ms_per_step": {**phase_ms(prof, steps), **kernel_ms(prof, steps)},
        "top_ops": busy_time_by_op(prof, DEVICE, steps, top=TOP_OPS)["by_op"],
    }


def main() -> None:
    """Each implementation in a fresh process of its own (the first to run in a process pays the
    allocator's first touches of memory), then the table of both."""
    spec = json.loads(sys.argv[1])
    if "impl" in spec:
        torch.set_num_threads(int(spec.get("threads") or os.cpu_count()))
        print(json.dumps(run(spec["impl"], spec)), flush=True)
        return
    results = []
    for impl in ("kdbench", "tuned"):
        child = subprocess.run(
            [sys.executable, __file__, json.dumps({**spec, "impl": impl})],
            check=True,
            capture_output=True,
            text=True,
        )
        results.append(json.loads(child.stdout.strip().splitlines()[-1]))
        print(
            json.dumps({**spec, "impl": impl, "ms_per_step": results[-1]["ms_per_step"]}),
            flush=True,
        )
    print(f"\n{'phase (ms per step)':<20}" + "".join(f"{r['impl']:>10}" for r in results))
    for phase in results[0]["ms_per_step"]:
        print(f"{phase:<20}" + "".join(f"{r['ms_per_step'][phase]:>10.1f}" for r in results))
    for result in results:
        ops = ", ".join(f"{name.removeprefix('aten::')} {ms:.2f}" for name, ms in result["top_ops"])
        print(f"\n{result['impl']}: the top operators by self time, ms per step: {ops}")


if __name__ == "__main__":
    main()
