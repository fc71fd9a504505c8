"""The task-specific recipe (the paper's Section 4), top to bottom:

1. data: the task's train subset and dev set(s), tokenised with the teacher's tokenizer;
2. teacher: fine-tuned on the task (cached, shared by every run that needs it), frozen;
3. student: built from its shape, initialised randomly or from the chosen teacher layers;
4. stage 1: intermediate-layer distillation with the objective's terms (skipped for vanilla KD);
5. stage 2: prediction-layer distillation with vanilla KD;
6. evaluation on the dev set(s).
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from omegaconf import DictConfig
from transformers import set_seed

from kdbench import data, loop, models
from kdbench.checkpoint import Checkpoints
from kdbench.errors import KdbenchError
from kdbench.initialization import init_from_teacher
from kdbench.objectives.features import FeatureRecorder
from kdbench.objectives.functional import kd_loss
from kdbench.objectives.objective import LOGITS, Objective, computation
from kdbench.plan import Plan
from kdbench.record import StepLog
from kdbench.teacher import finetuned_teacher, teacher_logits_table

logger = logging.getLogger("kdbench")


def detached(tree):
    """Copies of inference-mode tensors that autograd may save (inference tensors cannot be saved for backward)."""
    if isinstance(tree, dict):
        return {k: detached(v) for k, v in tree.items()}
    return tree.clone()


def prepare_data(cfg: DictConfig, tokenizer):
    train = data.subset(data.load_split(cfg.task, "train", cfg.data), cfg.data.train_limit, cfg.data.subset_seed)
    # `example` numbers the training examples 0..N-1 (per-example state such as CRD's memory banks indexes it)
    train = train.add_column("example", list(range(len(train))))
    train = data.tokenize(train, cfg.task, tokenizer, cfg.trainer.max_length)
    eval_sets = {}
    for suffix, split in cfg.task.eval_splits.items():
        dev = data.load_split(cfg.task, split, cfg.data)
        if cfg.data.eval_limit is not None:
            dev = dev.select(range(min(cfg.data.eval_limit, len(dev))))
        eval_sets[suffix] = data.tokenize(dev, cfg.task, tokenizer, cfg.trainer.max_length)
    return train, eval_sets


def recorded(recorder: FeatureRecorder, inputs: dict) -> dict:
    """The recorder's features of one forward, plus the logits when the forward ran to the end."""
    output = recorder.forward(**inputs)
    records = dict(recorder.records)
    if output is not None:
        records[LOGITS] = output.logits
    return records


def stage1_losses(student_recorder: FeatureRecorder, teacher_recorder: FeatureRecorder, objective: Objective,
                  precision: str, device):
    """Step function of intermediate-layer distillation from the two models' recorded features."""

    def step(batch):
        inputs = loop.model_inputs(batch)
        with torch.inference_mode(), loop.autocast(device, precision):
            teacher_records = recorded(teacher_recorder, inputs)
        teacher_records = detached(teacher_records)
        with loop.autocast(device, precision):
            student_records = recorded(student_recorder, inputs)
        return objective(student_records, teacher_records, batch)

    return step


@contextmanager
def stage1(plan: Plan, student, teacher, train_labels, seed: int, trainer: DictConfig | None = None):
    """Intermediate-layer distillation: yields its step function and the modules it trains (student, objective).

    Both models stop after their last mapped layer while the context is open: nothing above it is computed.
    `trainer`: its settings of how the objective computes (`computation`; None: the defaults).
    """
    how = computation(trainer) if trainer is not None else {}
    objective = Objective(plan.terms, plan.student_conf, plan.teacher_conf, train_labels, seed, **how)
    objective.to(plan.device)
    with (
        FeatureRecorder(student, objective.needs("student"), objective.last_layer("student")) as student_recorder,
        FeatureRecorder(teacher, objective.needs("teacher"), objective.last_layer("teacher")) as teacher_recorder,
    ):
        yield stage1_losses(student_recorder, teacher_recorder, objective, plan.precision, plan.device), [student, objective]


def teacher_logits_fn(teacher, device, precision: str):
    """The teacher's logits of a batch, computed now (the uncached path)."""

    def logits(batch):
        with torch.inference_mode(), loop.autocast(device, precision):
            out = teacher(**loop.model_inputs(batch)).logits.float()
        return out.clone()  # a normal tensor: autograd may save it

    return logits


def stage2_losses(student, teacher_logits, kd: DictConfig, precision: str, device):
    """Step function of prediction-layer distillation: vanilla KD against the teacher's logits (+ hard labels).

    `teacher_logits(batch)` gives the targets: from the on-disk cache, or a teacher forward.
    """

    def step(batch):
        inputs = loop.model_inputs(batch)
        targets = teacher_logits(batch)
        with loop.autocast(device, precision):
            student_logits = student(**inputs).logits
        loss = kd_loss(student_logits, targets, batch["labels"], temperature=kd.temperature, alpha=kd.alpha)
        return {"kd": loss, "total": loss}

    return step


STAGES = ("stage1", "stage2")


