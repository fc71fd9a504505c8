"""The task-specific recipe (the paper's Section 4), top to bottom:

1. data: the task's train subset and dev set(s), tokenised with the teacher's tokenizer; the stages
   train on the
   subset or, with `augment=tinybert`, on its augmentation (built once, cached);
2. teacher: fine-tuned on the task's own subset (cached, shared by every run that needs it), frozen;
3. student: built from its shape, initialised randomly or from the chosen teacher layers;
4. stage 1: intermediate-layer distillation with the objective's terms (skipped for vanilla KD);
5. stage 2: prediction-layer distillation with vanilla KD;
6. evaluation on the dev set(s).
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from kdbench.card import model_card
from kdbench.data.augmentation import augmented_train_set
from kdbench.data.batches import eval_loaders, make_loader
from kdbench.data.columns import column_array
from kdbench.data.glue import dev_sets, encode_train, train_subset
from kdbench.measure.cost import compare_costs
from kdbench.models.compilation import compile_if_asked
from kdbench.models.pretrained import teacher_tokenizer
from kdbench.models.student import save_student, student_for
from kdbench.objectives.features import FeatureRecorder
from kdbench.objectives.terms import Objective, carry_projections
from kdbench.planning.plan import Plan
from kdbench.planning.specs import OptimizerSpec
from kdbench.record import StepLog
from kdbench.teacher.features import FeatureTableFn, teacher_feature_table
from kdbench.teacher.finetune import finetuned_teacher
from kdbench.teacher.frozen import FineTuned, in_run_precision
from kdbench.teacher.logits import teacher_logits_table
from kdbench.training import loop
from kdbench.training.checkpoint import Checkpoints
from kdbench.training.evaluate import evaluate
from kdbench.training.hooks import standard_hooks
from kdbench.training.resume import Resume
from kdbench.training.steps import (
    StudentSide,
    distillation_step,
    output_logits,
    prediction_kd_step,
    teacher_logits_now,
    teacher_records_now,
)

STAGES = ("stage1", "stage2")


def timed(fn, timing: dict, key: str):
    """``fn``, adding the wall time of each call to ``timing[key]`` (seconds)."""

    def call(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            timing[key] = timing.get(key, 0.0) + time.perf_counter() - start

    return call


@dataclass(frozen=True)
class Lesson:
    """What the stages distil from: the frozen teacher, the training set (the task's subset or its
    augmentation) with its tokenizer and shuffled loader, and the augmented set's cache entry."""

    teacher: FineTuned
    train_set: object
    tokenizer: object
    loader: torch.utils.data.DataLoader
    augmented: str | None


def run_task_specific(plan: Plan, run_dir: Path, log: StepLog) -> dict:
    """Runs the recipe; returns the record's metrics, teacher metrics, timing (seconds: the
    teacher's fine-tuning, the teacher's features and logits tables, built or read from the cache,
    outside the stages' own times, each stage, evaluation) and the student's parameter count."""
    trainer = plan.trainer
    tokenizer = teacher_tokenizer(plan.teacher, plan.cache_dir)
    originals = train_subset(plan.task, plan.data)
    train_set = encode_train(originals, plan.task, tokenizer, trainer.max_length)
    teacher, dev_loaders = teacher_and_dev(plan, train_set, tokenizer, log)
    student = student_for(
        teacher.model,
        plan.teacher_conf,
        plan.student,
        plan.init,
        plan.num_labels,
        plan.seed,
        plan.device,
        dropout=plan.trainer.student_dropout,
        recompute_attention=plan.trainer.recompute_attention,
    )
    compile_if_asked(plan.trainer, student, teacher.model)
    in_run_precision(teacher.model, plan.precision)
    lesson, augmented = distillation_set(plan, teacher, originals, train_set, tokenizer)
    timing = {"teacher_finetune_s": teacher.seconds, "stage1_s": 0.0, "stage2_s": 0.0}
    checkpoints = Checkpoints(run_dir / "checkpoints", meta={"fingerprint": plan.fingerprint})
    resume = Resume.of(checkpoints, STAGES, plan.fingerprint)
    hooks = standard_hooks(trainer, log, checkpoints)
    stage1_runs = plan.terms and trainer.stage1_epochs > 0
    if stage1_runs and not resume.skips("stage1", student, plan.device):
        train_stage1(plan, student, lesson, hooks, resume.at("stage1"), timing)
    if trainer.stage2_epochs > 0 and not resume.skips("stage2", student, plan.device):
        train_stage2(plan, student, lesson, hooks, resume.at("stage2"), timing)
    start = time.perf_counter()
    metrics = evaluate(student, dev_loaders, plan.task.metrics, plan.device, plan.precision)
    timing["eval_s"] = time.perf_counter() - start
    outcome = {
        "metrics": metrics,
        "teacher_metrics": teacher.metrics,
        "timing": timing,
        "student_parameters": sum(p.numel() for p in student.parameters()),
        **({"augmented": augmented} if augmented else {}),
    }
    ship_student(plan, run_dir, student, lesson, outcome)
    if not trainer.keep_checkpoints:
        checkpoints.clear()
    return outcome


