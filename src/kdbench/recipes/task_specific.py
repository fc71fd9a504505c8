"""The task-specific recipe (the paper's Section 4), top to bottom:

1. data: the task's train subset and dev set(s), tokenised with the teacher's tokenizer; the stages train on the
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
from functools import partial
from pathlib import Path

import torch

from kdbench.card import model_card
from kdbench.cost import compare_costs
from kdbench.data.augmentation import augmented_train_set
from kdbench.data.batches import make_loader
from kdbench.data.glue import dev_sets, encode_train, train_subset
from kdbench.models.compilation import compile_if_asked
from kdbench.models.pretrained import teacher_tokenizer
from kdbench.models.student import save_student, student_for
from kdbench.objectives.features import FeatureRecorder
from kdbench.objectives.terms import Objective, carry_projections
from kdbench.plan import Plan
from kdbench.record import StepLog
from kdbench.specs import OptimizerSpec
from kdbench.teacher import finetuned_teacher, in_run_precision, teacher_logits_table
from kdbench.teacher_features import FeatureTableFn, teacher_feature_table
from kdbench.training import loop
from kdbench.training.checkpoint import Checkpoints, resumable_state, set_rng_state
from kdbench.training.evaluate import evaluate
from kdbench.training.hooks import standard_hooks
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


def run_task_specific(plan: Plan, run_dir: Path, log: StepLog) -> dict:
    """Runs the recipe; returns the record's metrics, teacher metrics, timing (seconds: the teacher's fine-tuning,
    the teacher's features and logits tables, built or read from the cache, outside the stages' own times, each
    stage, evaluation) and the student's parameter count."""
    trainer = plan.trainer
    tokenizer = teacher_tokenizer(plan.teacher, plan.cache_dir)
    originals = train_subset(plan.task, plan.data)
    train_set = encode_train(originals, plan.task, tokenizer, trainer.max_length)
    eval_sets = dev_sets(plan.task, plan.data, tokenizer, trainer.max_length)
    teacher_loader = make_loader(train_set, tokenizer, trainer.batch_size, shuffle=True, seed=trainer.teacher_seed,
                                 group_by_length=trainer.teacher_group_by_length,
                                 loading=plan.loading)
    eval_loaders = {suffix: make_loader(ds, tokenizer, trainer.eval_batch_size, shuffle=False,
                                        loading=plan.loading)
                    for suffix, ds in eval_sets.items()}
    teacher = finetuned_teacher(plan, teacher_loader, eval_loaders, log)
    if trainer.teacher_dropout:
        teacher.model.train()  # dropout on while it teaches, still without gradients

    student = student_for(plan, teacher.model)
    compile_if_asked(plan.trainer, student, teacher.model)
    in_run_precision(teacher.model, plan.precision)
    train_set, augmented = distillation_set(plan, originals, train_set, tokenizer)
    train_loader = make_loader(train_set, tokenizer, trainer.batch_size, shuffle=True, seed=plan.seed,
                               group_by_length=trainer.group_by_length, loading=plan.loading)
    timing = {"teacher_finetune_s": teacher.seconds, "stage1_s": 0.0, "stage2_s": 0.0}
    checkpoints = Checkpoints(run_dir / "checkpoints", meta={"fingerprint": plan.fingerprint})
    latest = resumable_state(checkpoints, plan.fingerprint)
    hooks = standard_hooks(trainer, log, checkpoints)

    if plan.terms and trainer.stage1_epochs > 0 and not skip_stage("stage1", latest, student, plan.device):
        features = timed(partial(teacher_feature_table, teacher, train_set, tokenizer, plan,
                                 augmented and augmented["entry"]), timing, "features_table_s")
        cached = trainer.cache_teacher_features and not trainer.teacher_dropout
        with stage1(plan, student, teacher.model, train_set["labels"],
                    features if cached else None) as (step, modules):
            optimizer = OptimizerSpec.of(trainer, trainer.lr, trainer.stage1_schedule)
            stage = loop.Stage("stage1", modules, train_loader, step, optimizer, plan.device,
                               epochs=trainer.stage1_epochs)
            stats = loop.train(stage, hooks, resume_from("stage1", latest))
        timing.update(stage1_s=stats["seconds"], stage1_examples_per_s=stats["examples_per_s"])

    if trainer.stage2_epochs > 0 and not skip_stage("stage2", latest, student, plan.device):
        if trainer.cache_teacher_logits and not trainer.teacher_dropout:
            table = timed(teacher_logits_table, timing, "logits_table_s")(
                teacher, train_set, tokenizer, plan, augmented and augmented["entry"])
            table = table.to(plan.device)
            targets = lambda batch: table[batch["example"]]  # noqa: E731
        else:
            targets = teacher_logits_now(teacher.model, plan.device, plan.precision)
        step = prediction_kd_step(student, targets, plan.kd, plan.device, plan.precision)
        optimizer = OptimizerSpec.of(trainer, trainer.stage2_lr or trainer.lr)
        stage = loop.Stage("stage2", [student], train_loader, step, optimizer, plan.device, epochs=trainer.stage2_epochs)
        stats = loop.train(stage, hooks, resume_from("stage2", latest))
        timing.update(stage2_s=stats["seconds"], stage2_examples_per_s=stats["examples_per_s"])

    start = time.perf_counter()
    metrics = evaluate(student, eval_loaders, plan.task.metrics, plan.device, plan.precision)
    timing["eval_s"] = time.perf_counter() - start
    parameters = sum(p.numel() for p in student.parameters())
    outcome = {"metrics": metrics, "teacher_metrics": teacher.metrics, "timing": timing,
               "student_parameters": parameters} | ({"augmented": augmented} if augmented else {})
    if plan.measure_cost:
        outcome["cost"] = compare_costs(teacher.model, student, train_set["length"], plan.device,
                                        plan.precision)
    if plan.save_student:
        save_student(student, tokenizer, run_dir / "student", plan.chain,
                     labels=plan.task.labels, card=model_card(plan, outcome))
    if not trainer.keep_checkpoints:
        checkpoints.clear()
    return outcome


