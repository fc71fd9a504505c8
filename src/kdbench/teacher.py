"""The fine-tuned teacher: trained once per (teacher, task, data, recipe), cached on disk, shared by every run.

The cache key covers everything that determines the fine-tuned weights. Concurrent jobs that need the same
teacher take a file lock: one builds it (into a temp folder, renamed into place when complete), the others
wait and reuse it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from functools import partial
from pathlib import Path
from typing import NamedTuple

import torch
from filelock import FileLock
from transformers import AutoModelForSequenceClassification, PreTrainedModel, set_seed

from kdbench import storage
from kdbench.data.batches import make_loader
from kdbench.metrics import scores_only
from kdbench.models import hub
from kdbench.models.attention import prepare_for_training
from kdbench.models.pretrained import pretrained_teacher
from kdbench.record import StepLog, read_json, write_json
from kdbench.specs import OptimizerSpec
from kdbench.training import loop
from kdbench.training.checkpoint import Checkpoints
from kdbench.training.evaluate import evaluate, logits_table
from kdbench.training.hooks import Hook, standard_hooks
from kdbench.training.steps import supervised_step

logger = logging.getLogger("kdbench")

TEACHER_CACHE_VERSION = 1


def teacher_key(plan) -> dict:
    """Everything that determines the fine-tuned teacher (and nothing that varies across a sweep's students)."""
    trainer = plan.trainer
    key = {
        "version": TEACHER_CACHE_VERSION,
        "teacher": plan.teacher.identity,
        "task": plan.task.name,
        "data": {
            "source": str(plan.data.glue_dir or "hub"),
            "train_limit": plan.data.train_limit,
            "subset_seed": plan.data.subset_seed,
        },
        "recipe": {
            k: getattr(trainer, k)
            for k in ("teacher_epochs", "teacher_lr", "batch_size", "warmup_ratio", "weight_decay",
                      "adam_betas", "adam_eps", "max_grad_norm", "max_length", "teacher_seed")
        } | {"precision": plan.precision},  # as resolved for the device: `auto` names no precision
    }
    if trainer.teacher_group_by_length:  # only then: the entries of teachers trained on plain batches keep their keys
        key["recipe"]["group_by_length"] = True
    if trainer.teacher_best_checkpoint:  # only then: the last epoch's teachers keep their keys
        key["recipe"]["best_checkpoint"] = True
    return key | content_key(plan)


def content_key(plan) -> dict:
    """The hash of the user's data (a user's file changes under its name); GLUE tasks keep their
    keys."""
    return {"content": plan.task.content_hash} if plan.task.content_hash is not None else {}


def cache_path(plan) -> Path:
    digest = hashlib.sha256(json.dumps(teacher_key(plan), sort_keys=True).encode()).hexdigest()[:16]
    return plan.cache_dir / "teachers" / f"{plan.task.name}-{plan.teacher.name}-{digest}"


def load_finetuned(path: Path, num_labels: int) -> PreTrainedModel:
    return hub.load(AutoModelForSequenceClassification, path, saved_as="the fine-tuned teacher",
                       num_labels=num_labels)


def freeze(model: PreTrainedModel) -> PreTrainedModel:
    """The teacher never trains again: eval mode (no dropout) and no gradients."""
    model.eval()
    model.requires_grad_(False)
    return model


def in_run_precision(frozen: PreTrainedModel, precision: str) -> PreTrainedModel:
    """A frozen model's weights cast to bf16 once in a bf16 run (autocast would re-cast them at
    every forward: it keeps the casts of weights that require grad only); as they are in an fp32
    run. Cast after the student has copied its layers and after anything saved from the model: those
    keep fp32 weights."""
    return frozen.to(torch.bfloat16) if precision == "bf16" else frozen


class BestDevEpoch(Hook):
    """After every epoch, the dev metrics (logged as stage `teacher_dev`); the weights of the best
    first metric so far are kept in the file `store` (so a resumed fine-tuning keeps the epochs
    before it), and loaded back into the model at the end (the study's released code picks the
    teacher's best dev checkpoint)."""

    def __init__(self, model: PreTrainedModel, score, store: Path, log: StepLog):
        self.model, self.score, self.store, self.log = model, score, store, log

    def best(self) -> dict | None:
        if not self.store.exists():
            return None
        return torch.load(self.store, map_location="cpu", weights_only=True)

    def on_epoch_end(self, progress) -> None:
        metrics = self.score()
        self.model.train()  # evaluation left it in eval mode
        self.log.log("teacher_dev", progress.step, scores_only(metrics), epoch=progress.epoch)
        best, primary = self.best(), next(iter(metrics))
        if best is None or metrics[primary] > best["metrics"][primary]:
            self.keep({"epoch": progress.epoch, "metrics": metrics,
                       "weights": self.model.state_dict()})

    def keep(self, state: dict) -> None:
        tmp = self.store.with_name(f".{self.store.name}.tmp")
        self.store.parent.mkdir(parents=True, exist_ok=True)
        storage.atomic_write(tmp, lambda handle: torch.save(state, handle), binary=True,
                             need=storage.tensor_bytes(state["weights"]))
        storage.publish(tmp, self.store)

    def on_end(self, progress) -> None:
        best = self.best()
        if best is not None:
            logger.info("the teacher keeps epoch %d's weights, its best on dev", best["epoch"])
            self.model.load_state_dict(best["weights"])


class FineTuned(NamedTuple):
    model: PreTrainedModel  # frozen, on the plan's device
    metrics: dict  # dev metrics
    seconds: float  # spent fine-tuning in this run (0 when loaded)
    identity: str  # names these exact weights (for caches derived from the teacher)


def finetuned_teacher(plan, train_loader, eval_loaders, log: StepLog) -> FineTuned:
    """The task's fine-tuned teacher, frozen, with its dev metrics: the given one, the cached one, or fine-tuned
    now (once for every run that needs it: concurrent runs wait on the cache entry's lock)."""
    if plan.teacher.finetuned_path is not None:
        path = plan.teacher.finetuned_path
        teacher = freeze(load_finetuned(path, plan.num_labels).to(plan.device))
        metrics = evaluate(teacher, eval_loaders, plan.task.metrics, plan.device, plan.precision,
                           "teacher_evaluation")
        stamp = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in path.iterdir() if p.is_file())
        return FineTuned(teacher, metrics, 0.0, f"{path.resolve()}:{stamp}")
    path = cache_path(plan)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if storage.intact(path, "the fine-tuned teacher's cache entry"):
            teacher = load_finetuned(path, plan.num_labels).to(plan.device)
            return FineTuned(freeze(teacher), read_json(path / "kdbench_teacher.json")["metrics"], 0.0, path.name)
        return fine_tune_teacher(plan, path, train_loader, eval_loaders, log)