def teacher_and_dev(plan: Plan, train_set, tokenizer, log: StepLog) -> tuple[FineTuned, dict]:
    """The fine-tuned teacher (fine-tuned on `train_set` unless cached or given), in train mode with
    `trainer.teacher_dropout`, and the loaders of the dev set(s) that score it and the student."""
    trainer = plan.trainer
    eval_sets = dev_sets(plan.task, plan.data, tokenizer, trainer.max_length)
    teacher_loader = make_loader(
        train_set,
        tokenizer,
        trainer.batch_size,
        shuffle=True,
        seed=trainer.teacher_seed,
        loading=plan.loading,
        group_by_length=trainer.teacher_group_by_length,
    )
    dev_loaders = eval_loaders(eval_sets, tokenizer, trainer.eval_batch_size, plan.loading)
    teacher = finetuned_teacher(plan, teacher_loader, dev_loaders, log)
    if trainer.teacher_dropout:
        teacher.model.train()  # dropout on while it teaches, still without gradients
    return teacher, dev_loaders


def train_stage1(
    plan: Plan, student, lesson: Lesson, hooks: list, resume: dict | None, timing: dict
) -> None:
    """Stage 1 from `resume` (a checkpoint of it) when given; its times into `timing`."""
    trainer = plan.trainer
    features = timed(
        partial(
            teacher_feature_table,
            lesson.teacher,
            lesson.train_set,
            lesson.tokenizer,
            plan,
            lesson.augmented,
        ),
        timing,
        "features_table_s",
    )
    cached = trainer.cache_teacher_features and not trainer.teacher_dropout
    with stage1(
        plan,
        student,
        lesson.teacher.model,
        torch.from_numpy(column_array(lesson.train_set, "labels")),
        features if cached else None,
    ) as (step, modules):
        optimizer = OptimizerSpec.of(trainer, trainer.lr, trainer.stage1_schedule)
        stage = loop.Stage(
            "stage1",
            modules,
            lesson.loader,
            step,
            optimizer,
            plan.device,
            epochs=trainer.stage1_epochs,
        )
        stats = loop.train(stage, hooks, resume)
    timing.update(stage1_s=stats["seconds"], stage1_examples_per_s=stats["examples_per_s"])


def train_stage2(
    plan: Plan, student, lesson: Lesson, hooks: list, resume: dict | None, timing: dict
) -> None:
    """Stage 2 from `resume` (a checkpoint of it) when given, on the teacher's cached logits unless
    its dropout is on; its times into `timing`."""
    trainer = plan.trainer
    if trainer.cache_teacher_logits and not trainer.teacher_dropout:
        table = timed(teacher_logits_table, timing, "logits_table_s")(
            lesson.teacher, lesson.train_set, lesson.tokenizer, plan, lesson.augmented
        )
        table = table.to(plan.device)
        targets = lambda batch: table[batch["example"]]  # noqa: E731
    else:
        targets = teacher_logits_now(lesson.teacher.model, plan.device, plan.precision)
    step = prediction_kd_step(student, targets, plan.kd, plan.device, plan.precision)
    optimizer = OptimizerSpec.of(trainer, trainer.stage2_lr or trainer.lr)
    stage = loop.Stage(
        "stage2",
        [student],
        lesson.loader,
        step,
        optimizer,
        plan.device,
        epochs=trainer.stage2_epochs,
    )
    stats = loop.train(stage, hooks, resume)
    timing.update(stage2_s=stats["seconds"], stage2_examples_per_s=stats["examples_per_s"])


