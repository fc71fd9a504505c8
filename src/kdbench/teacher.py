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
from pathlib import Path
from typing import NamedTuple

import torch
from filelock import FileLock
from omegaconf import DictConfig, OmegaConf
from transformers import AutoModelForSequenceClassification, PreTrainedModel, set_seed

from kdbench import data, loop, models
from kdbench.checkpoint import Checkpoints
from kdbench.errors import ModelNotFoundError
from kdbench.record import StepLog, atomic_write, read_json, write_json

logger = logging.getLogger("kdbench")

TEACHER_CACHE_VERSION = 1


def teacher_key(cfg: DictConfig) -> dict:
    """Everything that determines the fine-tuned teacher (and nothing that varies across a sweep's students)."""
    trainer = cfg.trainer
    return {
        "version": TEACHER_CACHE_VERSION,
        "teacher": OmegaConf.to_container(cfg.teacher, resolve=True),
        "task": cfg.task.name,
        "data": {
            "source": str(cfg.data.glue_dir or "env/hub"),
            "train_limit": cfg.data.train_limit,
            "subset_seed": cfg.data.subset_seed,
        },
        "recipe": {
            k: OmegaConf.to_container(trainer[k]) if OmegaConf.is_config(trainer[k]) else trainer[k]
            for k in ("teacher_epochs", "teacher_lr", "batch_size", "warmup_ratio", "weight_decay",
                      "adam_betas", "adam_eps", "max_grad_norm", "max_length", "teacher_seed", "precision")
        },
    }


def cache_path(cfg: DictConfig, cache_dir: Path) -> Path:
    key = teacher_key(cfg)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir / "teachers" / f"{cfg.task.name}-{cfg.teacher.name}-{digest}"


def load_finetuned(path: Path, num_labels: int) -> PreTrainedModel:
    try:
        return AutoModelForSequenceClassification.from_pretrained(str(path), num_labels=num_labels, trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(
            f"cannot load the fine-tuned teacher from {path} ({type(exc).__name__}): give a directory written by "
            "save_pretrained with the task's number of labels"
        ) from exc


def freeze(model: PreTrainedModel) -> PreTrainedModel:
    """The teacher never trains again: eval mode (no dropout) and no gradients."""
    model.eval()
    model.requires_grad_(False)
    return model


class FineTuned(NamedTuple):
    model: PreTrainedModel  # frozen, on the plan's device
    metrics: dict  # dev metrics
    seconds: float  # spent fine-tuning in this run (0 when loaded)
    identity: str  # names these exact weights (for caches derived from the teacher)


def finetuned_teacher(cfg, plan, train_loader, eval_loaders, log: StepLog) -> FineTuned:
    if cfg.teacher.finetuned_path:
        path = Path(cfg.teacher.finetuned_path).expanduser()
        teacher = load_finetuned(path, plan.num_labels).to(plan.device)
        freeze(teacher)
        metrics = loop.evaluate(teacher, eval_loaders, cfg.task.metrics, plan.device, plan.precision)
        stamp = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in path.iterdir() if p.is_file())
        return FineTuned(teacher, metrics, 0.0, f"{path.resolve()}:{stamp}")

    path = cache_path(cfg, plan.cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        meta = read_json(path / "kdbench_teacher.json")
        if meta is not None:
            teacher = load_finetuned(path, plan.num_labels).to(plan.device)
            return FineTuned(freeze(teacher), meta["metrics"], 0.0, path.name)
        start = time.perf_counter()
        set_seed(cfg.trainer.teacher_seed)
        teacher = models.pretrained_teacher(cfg.teacher, plan.num_labels, cfg.trainer.teacher_seed).to(plan.device)
        # Checkpointed like a stage (a killed or pre-empted builder's successor resumes), next to the cache entry.
        checkpoints = Checkpoints(path.with_name(path.name + ".checkpoints"))  # keyed like the entry: no fingerprint
        if cfg.trainer.teacher_epochs > 0:
            models.prepare_for_training(teacher, cfg.trainer)
            latest = checkpoints.latest()
            if latest is not None:
                logger.info("resuming the teacher's fine-tuning from %s, step %d", latest[1], latest[0]["step"])
            step = loop.supervised_step(teacher, plan.device, plan.precision)
            loop.train("teacher", [teacher], train_loader, cfg.trainer.teacher_epochs, cfg.trainer.teacher_lr, step,
                       cfg.trainer, log, plan.device, checkpoints, latest[0] if latest else None)
        freeze(teacher)
        metrics = loop.evaluate(teacher, eval_loaders, cfg.task.metrics, plan.device, plan.precision)
        seconds = time.perf_counter() - start
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        teacher.save_pretrained(str(tmp))
        write_json(tmp / "kdbench_teacher.json", {"key": teacher_key(cfg), "metrics": metrics, "seconds": seconds})
        tmp.rename(path)
        checkpoints.clear()
        return FineTuned(teacher, metrics, seconds, path.name)


def teacher_logits_table(teacher: FineTuned, train_set, tokenizer, cfg, plan) -> torch.Tensor:
    """The teacher's logits for every training example, [N, C] float32 by `example` number.

    The teacher is deterministic in eval mode, so its prediction-layer targets are computed once per
    (fine-tuned teacher, task subset, tokenisation, precision) and cached on disk, then shared by every
    epoch, seed and objective of a sweep.
    """
    key = {"teacher": teacher.identity, "task": cfg.task.name, "train_limit": cfg.data.train_limit,
           "subset_seed": cfg.data.subset_seed, "max_length": cfg.trainer.max_length,
           "tokenizer": getattr(tokenizer, "name_or_path", ""), "precision": plan.precision, "n": len(train_set)}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = plan.cache_dir / "teacher_logits" / f"{cfg.task.name}-{digest}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.exists():
            return torch.load(path, map_location="cpu", weights_only=True)
        loader = data.make_loader(train_set, tokenizer, cfg.trainer.eval_batch_size, shuffle=False)
        table = logits_table(teacher.model, loader, len(train_set), plan.num_labels, plan.device, plan.precision)
        atomic_write(path, lambda handle: torch.save(table, handle), binary=True)
        return table


def logits_table(model, loader, num_examples: int, num_labels: int, device, precision: str) -> torch.Tensor:
    """A model's logits [N, C] (float32, on the CPU) for every example of a loader, indexed by `example` number."""
    table = torch.empty(num_examples, num_labels)
    with torch.inference_mode():
        for batch in loader:
            batch = loop.to_device(batch, device)
            with loop.autocast(device, precision):
                logits = model(**loop.model_inputs(batch)).logits
            table[batch["example"].cpu()] = logits.float().cpu()
    return table
