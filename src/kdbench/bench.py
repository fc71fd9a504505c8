"""Throughput, FLOPs and MFU of kdbench's steps: `python -m kdbench.bench [--mode MODE] [OVERRIDES
...] [options]`.

Modes (one JSON line per objective):

- `stage1` (default): the configured task-specific teacher and student (Hydra overrides, e.g.
  `teacher=minilm_l6 student=3x384 task=sst2`), a few warm-up steps of stage 1, then `--steps`
  timed optimizer steps;
- `agnostic`: the task-agnostic recipe through the real loop (`kdbench.training.loop.train`) on
  random token sequences, by default at the paper's Table 2 shapes: a BERT-base-shaped teacher
  with random weights, a 6x768 student, sequences of 128, 1024 per optimizer step, in the
  micro-batches `stages.distillation.device_batch_size=auto` chooses (64 on a CPU; `--batch`,
  `--micro-batch`, `--teacher`, `--student`, `--length` change them), loaded and masked as a run
  on the device loads them (`--workers auto`, as `trainer.num_workers=auto`). Needs neither Hydra
  nor datasets;
- `host` (`kdbench.measure.bench_host`): the same loop with tiny widths and vocabulary (the paper's
  depths): its main thread's CPU time per micro-step is the host's (Python, dispatch, hooks), what
  a GPU would wait for; with the time of collating one paper micro-batch on the main thread (none
  where `--workers` start worker processes), and the target it is held to: half the GPU time of a
  micro-batch at 40 % MFU on an 80 GB H100 SXM, from the analytic FLOP count, for the paper's 64
  sequences and for the micro-batch auto chooses there.

Each line gives examples (sequences) and tokens per second, FLOPs per example (FlopCounterMode over
one real micro-step, forward and backward), MFU against the device's dense peak (`measure.flops`'s
datasheet table for a known GPU, else a measured matmul peak; on the CPU both per CPU-second, so
that other processes sharing the cores lower neither), peak memory, and on CUDA the attention kernel
chosen and the synchronisations per optimizer step that the sync debug mode reports in the steps and
their hooks (not the stage's closing read of its finite-loss verdict, which follows the last step).
"""

from __future__ import annotations

import argparse
import itertools
import json
from dataclasses import replace

import torch

from kdbench.data.columns import column_array
from kdbench.measure import flops, synthetic
from kdbench.measure.bench_agnostic import measure_agnostic
from kdbench.measure.bench_host import auto_micro_batch, measure_host
from kdbench.measure.timing import (
    TimedBatches,
    device_name,
    peak_memory_gib,
    train_steps,
)
from kdbench.models.compilation import compile_if_asked
from kdbench.models.pretrained import pretrained_teacher, teacher_tokenizer
from kdbench.planning.specs import ShapeSpec
from kdbench.runtime.device import loading_spec
from kdbench.runtime.precision import apply_matmul_precision, resolve_precision, resolve_tf32
from kdbench.training.steps import to_device

MODES = ("stage1", "agnostic", "host")


def stage1_setup(overrides: list[str]):
    """The plan, its training loader, and the teacher and student as stage 1 gets them (the teacher
    as loaded: throughput does not depend on its weights). Hydra and datasets are imported here
    only."""
    from kdbench.data.batches import make_loader
    from kdbench.data.glue import task_datasets
    from kdbench.planning.hydra_config import compose
    from kdbench.planning.plan import make_plan
    from kdbench.teacher.frozen import freeze

    overrides = [*overrides, "stages.teacher.epochs=0", "trainer.progress_bar=false"]
    plan = make_plan(compose(overrides))
    apply_matmul_precision(plan.device, plan.tf32)
    tokenizer = teacher_tokenizer(plan.teacher, plan.cache_dir)
    train_set, _ = task_datasets(plan.task, plan.data, tokenizer, plan.trainer.max_length)
    stage = plan.stages["intermediate"]
    loader = make_loader(
        train_set,
        tokenizer,
        stage.batch_size,
        shuffle=True,
        seed=plan.seed,
        group_by_length=stage.group_by_length,
        pad_to=stage.pad_to(plan.trainer.max_length),
    )
    teacher = freeze(pretrained_teacher(plan.teacher, plan.num_labels, 0)).to(plan.device)
    student = plan.build_student(teacher)
    compile_if_asked(plan.trainer, student, teacher)
    return plan, train_set, loader, teacher, student


