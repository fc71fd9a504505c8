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

from kdbench import data, distill, loop, models
from kdbench.initialization import init_from_teacher
from kdbench.plan import make_plan
from kdbench.teacher import freeze


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from kdbench.cli import config_dir

    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return hydra_compose("config", overrides=overrides)


def measure_stage1(overrides: list[str], steps: int, warmup: int = 3) -> dict:
    cfg = compose([*overrides, "trainer.teacher_epochs=0", "trainer.progress_bar=false"])
    plan = make_plan(cfg)
    tokenizer = models.teacher_tokenizer(cfg.teacher, plan.cache_dir)
    train_set, _ = distill.prepare_data(cfg, tokenizer)
    loader = data.make_loader(train_set, tokenizer, cfg.trainer.batch_size, shuffle=True, seed=cfg.seed,
                              group_by_length=cfg.trainer.group_by_length)
    teacher = freeze(models.pretrained_teacher(cfg.teacher, plan.num_labels, 0)).to(plan.device)
    student = models.build_student(plan.teacher_conf, cfg.student, plan.num_labels, cfg.seed)
    if plan.init_layers is not None:
        init_from_teacher(student, teacher, plan.init_layers)
    models.prepare_for_training(student, cfg.trainer).to(plan.device)
    if cfg.trainer.compile:
        models.compile_blocks(student, teacher)
    with distill.stage1(plan, student, teacher, train_set["labels"], cfg.seed, cfg.trainer) as (step, modules):
        params = [p for m in modules for p in m.parameters()]
        optimizer = torch.optim.AdamW(params, lr=cfg.trainer.lr)
        batches = iter(loader)
        examples = tokens = 0
        if plan.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        for i in range(warmup + steps):
            if i == warmup:
                if plan.device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
            try:
                batch = next(batches)
            except StopIteration:
                batches = iter(loader)
                batch = next(batches)
            batch = loop.to_device(batch, plan.device)
            losses = step(batch)
            optimizer.zero_grad(set_to_none=True)
            losses["total"].backward()
            optimizer.step()
            if i >= warmup:
                examples += batch["input_ids"].shape[0]
                tokens += int(batch["attention_mask"].sum())
        if plan.device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    result = {"objective": cfg.objective.name, "teacher": cfg.teacher.name, "student": cfg.student.name,
              "task": cfg.task.name, "device": str(plan.device), "precision": plan.precision,
              "batch_size": cfg.trainer.batch_size, "steps": steps, "seconds": seconds,
              "examples_per_s": examples / seconds, "tokens_per_s": tokens / seconds, "s_per_step": seconds / steps}
    if plan.device.type == "cuda":
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
