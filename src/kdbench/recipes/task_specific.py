"""The task-specific recipe (the paper's Section 4), top to bottom:

1. data: the task's train subset and dev set(s), tokenised with the teacher's tokenizer; the stages
   train on the subset or, with `augment=tinybert`, on its augmentation (built once, cached);
2. teacher: fine-tuned on the task's own subset (`stages.teacher`; cached, shared by every run that
   needs it), frozen;
3. student: built from its shape, initialised randomly or from the chosen teacher layers;
4. the distillation stages, each by `distil` and its `_loss_step`: `stages.intermediate` with the
   objective group's terms on the mapped layers (skipped for vanilla KD), then `stages.prediction`
   with its own objective (vanilla KD on the logits);
5. evaluation on the dev set(s) at the end of the last stage (its last step), or with
   `trainer.student_best_checkpoint` every `stages.prediction.eval_every` steps of it, the best
   evaluation's weights kept (the record's `scored` says which).
"""

from __future__ import annotations

import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from kdbench.data.augmentation import augmented_train_set
from kdbench.data.batches import eval_loaders, make_loader
from kdbench.data.columns import column_array
from kdbench.data.glue import dev_sets, encode_train, train_subset
from kdbench.measure.cost import compare_costs
from kdbench.models.compilation import compile_backend, compile_if_asked
from kdbench.models.pretrained import teacher_tokenizer
from kdbench.models.student import save_student
from kdbench.objectives.features import FeatureRecorder
from kdbench.objectives.terms import Objective, carry_projections
from kdbench.planning.plan import Plan
from kdbench.planning.stage_specs import StageSpec
from kdbench.records.card import model_card
from kdbench.records.predictions import PREDICTIONS_FILE
from kdbench.records.steplog import StepLog
from kdbench.runtime.precision import computing
from kdbench.teacher.features import teacher_feature_table
from kdbench.teacher.finetune import finetuned_teacher
from kdbench.teacher.frozen import FineTuned, in_run_precision
from kdbench.teacher.logits import LogitsRows, teacher_logits_table
from kdbench.training.best import BestDev
from kdbench.training.checkpoint import Checkpoints
from kdbench.training.evaluate import evaluate
from kdbench.training.hooks import standard_hooks
from kdbench.training.loop import train_stage
from kdbench.training.resume import Resume
from kdbench.training.steps import StepFn, output_logits, read_records, teacher_records_now

DISTILLATION = ("intermediate", "prediction")  # the stages that distil, after the teacher's


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
    augmentation) with its tokenizer and labels, and the augmented set's cache entry."""

    teacher: FineTuned
    train_set: object
    tokenizer: object
    augmented: str | None

    def loader(self, stage: StageSpec, plan: Plan) -> torch.utils.data.DataLoader:
        """The stage's shuffled batches (the same for every stage of one seed and batch size),
        padded as the stage's `padding` says."""
        return make_loader(
            self.train_set,
            self.tokenizer,
            stage.batch_size,
            shuffle=True,
            seed=plan.seed,
            group_by_length=stage.group_by_length,
            loading=plan.loading,
            pad_to=stage.pad_to(plan.trainer.max_length),
        )


def run_task_specific(plan: Plan, run_dir: Path, log: StepLog) -> dict:
    """Runs the recipe; returns the record's metrics, teacher metrics, which of the student's
    evaluations they are (`scored`), timing (seconds: the teacher's fine-tuning, the teacher's
    features and logits tables, built or read from the cache, outside the stages' own times, each
    stage, evaluation) and the student's parameter count."""
    tokenizer = teacher_tokenizer(plan.teacher, plan.cache_dir)
    originals = train_subset(plan.task, plan.data)
    train_set = encode_train(originals, plan.task, tokenizer, plan.trainer.max_length)
    teacher, dev_loaders = teacher_and_dev(plan, train_set, tokenizer, log)
    student = plan.build_student(teacher.model)
    compile_if_asked(plan.trainer, student, teacher.model)
    in_run_precision(teacher.model, plan.precision)
    lesson, augmented = distillation_set(plan, teacher, originals, train_set, tokenizer)
    timing = {"teacher_finetune_s": teacher.seconds} | {f"{name}_s": 0.0 for name in DISTILLATION}
    checkpoints = Checkpoints(run_dir / "checkpoints", meta={"fingerprint": plan.fingerprint})
    resume = Resume.of(checkpoints, DISTILLATION, log, plan.fingerprint)
    scorer = student_scorer(plan, student, dev_loaders, run_dir, checkpoints.folder, log)
    stages = [plan.stages[name] for name in DISTILLATION]
    stages = [stage for stage in stages if stage.runs and stage.terms]
    for stage in stages:
        scores = scorer if stage is stages[-1] else None
        hooks = standard_hooks(plan.trainer, log, checkpoints, scorer=scores)
        if not resume.skips(stage.name, student, plan.device):
            distil(plan, stage, student, lesson, hooks, resume.at(stage.name), timing, scores)
    at = scored(scorer, stages[-1].name if stages else None, timing)
    outcome = {
        "metrics": scorer.metrics,
        "predictions": PREDICTIONS_FILE,
        "teacher_metrics": teacher.metrics,
        "scored": at,
        "timing": timing,
        "student_parameters": sum(p.numel() for p in student.parameters()),
        **({"augmented": augmented} if augmented else {}),
    }
    ship_student(plan, run_dir, student, lesson, outcome)
    if not plan.trainer.keep_checkpoints:
        checkpoints.clear()
    return outcome


