"""A whole small study's wall time, three ways: `python benchmarks/study.py IMPL [--seeds 1 2]
[--objectives ...]`.

The study is mini_table1's design (SST-2, its first 1000 training examples after the seeded shuffle,
max length 64, the MiniLM-L6 teacher fine-tuned 3 epochs at lr 1e-4, a 3x384 student from teacher
layers 2,4,6, stage 1 for two epochs and stage 2 for three at lr 1e-4, batch 32, fused AdamW with 6%
linear warm-up, the 872 dev examples evaluated at the end) for the objectives every implementation
expresses: vanilla_kd (stage 2 only), hid_seq and att_kl+val_kl. Each implementation runs as one
fresh process, timed from the outside, so every one pays its imports, data loading, the teacher's
fine-tuning (once) and every job:

* kdbench: its sweep, `python -m kdbench.run -m +experiment=mini_table1 objective=... seed=...`,
  from an empty cache (`KDBENCH_CACHE` and the sweep folder in a fresh temporary folder), with its
  defaults: the teacher's logits (stage 2) and mapped-layer features (stage 1) computed once and
  shared by every job and epoch;
* tuned: the tuned loop of `peers.py` (kdbench's length-grouped batches, SDPA, features hooked at
  the mapped layers, the teacher under inference_mode and recomputed every step), after fine-tuning
  the teacher with the same loop;
* textbrewer: TextBrewer's BasicTrainer fine-tunes the teacher and its GeneralDistiller runs both
  stages, on the same length-grouped batches.

Every implementation starts from the same weights and takes the same optimizer steps on the same
examples. Prints one JSON line: impl, seconds, and each job's dev accuracy and seconds by phase (the
teacher's fine-tuning, each stage's training loop, the dev evaluation).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # noqa: E402

from kdbench.data.batches import make_loader  # noqa: E402
from kdbench.data.glue import task_datasets  # noqa: E402
from kdbench.models.pretrained import pretrained_teacher, teacher_tokenizer  # noqa: E402
from kdbench.models.student import build_student, init_from_teacher  # noqa: E402
from kdbench.planning.hydra_config import compose  # noqa: E402
from kdbench.planning.plan import make_plan  # noqa: E402
from kdbench.teacher.frozen import freeze  # noqa: E402

HERE = Path(__file__).resolve().parent
OBJECTIVES = ("vanilla_kd", "hid_seq", "att_kl+val_kl")
# the phases every implementation times (kdbench's records name them so): the rest of a study's wall
# time is imports, data, the caches' tables, Hydra and the records
RECORD_PHASES = {
    "teacher": "teacher_finetune_s",
    "intermediate": "intermediate_s",
    "prediction": "prediction_s",
    "eval": "eval_s",
}
PRESET = "+experiment=mini_table1"


def run_kdbench(objectives: list[str], seeds: list[int], overrides: list[str]) -> list[dict]:
    """kdbench's sweep over the study from an empty cache; the jobs' records."""
    with tempfile.TemporaryDirectory() as scratch:
        sweep = Path(scratch) / "sweep"
        command = [
            sys.executable,
            "-m",
            "kdbench.run",
            "-m",
            PRESET,
            f"objective={','.join(objectives)}",
            f"seed={','.join(map(str, seeds))}",
            f"hydra.sweep.dir={sweep}",
            *overrides,
        ]
        subprocess.run(
            command,
            check=True,
            env={**os.environ, "KDBENCH_CACHE": str(Path(scratch) / "cache")},
            stdout=subprocess.DEVNULL,
        )
        records = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/result.json"))]
    return [
        {
            "objective": r["objective"],
            "seed": r["seed"],
            "accuracy": r["score"],
            "seconds": {phase: r["timing"][key] for phase, key in RECORD_PHASES.items()},
        }
        for r in records
    ]


class Study:
    """What the peers share with kdbench's runs: the plan of each job, the examples, the batches."""

    def __init__(self, overrides: list[str]):
        self.overrides = overrides
        self.plan = self.job("vanilla_kd", 1)
        self.tokenizer = teacher_tokenizer(self.plan.teacher, self.plan.cache_dir)
        plan = self.plan
        self.train, dev = task_datasets(
            plan.task, plan.data, self.tokenizer, plan.trainer.max_length
        )
        self.dev = dev[""]

    def job(self, objective: str, seed: int):
        return make_plan(
            compose([PRESET, f"objective={objective}", f"seed={seed}", *self.overrides])
        )

    def batches(self, stage, seed: int, epoch: int, tokens_only: bool = False) -> list[dict]:
        """One epoch of kdbench's training batches of `stage` (length-grouped, dynamic padding,
        seeded shuffle)."""
        loader = make_loader(
            self.train,
            self.tokenizer,
            stage.batch_size,
            shuffle=True,
            seed=seed,
            group_by_length=True,
        )
        loader.batch_sampler.set_epoch(epoch)
        keep = peers.TOKEN_INPUTS + (() if tokens_only else ("labels",))
        return [{k: v for k, v in batch.items() if k in keep} for batch in loader]

    def epochs(self, stage, seed: int, tokens_only: bool = False) -> list[dict]:
        """The batches of every epoch of `stage` (a plan's `StageSpec`)."""
        return [
            batch
            for epoch in range(stage.epochs)
            for batch in self.batches(stage, seed, epoch, tokens_only)
        ]

    def accuracy(self, model) -> float:
        model.eval()
        loader = make_loader(
            self.dev, self.tokenizer, self.plan.trainer.eval_batch_size, shuffle=False
        )
        right = 0
        with torch.inference_mode():
            for batch in loader:
                inputs = {k: v for k, v in batch.items() if k in peers.TOKEN_INPUTS}
                right += int((model(**inputs).logits.argmax(-1) == batch["labels"]).sum())
        model.train()
        return 100.0 * right / len(self.dev)