def resumable_state(checkpoints: Checkpoints, fingerprint: str) -> dict | None:
    """The latest checkpoint of this run directory, if any; refuses one written by a different config."""
    latest = checkpoints.latest()
    if latest is None:
        return None
    state, path = latest
    if state.get("fingerprint") != fingerprint:
        raise KdbenchError(
            f"{checkpoints.folder} holds checkpoints of a different configuration: re-run the same command to "
            "resume, or give this run its own directory (paths.run_dir or Hydra's hydra.run.dir)"
        )
    logger.info("resuming from %s, %s, step %d%s", path, state["stage"], state["step"], " (done)" if state["done"] else "")
    return state


def skip_stage(stage: str, latest: dict | None, modules: list) -> bool:
    """Whether a checkpoint already covers this stage; if it ended exactly there, its weights are loaded."""
    if latest is None:
        return False
    mine, theirs = STAGES.index(stage), STAGES.index(latest["stage"])
    if mine == theirs and latest["done"]:
        modules[0].load_state_dict(latest["modules"][0])  # the student
    return mine < theirs or (mine == theirs and latest["done"])


def resume_from(stage: str, latest: dict | None) -> dict | None:
    return latest if latest is not None and latest["stage"] == stage else None


def run_task_specific(cfg: DictConfig, plan: Plan, run_dir: Path, log: StepLog) -> dict:
    """Runs the recipe; returns the record's metrics, teacher metrics and timing."""
    device, precision, trainer = plan.device, plan.precision, cfg.trainer
    tokenizer = models.teacher_tokenizer(cfg.teacher, plan.cache_dir)
    train_set, eval_sets = prepare_data(cfg, tokenizer)
    teacher_train_loader = data.make_loader(train_set, tokenizer, trainer.batch_size, shuffle=True, seed=trainer.teacher_seed)
    eval_loaders = {
        suffix: data.make_loader(ds, tokenizer, trainer.eval_batch_size, shuffle=False) for suffix, ds in eval_sets.items()
    }
    finetuned = finetuned_teacher(cfg, plan, teacher_train_loader, eval_loaders, log)
    teacher, teacher_metrics, teacher_seconds = finetuned.model, finetuned.metrics, finetuned.seconds

    set_seed(cfg.seed)
    student = models.build_student(plan.teacher_conf, cfg.student, plan.num_labels, cfg.seed)
    if plan.init_layers is not None:
        init_from_teacher(
            student, teacher, plan.init_layers,
            copy_embeddings=cfg.init.get("copy_embeddings", True), copy_head=cfg.init.get("copy_head", True),
        )
    models.prepare_for_training(student, trainer).to(device)
    if trainer.compile:  # measured in benchmarks/RESULTS.md; off by default
        models.compile_blocks(student, teacher)
    train_loader = data.make_loader(train_set, tokenizer, trainer.batch_size, shuffle=True, seed=cfg.seed,
                                    group_by_length=trainer.group_by_length)
    timing = {"teacher_finetune_s": teacher_seconds, "stage1_s": 0.0, "stage2_s": 0.0}
    checkpoints = Checkpoints(run_dir / "checkpoints", meta={"fingerprint": plan.fingerprint})
    latest = resumable_state(checkpoints, plan.fingerprint)

    if plan.terms and trainer.stage1_epochs > 0 and not skip_stage("stage1", latest, [student]):
        with stage1(plan, student, teacher, train_set["labels"], cfg.seed, trainer) as (step, modules):
            stats = loop.train("stage1", modules, train_loader, trainer.stage1_epochs, trainer.lr,
                               step, trainer, log, device, checkpoints, resume_from("stage1", latest))
        timing.update(stage1_s=stats["seconds"], stage1_examples_per_s=stats["examples_per_s"])

    if trainer.stage2_epochs > 0 and not skip_stage("stage2", latest, [student]):
        if trainer.cache_teacher_logits:
            table = teacher_logits_table(finetuned, train_set, tokenizer, cfg, plan).to(device)
            step = stage2_losses(student, lambda batch: table[batch["example"]], cfg.prediction_kd, precision, device)
        else:
            step = stage2_losses(student, teacher_logits_fn(teacher, device, precision), cfg.prediction_kd, precision, device)
        stats = loop.train("stage2", [student], train_loader, trainer.stage2_epochs, trainer.lr, step, trainer, log,
                           device, checkpoints, resume_from("stage2", latest))
        timing.update(stage2_s=stats["seconds"], stage2_examples_per_s=stats["examples_per_s"])

    start = time.perf_counter()
    metrics = loop.evaluate(student, eval_loaders, cfg.task.metrics, device, precision)
    timing["eval_s"] = time.perf_counter() - start
    if cfg.save_student:
        student.save_pretrained(str(run_dir / "student"))
        tokenizer.save_pretrained(str(run_dir / "student"))
    if not trainer.keep_checkpoints:
        checkpoints.clear()
    return {"metrics": metrics, "teacher_metrics": teacher_metrics, "timing": timing}