def measure_stage1(overrides: list[str], steps: int, warmup: int = 3) -> dict:
    from kdbench.recipes.task_specific import stage_step  # the recipe's own step

    plan, train_set, loader, teacher, student = stage1_setup(overrides)
    batches, stage = itertools.cycle(loader), plan.stages["intermediate"]
    labels = torch.from_numpy(column_array(train_set, "labels"))
    with stage_step(plan, stage, student, teacher, labels) as (step, modules):
        batch = to_device(next(batches), plan.device)
        per_example, kernels = flops.flops_per_example(step, batch, modules)
        loaded = [to_device(next(batches), plan.device) for _ in range(warmup + steps)]
        timed = TimedBatches(loaded[:warmup], loaded[warmup:], [], plan.device)
        train_steps(step, modules, timed, stage.optimizer.lr)
    seconds, counted = timed.seconds, loaded[warmup:]
    examples = sum(batch["input_ids"].shape[0] for batch in counted)
    tokens = sum(int(batch["attention_mask"].sum()) for batch in counted)
    result = {
        "mode": "stage1",
        "objective": plan.objective,
        "teacher": plan.teacher.name,
        "student": plan.student.name,
        "task": plan.task.name,
        "device": device_name(plan.device),
        "precision": plan.precision,
        "tf32": plan.tf32,
        "batch_size": stage.batch_size,
        "steps": steps,
        "seconds": seconds,
        "cpu_seconds": timed.cpu_seconds,
        "examples_per_s": examples / seconds,
        "tokens_per_s": tokens / seconds,
        "s_per_step": seconds / steps,
        "flops_per_example": per_example,
        "attention_kernels": kernels,
        **peak_memory_gib(plan.device),
    }
    return result | flops.utilisation(result, plan.device, plan.precision)


def shapes_of(args, objective: str, device: torch.device, precision: str) -> synthetic.Shapes:
    """The bench's shapes; `--micro-batch auto` as `stages.distillation.device_batch_size=auto`
    chooses on `device` (in host mode on the host target's GPU)."""

    def shape(text: str) -> ShapeSpec:
        layers, width = (int(n) for n in text.split("x"))
        return ShapeSpec(text, layers, width, max(1, width // 64), 4 * width)

    shapes = synthetic.Shapes(shape(args.teacher), shape(args.student), length=args.length)
    micro = args.micro_batch
    if micro == "auto":
        host = args.mode == "host"
        micro = auto_micro_batch(objective, shapes, args.batch, device, precision, host=host)
    elif not micro.isdigit() or int(micro) == 0 or args.batch % int(micro):
        raise SystemExit(f"--micro-batch {micro}: give auto or a divisor of --batch {args.batch}")
    return replace(shapes, micro_batch=int(micro), accumulation=args.batch // int(micro))


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kdbench.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "overrides", nargs="*", help="stage1 mode: Hydra overrides (teacher=..., student=...)"
    )
    parser.add_argument("--mode", choices=MODES, default="stage1")
    parser.add_argument("--objectives", default="att_kl", help="comma-separated objective options")
    parser.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed optimizer steps first")
    paper = synthetic.Shapes()
    parser.add_argument(
        "--teacher", default="12x768", help="agnostic/host: LAYERSxWIDTH (64-wide heads)"
    )
    parser.add_argument("--student", default="6x768", help="agnostic/host: LAYERSxWIDTH")
    parser.add_argument("--length", type=int, default=paper.length)
    parser.add_argument(
        "--batch", type=int, default=paper.micro_batch * paper.accumulation, help="agnostic/host"
    )
    parser.add_argument(
        "--micro-batch",
        default="auto",
        help="agnostic/host: a divisor of --batch, or auto (as device_batch_size=auto)",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto")
    parser.add_argument(
        "--tf32",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="agnostic: as trainer.tf32 (stage1 reads the key itself): an fp32 run's matmuls in "
        "TF32 on a GPU that has it",
    )
    parser.add_argument("--compile", action="store_true", help="trainer.compile, in every mode")
    parser.add_argument(
        "--profile",
        default="",
        help="agnostic: comma-separated objectives whose micro-step is then profiled: the device's "
        "time per micro-step, and by operation",
    )
    parser.add_argument(
        "--workers",
        type=workers_option,
        default="auto",
        help="agnostic/host: DataLoader workers (they collate and mask), or auto (as "
        "trainer.num_workers=auto: min(4, cores - 1) on a GPU, none on a CPU)",
    )
    return parser


def workers_option(text: str) -> int | str:
    """`--workers`: a count of processes, or auto."""
    if text != "auto" and not text.isdigit():
        raise argparse.ArgumentTypeError(f"give a count of worker processes or auto, not {text!r}")
    return text if text == "auto" else int(text)


def measure(args, objective: str) -> dict:
    if args.mode == "stage1":
        return measure_stage1([*args.overrides, f"objective={objective}"], args.steps, args.warmup)
    device = torch.device(args.device)
    precision = resolve_precision(args.precision, device, int(args.student.split("x")[1]))[0]
    shapes = shapes_of(args, objective, device, precision)
    backend = "inductor" if args.compile else None  # trainer.compile's
    profile = objective in args.profile.split(",")
    timing = synthetic.Timing(
        args.steps, args.warmup, loading_spec(args.workers, device), backend, profile
    )
    if args.mode == "host":
        host_precision = "bf16" if args.precision == "auto" else args.precision  # the target's
        return measure_host(objective, shapes, device, timing, host_precision)
    tf32 = resolve_tf32(args.tf32, device, precision)
    apply_matmul_precision(device, tf32)
    return measure_agnostic(objective, shapes, device, precision, timing) | {"tf32": tf32}


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.mode != "stage1" and args.overrides:
        parser().error(
            f"--mode {args.mode} takes no Hydra overrides (got {args.overrides[0]}): use its "
            "options"
        )
    if args.compile and args.mode == "stage1":
        args.overrides.append("trainer.compile=true")
    torch.manual_seed(0)
    for objective in args.objectives.split(","):
        print(json.dumps(measure(args, objective)), flush=True)


if __name__ == "__main__":
    main()