def optimizer(modules, spec) -> torch.optim.AdamW:
    """A stage's optimizer settings (`spec`: its `OptimizerSpec`: AdamW's lr, betas, eps and weight
    decay), fused as kdbench's and the Hugging Face Trainer's (its default with torch >= 2.8)."""
    parameters = [p for m in modules for p in m.parameters() if p.requires_grad]
    return torch.optim.AdamW(
        parameters,
        lr=spec.lr,
        betas=tuple(spec.betas),
        eps=spec.eps,
        weight_decay=spec.weight_decay,
        fused=True,
    )


def schedule(steps: int, spec) -> dict:
    return peers.linear_schedule(int(spec.warmup_ratio * steps), steps)


def train_loop(step, modules, batches: list[dict], spec) -> None:
    """The tuned peer's loop: a step, backward, AdamW, the linear warm-up schedule."""
    opt = optimizer(modules, spec)
    args = schedule(len(batches), spec)
    lr_schedule = args["scheduler_class"](opt, **args["scheduler_args"])
    for batch in batches:
        loss = step(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        lr_schedule.step()


def fine_tuned_teacher(study: Study, impl: str):
    plan, stage = study.plan, study.plan.stages["teacher"]
    teacher = pretrained_teacher(plan.teacher, plan.num_labels, plan.trainer.teacher_seed)
    teacher.set_attn_implementation("sdpa")
    batches = study.epochs(stage, plan.trainer.teacher_seed)
    if impl == "textbrewer":
        peers.textbrewer_finetune(
            teacher,
            batches,
            partial(optimizer, spec=stage.optimizer),
            schedule(len(batches), stage.optimizer),
        )
    else:
        train_loop(lambda batch: teacher(**batch).loss, [teacher], batches, stage.optimizer)
    return freeze(teacher)


class Clock:
    """Seconds by phase."""

    def __init__(self):
        self.seconds: dict[str, float] = dict.fromkeys(RECORD_PHASES, 0.0)

    def time(self, phase: str, fn, *args):
        start = time.perf_counter()
        result = fn(*args)
        self.seconds[phase] += time.perf_counter() - start
        return result


def run_peer(
    impl: str, objectives: list[str], seeds: list[int], overrides: list[str]
) -> list[dict]:
    study = Study(overrides)
    clock = Clock()
    teacher = clock.time("teacher", fine_tuned_teacher, study, impl)
    jobs = []
    for objective in objectives:
        for seed in seeds:
            plan = study.job(objective, seed)
            student = build_student(plan.teacher_conf, plan.student, plan.num_labels, seed)
            init_from_teacher(student, teacher, plan.init)
            setup = SimpleNamespace(
                teacher=teacher,
                student=student,
                plan=plan,
                device=plan.device,
                spec={"objective": objective},
                pairs=list(zip(range(1, len(plan.init.layers) + 1), plan.init.layers)),
            )
            job_clock = Clock()
            run_stages(impl, study, setup, plan, job_clock)
            accuracy = job_clock.time("eval", study.accuracy, student)
            jobs.append(
                {
                    "objective": objective,
                    "seed": seed,
                    "accuracy": accuracy,
                    "seconds": job_clock.seconds,
                }
            )
    jobs[0]["seconds"]["teacher"] = clock.seconds[
        "teacher"
    ]  # as kdbench's records: the job that fine-tuned it
    return jobs


def run_stages(impl: str, study: Study, setup, plan, clock: Clock) -> None:
    """Stage 1 (for an objective with intermediate terms), then stage 2, as the peer runs them."""
    stages = [(peers.tuned_stage1, "intermediate")] if plan.terms else []
    stages.append((peers.tuned_stage2, "prediction"))
    for make_step, phase in stages:
        stage, stage1 = plan.stages[phase], phase == "intermediate"
        setup.spec["objective"] = plan.objective if stage1 else "vanilla_kd"
        batches = study.epochs(stage, plan.seed, tokens_only=stage1)
        if impl == "textbrewer":
            setup.teacher.set_attn_implementation("eager" if stage1 else "sdpa")
            setup.student.set_attn_implementation("eager" if stage1 else "sdpa")
            clock.time(
                phase,
                peers.textbrewer_train,
                setup,
                batches,
                partial(optimizer, spec=stage.optimizer),
                len(batches),
                schedule(len(batches), stage.optimizer),
            )
        else:
            step, modules = make_step(setup)
            clock.time(phase, train_loop, step, modules, batches, stage.optimizer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("impl", choices=("kdbench", "tuned", "textbrewer"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--objectives", nargs="+", default=list(OBJECTIVES), choices=OBJECTIVES)
    parser.add_argument(
        "--overrides",
        nargs="*",
        default=[],
        help="config overrides of the study (tests: a tiny one)",
    )
    parser.add_argument(
        "--inner", action="store_true", help="run a peer in this process (the timed child)"
    )
    args = parser.parse_args()
    if args.inner:
        print(
            json.dumps(run_peer(args.impl, args.objectives, args.seeds, args.overrides)), flush=True
        )
        return
    start = time.perf_counter()
    if args.impl == "kdbench":
        jobs = run_kdbench(args.objectives, args.seeds, args.overrides)
    else:
        child = subprocess.run(
            [
                sys.executable,
                __file__,
                args.impl,
                "--inner",
                "--seeds",
                *map(str, args.seeds),
                "--objectives",
                *args.objectives,
                "--overrides",
                *args.overrides,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        jobs = json.loads(child.stdout.strip().splitlines()[-1])
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "impl": args.impl,
                "seconds": seconds,
                "seeds": args.seeds,
                "objectives": args.objectives,
                "overrides": args.overrides,
                "jobs": jobs,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
