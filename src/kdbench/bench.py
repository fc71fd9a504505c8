"""Throughput of one distillation stage: `python -m kdbench.bench [OVERRIDES ...] [--objectives a,b] [--steps N]`.

Builds the configured teacher and student once per objective (the teacher as loaded: throughput does not
depend on its weights), runs a few warm-up steps of stage 1, then times `--steps` optimizer steps, and prints
one JSON line per objective (examples/s, tokens/s, seconds per step, peak memory on CUDA). The overrides are
the usual Hydra ones, e.g. `teacher=minilm_l6 student=3x384 task=sst2 'init.layers=[2,4,6]' init=layers`.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from kdbench import models
from kdbench.cli import compose
from kdbench.data.batches import make_loader
from kdbench.data.glue import task_datasets
from kdbench.plan import make_plan
from kdbench.recipes.task_specific import stage1
from kdbench.teacher import freeze
from kdbench.training.steps import to_device


def stage1_setup(overrides: list[str]):
    """The plan, its training loader, and the teacher and student as stage 1 gets them (the teacher as loaded:
    throughput does not depend on its weights)."""
    plan = make_plan(compose([*overrides, "trainer.teacher_epochs=0", "trainer.progress_bar=false"]))
    tokenizer = models.teacher_tokenizer(plan.teacher, plan.cache_dir)
    train_set, _ = task_datasets(plan.task, plan.data, tokenizer, plan.trainer.max_length)
    loader = make_loader(train_set, tokenizer, plan.trainer.batch_size, shuffle=True, seed=plan.seed,
                         group_by_length=plan.trainer.group_by_length)
    teacher = freeze(models.pretrained_teacher(plan.teacher, plan.num_labels, 0)).to(plan.device)
    student = models.student_for(plan, teacher)
    return plan, train_set, loader, teacher, student


def cycle(loader):
    while True:
        yield from loader


def measure_stage1(overrides: list[str], steps: int, warmup: int = 3) -> dict:
    plan, train_set, loader, teacher, student = stage1_setup(overrides)
    cuda = plan.device.type == "cuda"
    with stage1(plan, student, teacher, train_set["labels"]) as (step, modules):
        optimizer = torch.optim.AdamW([p for m in modules for p in m.parameters()], lr=plan.trainer.lr)
        batches, examples, tokens = cycle(loader), 0, 0
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        for i in range(warmup + steps):
            if i == warmup:
                if cuda:
                    torch.cuda.synchronize()
                start = time.perf_counter()
            batch = to_device(next(batches), plan.device)
            losses = step(batch)
            optimizer.zero_grad(set_to_none=True)
            losses["total"].backward()
            optimizer.step()
            if i >= warmup:
                examples += batch["input_ids"].shape[0]
                tokens += int(batch["attention_mask"].sum())
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    result = {"objective": plan.objective, "teacher": plan.teacher.name, "student": plan.student.name,
              "task": plan.task.name, "device": str(plan.device), "precision": plan.precision,
              "batch_size": plan.trainer.batch_size, "steps": steps, "seconds": seconds,
              "examples_per_s": examples / seconds, "tokens_per_s": tokens / seconds, "s_per_step": seconds / steps}
    if cuda:
        result["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="kdbench.bench", description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (teacher=..., student=..., task=...)")
    parser.add_argument("--objectives", default="att_kl", help="comma-separated objective options")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    for objective in args.objectives.split(","):
        print(json.dumps(measure_stage1([*args.overrides, f"objective={objective}"], args.steps)), flush=True)


if __name__ == "__main__":
    main()