def ship_student(plan: Plan, run_dir: Path, student, lesson: Lesson, outcome: dict) -> None:
    """The student's inference cost beside its teacher's into `outcome` (`plan.measure_cost`), and
    the student saved in `run_dir` with its model card (`plan.save_student`)."""
    if plan.measure_cost:
        outcome["cost"] = compare_costs(
            lesson.teacher.model,
            student,
            column_array(lesson.train_set, "length"),
            plan.device,
            plan.precision,
        )
    if plan.save_student:
        save_student(
            student,
            lesson.tokenizer,
            run_dir / "student",
            plan.chain,
            labels=plan.task.labels,
            card=model_card(plan, outcome),
        )


def distillation_set(plan: Plan, teacher: FineTuned, originals, train_set, tokenizer):
    """The stages' lesson, on the task's subset (`train_set`, the tokenised `originals`) or the
    augmentation of `originals`, and what the record says of the augmentation (None without)."""
    augmented = None
    if plan.augment is not None:
        source = str(plan.data.glue_dir or plan.data.hf_dataset)
        examples, path = augmented_train_set(
            originals,
            plan.task,
            plan.augment,
            plan.cache_dir,
            source,
            plan.device,
            plan.trainer.progress_bar,
        )
        encoded = encode_train(examples, plan.task, tokenizer, plan.trainer.max_length)
        augmented = {
            "entry": path.name,
            "path": str(path),
            "examples": len(encoded),
            "originals": len(train_set),
        }
        train_set = encoded
    trainer = plan.trainer
    loader = make_loader(
        train_set,
        tokenizer,
        trainer.batch_size,
        shuffle=True,
        seed=plan.seed,
        group_by_length=trainer.group_by_length,
        loading=plan.loading,
    )
    lesson = Lesson(teacher, train_set, tokenizer, loader, augmented and augmented["entry"])
    return lesson, augmented


@contextmanager
def stage1(plan: Plan, student, teacher, train_labels, feature_table: FeatureTableFn | None = None):
    """Intermediate-layer distillation: yields its step function and the modules it trains (student,
    objective).

    The teacher's records come from `feature_table(needs, stop_after, logits)` when it gives a table
    (the features cache), else from a teacher forward at every step. Both models stop after their
    last mapped layer while the context is open: nothing above it is computed.
    """
    trainer = plan.trainer
    objective = Objective(
        plan.terms,
        plan.student_conf,
        plan.teacher_conf,
        train_labels,
        plan.seed,
        recompute=trainer.recompute_losses,
        fused=trainer.fused_losses,
    )
    if plan.init.carry_projections:
        carry_projections(objective, plan.init.path)
    objective = objective.to(plan.device)
    logits = output_logits if objective.uses_logits else None
    needs, stop_after = objective.needs("teacher"), objective.last_layer("teacher")
    table = feature_table(needs, stop_after, logits) if feature_table is not None else None
    with (
        FeatureRecorder(
            student, objective.needs("student"), objective.last_layer("student")
        ) as student_recorder,
        FeatureRecorder(teacher, needs, stop_after)
        if table is None
        else nullcontext() as teacher_recorder,
    ):
        student_side = StudentSide(student_recorder, objective, logits)
        teacher_records = (
            table.records
            if table is not None
            else teacher_records_now(teacher_recorder, logits, plan.device, plan.precision)
        )
        step = distillation_step(student_side, teacher_records, plan.device, plan.precision)
        yield step, [student, objective]