def teacher_and_dev(plan: Plan, train_set, tokenizer, log: StepLog) -> tuple[FineTuned, dict]:
    """The fine-tuned teacher (fine-tuned on `train_set` by `stages.teacher` unless cached or
    given), in train mode with `trainer.teacher_dropout`, and the loaders of the dev set(s) that
    score it and the student."""
    trainer, stage = plan.trainer, plan.stages["teacher"]
    eval_sets = dev_sets(plan.task, plan.data, tokenizer, trainer.max_length)
    teacher_loader = make_loader(
        train_set,
        tokenizer,
        stage.batch_size,
        shuffle=True,
        seed=trainer.teacher_seed,
        loading=plan.loading,
        group_by_length=stage.group_by_length,
    )
    dev_loaders = eval_loaders(eval_sets, tokenizer, trainer.eval_batch_size, plan.loading)
    teacher = finetuned_teacher(plan, teacher_loader, dev_loaders, log)
    if trainer.teacher_dropout:
        teacher.model.train()  # dropout on while it teaches, still without gradients
    return teacher, dev_loaders


def student_scorer(plan: Plan, student, dev_loaders: dict, run_dir: Path, folder: Path, log):
    """The hook of the student's last stage that scores it on the dev set(s) at the stage's end
    (its last step), or with `trainer.student_best_checkpoint` also every
    `stages.prediction.eval_every` steps, the best evaluation's weights kept and loaded back at the
    end (TinyBERT's released prediction stage); each evaluation logged as stage `student_dev`, the
    kept one's predictions in the run's predictions file."""
    dev = (dev_loaders, plan.task.metrics, plan.device, plan.precision)
    written, kept = run_dir / f"latest.{PREDICTIONS_FILE}", run_dir / PREDICTIONS_FILE
    score = partial(evaluate, student, *dev, predictions_to=written)
    best = plan.trainer.student_best_checkpoint
    return BestDev(
        score,
        student,
        folder / "best.pt",
        every=plan.stages["prediction"].eval_every if best else 0,
        keep_weights=best,
        predictions=(written, kept),
        log=(log, "student_dev"),
    )


def scored(scorer: BestDev, last: str | None, timing: dict) -> dict:
    """The record's `scored`: the evaluation the metrics are, in the last stage (`last`; None: no
    stage distils, the student is scored as built); the evaluations' seconds as `eval_s`."""
    if last is None:
        scorer.consider(0, 0)
    elif scorer.metrics is None:  # the stage ended in an earlier start of the run: its evaluation
        scorer.read()
    timing["eval_s"] = scorer.seconds
    return scorer.scored(last)


def distil(
    plan: Plan,
    stage: StageSpec,
    student,
    lesson: Lesson,
    hooks: list,
    resume: dict | None,
    timing: dict,
    scorer: BestDev | None = None,
) -> None:
    """One distillation stage, from `resume` (a checkpoint of it) when given: the student and the
    stage's objective trained on `_loss_step`; its times into `timing`. A `scorer` (the student's
    dev evaluations, among `hooks` too) makes the student run whole while it trains."""
    labels = torch.from_numpy(column_array(lesson.train_set, "labels"))
    tables = teacher_tables(plan, lesson, timing)
    teacher = lesson.teacher.model
    whole = scorer is not None
    with stage_step(plan, stage, student, teacher, labels, tables, whole) as (step, modules):
        loader = lesson.loader(stage, plan)
        stats = train_stage(stage, modules, loader, step, plan.device, hooks, resume)
    examples = stats["examples_per_s"] * stats["seconds"]
    seconds = stats["seconds"] - (scorer.seconds if scorer is not None else 0.0)
    timing[f"{stage.name}_s"] = seconds  # training alone: the evaluations are `eval_s`
    timing[f"{stage.name}_examples_per_s"] = examples / seconds if seconds else 0.0


