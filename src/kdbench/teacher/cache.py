"""The teacher's cache keys and the one helper that reads or builds a cache entry of tensors.

A key holds everything that determines what its entry holds; the entry's name ends with the key's
digest. An optional setting enters a key only when it is on or set (`present` leaves out the
others), so turning one on gives new entries and leaving it off keeps every existing entry's key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import torch
from filelock import FileLock

from kdbench.models.hub import model_identity
from kdbench.runtime import storage

TEACHER_CACHE_VERSION = 2
# The run-wide trainer settings that determine the fine-tuned teacher, beside its stage's block.
TEACHER_RECIPE = ("max_length", "teacher_seed")
# Optimizer settings that enter a key only where they differ from these values, as optional
# settings do (`present`).
OPTIMIZER_DEFAULTS = {"weight_decay_on": "matrices"}


def present(entries: dict) -> dict:
    """The entries whose value is not None."""
    return {name: value for name, value in entries.items() if value is not None}


def digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def teacher_key(plan) -> dict:
    """Everything that determines the fine-tuned teacher (and nothing that varies across a sweep's
    students). The precision and TF32 are the ones resolved for the device: `auto` names none,
    and TF32 enters only where its matmuls run (an fp32 run on a GPU that has them)."""
    trainer, stage = plan.trainer, plan.stages["teacher"]
    recipe = {name: getattr(trainer, name) for name in TEACHER_RECIPE}
    recipe["precision"] = plan.precision
    recipe["stage"] = json.loads(json.dumps(stage_recipe(stage)))
    recipe |= present(
        {"best_checkpoint": trainer.teacher_best_checkpoint or None, "tf32": plan.tf32 or None}
    )
    data = {
        "source": plan.data.source,
        "train_limit": plan.data.train_limit,
        "subset_seed": plan.data.subset_seed,
    }  # the dev subset scores it (its recorded metrics; with best_checkpoint, its weights)
    data |= present({"eval_limit": plan.data.eval_limit})
    return {
        "version": TEACHER_CACHE_VERSION,
        "teacher": teacher_identity(plan.teacher.identity),
        "task": plan.task.name,
        "data": data,
        "recipe": recipe,
        **present({"content": plan.task.content_hash}),
    }  # a user's data file's hash


def teacher_identity(group: dict) -> dict:
    """The resolved teacher group as a key's entry: a checkpoint named by `model_identity` (a local
    folder by its content)."""
    name_or_path = group.get("name_or_path")
    return group | present({"name_or_path": name_or_path and model_identity(name_or_path)})


def stage_recipe(stage) -> dict:
    """The teacher's stage spec as a key's entry: its objective left out (the task's own loss),
    its optimizer's `OPTIMIZER_DEFAULTS` left out where they hold."""
    recipe = asdict(stage) | {"terms": None}
    optimizer = recipe["optimizer"]
    recipe["optimizer"] = {
        name: value
        for name, value in optimizer.items()
        if name not in OPTIMIZER_DEFAULTS or OPTIMIZER_DEFAULTS[name] != value
    }
    return recipe


def cache_path(plan) -> Path:
    """The fine-tuned teacher's cache entry (a folder)."""
    name = f"{plan.task.name}-{plan.teacher.name}-{digest(teacher_key(plan))}"
    return plan.cache_dir / "teachers" / name


def derived_key(identity: str, train_set, tokenizer, plan, augmented: str | None = None) -> dict:
    """What determines anything computed from the frozen teacher of `identity` over the training
    set: the teacher's weights (in bf16 in a bf16 run: `in_run_precision`), the examples and their
    tokenisation (the tokenizer by `tokenizer_identity`), the precision and TF32 (where its matmuls
    run). `augmented` names the augmented set's cache entry."""
    key = {
        "teacher": identity,
        "task": plan.task.name,
        "source": plan.data.source,  # a given teacher's identity does not name it
        "train_limit": plan.data.train_limit,
        "subset_seed": plan.data.subset_seed,
        "max_length": plan.trainer.max_length,
        "tokenizer": tokenizer_identity(tokenizer),
        "precision": plan.precision,
        "n": len(train_set),
    }
    bf16 = "bf16" if plan.precision == "bf16" else None
    return key | present(
        {
            "teacher_weights": bf16,
            "tf32": plan.tf32 or None,
            "augmented": augmented,
            "content": plan.task.content_hash,
        }
    )


def tokenizer_identity(tokenizer) -> str:
    """The tokenizer as a key's entry: named as `model_identity` names a model (a local folder by
    its files' content: its vocabulary, truncation side and the rest of its settings)."""
    name_or_path = str(getattr(tokenizer, "name_or_path", ""))
    return name_or_path and model_identity(name_or_path)


def cached_tensors(folder: Path, prefix: str, key: dict, build, size: int, what: str):
    """The tensors (a tensor or a dict of them) `build()` makes for `key`: read from their cache
    entry in `folder`, or built now and written (complete, or not at all; concurrent runs wait on
    the entry's lock). `size` is the bytes written; `what` names the entry in messages."""
    path = folder / f"{prefix}-{digest(key)}.pt"
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if storage.intact(path, what):
            return torch.load(path, map_location="cpu", weights_only=True)
        tensors = build()
        tmp = path.with_name(f".{path.name}.tmp")
        storage.atomic_write(
            tmp, lambda handle: torch.save(tensors, handle), binary=True, need=size
        )
        storage.publish(tmp, path)
        return tensors
