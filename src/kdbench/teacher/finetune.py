"""The fine-tuned teacher: trained once per (teacher, task, data, recipe), cached on disk, shared by
every run.

The cache key (`teacher.cache.teacher_key`) covers everything that determines the fine-tuned
weights. Concurrent jobs that need the same teacher take a file lock: one builds it (into a temp
folder, renamed into place when complete), the others wait and reuse it.
"""

from __future__ import annotations

import shutil
import time
from functools import partial
from pathlib import Path

from filelock import FileLock
from transformers import AutoModelForSequenceClassification, PreTrainedModel, set_seed

from kdbench.models.attention import prepare_for_training
from kdbench.models.hub import load, model_identity
from kdbench.models.pretrained import pretrained_teacher
from kdbench.models.student import describe_task_head
from kdbench.records.record import read_json, write_json
from kdbench.records.steplog import StepLog
from kdbench.runtime import storage
from kdbench.teacher.cache import cache_path, teacher_key
from kdbench.teacher.frozen import FineTuned, freeze
from kdbench.training.best import BestDev
from kdbench.training.checkpoint import Checkpoints
from kdbench.training.evaluate import evaluate
from kdbench.training.hooks import Hook, standard_hooks
from kdbench.training.loop import train_stage
from kdbench.training.resume import Resume
from kdbench.training.steps import supervised_step


def load_finetuned(path: Path, num_labels: int) -> PreTrainedModel:
    return load(
        AutoModelForSequenceClassification,
        path,
        saved_as="the fine-tuned teacher",
        num_labels=num_labels,
    )


def finetuned_teacher(plan, train_loader, eval_loaders, log: StepLog) -> FineTuned:
    """The task's fine-tuned teacher, frozen, with its dev metrics: the given one, the cached one,
    or fine-tuned now (once for every run that needs it: concurrent runs wait on the cache entry's
    lock)."""
    if plan.teacher.finetuned_path is not None:
        return given_teacher(plan, eval_loaders)
    path = cache_path(plan)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if storage.intact(path, "the fine-tuned teacher's cache entry"):
            teacher = freeze(load_finetuned(path, plan.num_labels).to(plan.device))
            metrics = read_json(path / "kdbench_teacher.json")["metrics"]
            return FineTuned(teacher, metrics, 0.0, path.name)
        return fine_tune_teacher(plan, path, train_loader, eval_loaders, log)


def given_teacher(plan, eval_loaders) -> FineTuned:
    """The fine-tuned teacher at `teacher.finetuned_path`, named by its files' content."""
    path = plan.teacher.finetuned_path
    teacher = freeze(load_finetuned(path, plan.num_labels).to(plan.device))
    metrics = evaluate(
        teacher, eval_loaders, plan.task.metrics, plan.device, plan.precision, "teacher_evaluation"
    )
    return FineTuned(teacher, metrics, 0.0, model_identity(str(path)))


def fine_tune_teacher(plan, path: Path, train_loader, eval_loaders, log: StepLog) -> FineTuned:
    """Fine-tune the pre-trained teacher and write it as the cache entry `path` (complete, or not at
    all).

    Checkpointed like a stage, next to the entry: a killed or pre-empted builder's successor
    resumes it. The checkpoints are keyed like the entry, without a fingerprint."""
    start, trainer, stage = time.perf_counter(), plan.trainer, plan.stages["teacher"]
    set_seed(trainer.teacher_seed)
    teacher = pretrained_teacher(plan.teacher, plan.num_labels, trainer.teacher_seed)
    teacher = teacher.to(plan.device)
    checkpoints = Checkpoints(path.with_name(path.name + ".checkpoints"))
    if stage.runs:
        prepare_for_training(teacher, trainer.recompute_attention)
        score = partial(
            evaluate, teacher, eval_loaders, plan.task.metrics, plan.device, plan.precision
        )
        step = supervised_step(teacher, plan.device, plan.precision)
        hooks = teacher_hooks(trainer, teacher, score, checkpoints, log)
        resume = Resume.of(checkpoints, (stage.name,), log).at(stage.name)
        train_stage(stage, [teacher], train_loader, step, plan.device, hooks, resume)
    freeze(teacher)
    metrics = evaluate(
        teacher, eval_loaders, plan.task.metrics, plan.device, plan.precision, "teacher_evaluation"
    )
    seconds = time.perf_counter() - start
    describe_task_head(teacher.config, plan.task.labels)  # given back, it is matched by name
    save_entry(path, teacher, {"key": teacher_key(plan), "metrics": metrics, "seconds": seconds})
    checkpoints.clear()
    return FineTuned(teacher, metrics, seconds, path.name)


def teacher_hooks(
    trainer, teacher: PreTrainedModel, score, checkpoints: Checkpoints, log: StepLog
) -> list[Hook]:
    """The standard hooks; with `trainer.teacher_best_checkpoint`, the dev set scored after
    every epoch (logged as stage `teacher_dev`), the best epoch's weights kept and loaded back at
    the end (the study's released code picks the teacher's best dev checkpoint)."""
    best = None
    if trainer.teacher_best_checkpoint:
        store, logged = checkpoints.folder / "best.pt", (log, "teacher_dev")
        best = BestDev(score, teacher, store, at_epochs=True, keep_weights=True, log=logged)
    return standard_hooks(trainer, log, checkpoints, scorer=best)


def save_entry(path: Path, teacher: PreTrainedModel, meta: dict) -> None:
    """The cache entry `path`: the teacher's weights and `meta` (complete, or not at all)."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with storage.space_for(path, storage.tensor_bytes(teacher.state_dict()), partial=tmp):
        teacher.save_pretrained(str(tmp))
        write_json(tmp / "kdbench_teacher.json", meta)
        storage.publish(tmp, path)
