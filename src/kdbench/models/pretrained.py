"""The teacher before task fine-tuning and its tokenizer: from a checkpoint
(`hub.load`), or the tiny test teacher built from `teacher.shape`."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedModel,
)

from kdbench.models.hub import load, load_model
from kdbench.models.tiny import tiny_config, tiny_tokenizer
from kdbench.planning.specs import TeacherSpec


def teacher_tokenizer(teacher: TeacherSpec, cache_dir: Path):
    if teacher.shape is not None:
        return tiny_tokenizer(cache_dir)
    return load(AutoTokenizer, teacher.name_or_path)


def pretrained_teacher(
    teacher: TeacherSpec, num_labels: int, seed: int, *, mlm: bool = False
) -> PreTrainedModel:
    """The teacher before task fine-tuning: from a checkpoint, or built from `shape` (the tiny test
    teacher).

    `mlm`: the encoder for raw text, with its MLM head when it has one; otherwise a sequence
    classifier (its head new unless the checkpoint has one)."""
    if mlm:
        auto = AutoModelForMaskedLM if teacher.has_mlm_head else AutoModel
    else:
        auto = AutoModelForSequenceClassification
    if teacher.shape is not None:
        torch.manual_seed(seed)
        return auto.from_config(tiny_config(teacher.shape, num_labels))
    return load_model(
        auto,
        teacher.name_or_path,
        owner="the teacher",
        **({} if mlm else {"num_labels": num_labels}),
    )