def distillation_set(plan: Plan, originals, train_set, tokenizer):
    """The stages' training set: the task's subset (`train_set`, the tokenised `originals`), or the augmentation
    of `originals` (with what the record says of it)."""
    if plan.augment is None:
        return train_set, None
    source = str(plan.data.glue_dir or plan.data.hf_dataset)
    augmented, path = augmented_train_set(originals, plan.task, plan.augment, plan.cache_dir, source, plan.device,
                                          plan.trainer.progress_bar)
    encoded = encode_train(augmented, plan.task, tokenizer, plan.trainer.max_length)
    return encoded, {"entry": path.name, "path": str(path), "examples": len(encoded), "originals": len(train_set)}


@contextmanager
def stage1(plan: Plan, student, teacher, train_labels, feature_table: FeatureTableFn | None = None):
    """Intermediate-layer distillation: yields its step function and the modules it trains (student, objective).

    The teacher's records come from `feature_table(needs, stop_after, logits)` when it gives a table (the features
    cache), else from a teacher forward at every step. Both models stop after their last mapped layer while the
    context is open: nothing above it is computed.
    """
    trainer = plan.trainer
    objective = Objective(plan.terms, plan.student_conf, plan.teacher_conf, train_labels, plan.seed,
                          recompute=trainer.recompute_losses, fused=trainer.fused_losses)
    if plan.init.carry_projections:
        carry_projections(objective, plan.init.path)
    objective = objective.to(plan.device)
    logits = output_logits if objective.uses_logits else None
    needs, stop_after = objective.needs("teacher"), objective.last_layer("teacher")
    table = feature_table(needs, stop_after, logits) if feature_table is not None else None
    with (
        FeatureRecorder(student, objective.needs("student"), objective.last_layer("student")) as student_recorder,
        FeatureRecorder(teacher, needs, stop_after) if table is None else nullcontext() as teacher_recorder,
    ):
        student_side = StudentSide(student_recorder, objective, logits)
        teacher_records = table.records if table is not None else teacher_records_now(
            teacher_recorder, logits, plan.device, plan.precision)
        step = distillation_step(student_side, teacher_records, plan.device, plan.precision)
        yield step, [student, objective]


def skip_stage(stage: str, latest: dict | None, student, device: torch.device) -> bool:
    """Whether a checkpoint already covers this stage; if it ended exactly there, its weights and the random
    state at its end are loaded (the next stage's dropout then draws as in an uninterrupted run)."""
    if latest is None:
        return False
    mine, theirs = STAGES.index(stage), STAGES.index(latest["stage"])
    if mine == theirs and latest["done"]:
        student.load_state_dict(latest["modules"][0])
        set_rng_state(latest["rng"], device)
    return mine < theirs or (mine == theirs and latest["done"])


def resume_from(stage: str, latest: dict | None) -> dict | None:
    return latest if latest is not None and latest["stage"] == stage else None