def _loss_step(student: FeatureRecorder, objective: Objective, teacher, plan: Plan) -> StepFn:
    """One batch's loss terms: the teacher's records (its features or logits: a forward without
    gradients, or the cache's rows), the student's (a forward that its hooks read), then the
    objective's terms, each weighted, and their sum under "total"."""
    logits = output_logits if objective.uses_logits else None

    def step(batch: dict) -> dict[str, torch.Tensor]:
        targets = teacher(batch)
        with computing(plan.device, plan.precision, student.model):
            records = read_records(student, batch, logits)
            return objective(records, targets, batch)

    return step


@contextmanager
def stage_step(
    plan: Plan, stage: StageSpec, student, teacher, labels, tables=None, whole: bool = False
):
    """Yields a distillation stage's `_loss_step` and the modules it trains (student, objective).

    The teacher's records come from `tables(needs, stop_after, logits)` when it gives a table (the
    caches), else from a teacher forward at every step: always so for an objective that reads padded
    positions (`Objective.reads_padding`: the features table holds real tokens only). Both models
    stop after their last mapped layer while the context is open: nothing above it is computed; the
    student runs `whole` (to its logits) where it is evaluated during the stage.
    """
    objective = stage_objective(plan, stage, labels)
    logits = output_logits if objective.uses_logits else None
    needs, stop_after = objective.needs("teacher"), objective.last_layer("teacher")
    cached = tables is not None and not objective.reads_padding
    table = tables(needs, stop_after, logits) if cached else None
    student_needs = objective.needs("student"), None if whole else objective.last_layer("student")
    with ExitStack() as recording:
        recorder = recording.enter_context(FeatureRecorder(student, *student_needs))
        if table is None:  # hooks on the teacher's layers while the stage runs
            forward = recording.enter_context(FeatureRecorder(teacher, needs, stop_after))
            records = teacher_records_now(forward, logits, plan.device, plan.precision)
        else:
            records = table.records
        yield _loss_step(recorder, objective, records, plan), [student, objective]


def stage_objective(plan: Plan, stage: StageSpec, labels: torch.Tensor) -> Objective:
    """The stage's objective on the plan's device (`labels` [N]: the training labels, by example
    number); the objective group's starts from the saved student's projections with
    `init.carry_projections`."""
    trainer = plan.trainer
    objective = Objective(
        list(stage.terms),
        plan.student_conf,
        plan.teacher_conf,
        labels,
        plan.seed,
        recompute=trainer.recompute_losses,
        fused=trainer.fused_losses,
        compile_backend=compile_backend(trainer),
        padding=stage.padding,
    )
    if plan.init.carry_projections and stage.objective is None:
        carry_projections(objective, plan.init.path)
    return objective.to(plan.device)


def teacher_tables(plan: Plan, lesson: Lesson, timing: dict):
    """The teacher's cached records, as `stage_step` asks for them: its logits table for an
    objective that reads only its logits, else its features at the objective's layers (None where
    they would not fit); none with its dropout on, where it runs at every step (as it does for an
    objective that reads padded positions: `stage_step`)."""
    trainer, source = plan.trainer, (lesson.teacher, lesson.train_set, lesson.tokenizer, plan)

    def tables(needs, stop_after, logits):
        if trainer.teacher_dropout:
            return None
        if not needs and logits is not None and trainer.cache_teacher_logits:
            table = timed(teacher_logits_table, timing, "logits_table_s")(*source, lesson.augmented)
            return LogitsRows(table.to(plan.device))
        if not trainer.cache_teacher_features:
            return None
        build = timed(teacher_feature_table, timing, "features_table_s")
        return build(*source, lesson.augmented, needs, stop_after, logits)

    return tables


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
            max_length=plan.trainer.max_length,
        )


def distillation_set(plan: Plan, teacher: FineTuned, originals, train_set, tokenizer):
    """The stages' lesson, on the task's subset (`train_set`, the tokenised `originals`) or the
    augmentation of `originals`, and what the record says of the augmentation (None without)."""
    augmented = None
    if plan.augment is not None:
        examples, path = augmented_train_set(
            originals,
            plan.task,
            plan.augment,
            plan.cache_dir,
            plan.data.source,
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
    lesson = Lesson(teacher, train_set, tokenizer, augmented and augmented["entry"])
    return lesson, augmented