def fine_tune_teacher(plan, path: Path, train_loader, eval_loaders, log: StepLog) -> FineTuned:
    """Fine-tune the pre-trained teacher and write it as the cache entry `path` (complete, or not at all).

    Checkpointed like a stage, next to the entry: a killed or pre-empted builder's successor resumes it."""
    start, trainer = time.perf_counter(), plan.trainer
    set_seed(trainer.teacher_seed)
    teacher = pretrained_teacher(plan.teacher, plan.num_labels, trainer.teacher_seed).to(plan.device)
    checkpoints = Checkpoints(path.with_name(path.name + ".checkpoints"))  # keyed like the entry: no fingerprint
    if trainer.teacher_epochs > 0:
        prepare_for_training(teacher, trainer.recompute_attention)
        latest = checkpoints.latest()
        if latest is not None:
            logger.info("resuming the teacher's fine-tuning from %s, step %d", latest[1], latest[0]["step"])
        stage = loop.Stage("teacher", [teacher], train_loader, supervised_step(teacher, plan.device, plan.precision),
                           OptimizerSpec.of(trainer, trainer.teacher_lr), plan.device, epochs=trainer.teacher_epochs)
        hooks = standard_hooks(trainer, log, checkpoints)
        if trainer.teacher_best_checkpoint:  # first: an epoch's checkpoint follows its evaluation
            score = partial(evaluate, teacher, eval_loaders, plan.task.metrics, plan.device,
                            plan.precision)
            hooks.insert(0, BestDevEpoch(teacher, score, checkpoints.folder / "best.pt", log))
        loop.train(stage, hooks, latest[0] if latest else None)
    freeze(teacher)
    metrics = evaluate(teacher, eval_loaders, plan.task.metrics, plan.device, plan.precision, "teacher_evaluation")
    seconds = time.perf_counter() - start
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with storage.space_for(path, storage.tensor_bytes(teacher.state_dict()), partial=tmp):
        teacher.save_pretrained(str(tmp))
        write_json(tmp / "kdbench_teacher.json", {"key": teacher_key(plan), "metrics": metrics, "seconds": seconds})
        storage.publish(tmp, path)
    checkpoints.clear()
    return FineTuned(teacher, metrics, seconds, path.name)


def derived_key(teacher: FineTuned, train_set, tokenizer, plan, augmented: str | None = None) -> dict:
    """What determines anything computed from the frozen teacher over the training set: the teacher's weights,
    the examples and their tokenisation, the precision. `augmented` names the augmented set's cache entry."""
    key = {"teacher": teacher.identity, "task": plan.task.name, "train_limit": plan.data.train_limit,
           "subset_seed": plan.data.subset_seed, "max_length": plan.trainer.max_length,
           "tokenizer": getattr(tokenizer, "name_or_path", ""), "precision": plan.precision, "n": len(train_set)}
    if plan.precision == "bf16":  # only then: by the teacher in bf16 weights (`in_run_precision`)
        key["teacher_weights"] = "bf16"
    if augmented is not None:  # only then: the entries of the task's own subsets keep their keys
        key["augmented"] = augmented
    return key | content_key(plan)


def cached_tensors(folder: Path, prefix: str, key: dict, build, size: int, what: str):
    """The tensors (a tensor or a dict of them) `build()` makes for `key`: read from their cache entry in `folder`,
    or built now and written (complete, or not at all; concurrent runs wait on the entry's lock)."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = folder / f"{prefix}-{digest}.pt"
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if storage.intact(path, what):
            return torch.load(path, map_location="cpu", weights_only=True)
        tensors = build()
        tmp = path.with_name(f".{path.name}.tmp")
        storage.atomic_write(tmp, lambda handle: torch.save(tensors, handle), binary=True, need=size)
        storage.publish(tmp, path)
        return tensors


def teacher_logits_table(teacher: FineTuned, train_set, tokenizer, plan, augmented: str | None = None) -> torch.Tensor:
    """The teacher's logits for every training example, [N, C] float32 by `example` number.

    The teacher is deterministic in eval mode, so its prediction-layer targets are computed once per
    (fine-tuned teacher, task subset, tokenisation, precision) and cached on disk, then shared by every
    epoch, seed and objective of a sweep.
    """

    def build():
        loader = make_loader(train_set, tokenizer, plan.trainer.eval_batch_size, shuffle=False,
                             loading=plan.loading)
        return logits_table(teacher.model, loader, len(train_set), plan.num_labels, plan.device, plan.precision)

    return cached_tensors(plan.cache_dir / "teacher_logits", plan.task.name,
                          derived_key(teacher, train_set, tokenizer, plan, augmented), build,
                          4 * len(train_set) * plan.num_labels, "the teacher-logits cache entry")
